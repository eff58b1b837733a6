#include "draftsvc/mix/source_calibration.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

using Obs = SourceCalibration::Observation;

TEST(SourceCalibrationTest, StartsAtThePrior) {
  SourceCalibration calibration;
  const CalibrationTable table = calibration.Snapshot();
  EXPECT_FLOAT_EQ(table.rate(CandidateSource::kPrompt, 1, 0), 0.6f);
  EXPECT_FLOAT_EQ(table.rate(CandidateSource::kOutput, 3, 0), 0.5f);
  EXPECT_FLOAT_EQ(table.rate(CandidateSource::kNgram, 1, 1), 0.35f / 2);
  // Deep and low-ranked nodes share the last buckets.
  EXPECT_FLOAT_EQ(table.rate(CandidateSource::kOutput, 100, 50),
                  table.rate(CandidateSource::kOutput, 16, 3));
  EXPECT_EQ(calibration.totals(CandidateSource::kNgram).proposed, 0);
}

TEST(SourceCalibrationTest, MovesTowardObservedAcceptance) {
  SourceCalibration calibration;
  // n-gram depth-1 rank-0 nodes are accepted 90% of the time, output
  // depth-2 rank-0 nodes 10%.
  for (int i = 0; i < 500; ++i) {
    const std::vector<Obs> batch = {
        {CandidateSource::kNgram, 1, 0, i % 10 != 0},
        {CandidateSource::kOutput, 2, 0, i % 10 == 0},
    };
    calibration.Observe(batch);
  }
  const CalibrationTable table = calibration.Snapshot();
  EXPECT_NEAR(table.rate(CandidateSource::kNgram, 1, 0), 0.9f, 0.03f);
  EXPECT_NEAR(table.rate(CandidateSource::kOutput, 2, 0), 0.1f, 0.03f);
  // Other cells keep the prior.
  EXPECT_FLOAT_EQ(table.rate(CandidateSource::kOutput, 1, 0), 0.5f);
  EXPECT_EQ(calibration.totals(CandidateSource::kNgram).judged, 500);
  calibration.CountProposed({0, 0, 7, 0});
  EXPECT_EQ(calibration.totals(CandidateSource::kNgram).proposed, 7);
  EXPECT_EQ(calibration.totals(CandidateSource::kNgram).accepted, 450);
  const std::vector<float> depths =
      calibration.DepthAcceptance(CandidateSource::kOutput);
  ASSERT_EQ(depths.size(), CalibrationTable::kDepthBuckets);
  EXPECT_NEAR(depths[1], 0.1f, 0.03f);
}

TEST(SourceCalibrationTest, LongMatchesAreCalibratedApart) {
  SourceCalibration calibration;
  // Prompt depth-1 nodes behind a 9-token match are accepted 90% of the
  // time, behind a 1-token match 20%.
  for (int i = 0; i < 500; ++i) {
    const std::vector<Obs> batch = {
        {CandidateSource::kPrompt, 1, 0, i % 10 != 0, 9},
        {CandidateSource::kPrompt, 1, 0, i % 5 == 0, 1},
    };
    calibration.Observe(batch);
  }
  const CalibrationTable table = calibration.Snapshot();
  EXPECT_NEAR(table.rate(CandidateSource::kPrompt, 1, 0, 9), 0.9f, 0.03f);
  EXPECT_NEAR(table.rate(CandidateSource::kPrompt, 1, 0, 100), 0.9f, 0.03f);
  EXPECT_NEAR(table.rate(CandidateSource::kPrompt, 1, 0, 1), 0.2f, 0.03f);
  // No match evidence shares the 1-token cell; unseen lengths keep the
  // prior.
  EXPECT_FLOAT_EQ(table.rate(CandidateSource::kPrompt, 1, 0, 0),
                  table.rate(CandidateSource::kPrompt, 1, 0, 1));
  EXPECT_FLOAT_EQ(table.rate(CandidateSource::kPrompt, 1, 0, 3), 0.6f);
  // The reported depth curve pools every length: 55%.
  EXPECT_NEAR(calibration.DepthAcceptance(CandidateSource::kPrompt)[0], 0.55f,
              0.03f);
}

TEST(SourceCalibrationTest, MatchBuckets) {
  EXPECT_EQ(CalibrationTable::MatchBucket(-1), 0);
  EXPECT_EQ(CalibrationTable::MatchBucket(0), 0);
  EXPECT_EQ(CalibrationTable::MatchBucket(1), 0);
  EXPECT_EQ(CalibrationTable::MatchBucket(2), 1);
  EXPECT_EQ(CalibrationTable::MatchBucket(3), 2);
  EXPECT_EQ(CalibrationTable::MatchBucket(4), 2);
  EXPECT_EQ(CalibrationTable::MatchBucket(5), 3);
  EXPECT_EQ(CalibrationTable::MatchBucket(8), 3);
  EXPECT_EQ(CalibrationTable::MatchBucket(9), 4);
  EXPECT_EQ(CalibrationTable::MatchBucket(255),
            CalibrationTable::kMatchBuckets - 1);
}

TEST(SourceCalibrationTest, DecayForgetsOldTraffic) {
  SourceCalibration calibration(CalibrationOptions{8.0, 0.99});
  std::vector<Obs> accepted(2000, {CandidateSource::kPrompt, 1, 0, true});
  calibration.Observe(accepted);
  EXPECT_GT(calibration.Snapshot().rate(CandidateSource::kPrompt, 1, 0), 0.95f);
  std::vector<Obs> rejected(2000, {CandidateSource::kPrompt, 1, 0, false});
  calibration.Observe(rejected);
  EXPECT_LT(calibration.Snapshot().rate(CandidateSource::kPrompt, 1, 0), 0.05f);
}

TEST(SourceCalibrationTest, ConcurrentObserversCountEverything) {
  SourceCalibration calibration;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        const Obs o{CandidateSource::kOutput, 1 + i % 5, i % 3, i % 2 == 0};
        calibration.Observe({&o, 1});
        calibration.Snapshot();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(calibration.totals(CandidateSource::kOutput).judged, 4000);
  EXPECT_EQ(calibration.totals(CandidateSource::kOutput).accepted, 2000);
}

}  // namespace
}  // namespace lookahead::draftsvc
