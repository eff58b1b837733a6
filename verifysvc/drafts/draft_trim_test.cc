#include "verifysvc/drafts/draft_trim.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::verifysvc {
namespace {

using ::testing::ElementsAre;

// This machine's measured curve (ms): 1: 5.6, 2: 6.7, 4: 9.1, 8: 17.1.
StepCostModel CpuCost() {
  return *StepCostModel::Create(
      {{1, 5.6e-3}, {2, 6.7e-3}, {4, 9.1e-3}, {8, 17.1e-3}, {16, 29.3e-3}});
}

// A flat curve up to 16 tokens (a GPU below its critical length).
StepCostModel FlatCost() {
  return *StepCostModel::Create({{1, 1e-3}, {16, 1e-3}, {32, 2e-3}});
}

TEST(TrimByScoreTest, KeepsNodesWorthTheirRows) {
  const std::vector<float> sure = {0.95f, 0.9f, 0.85f, 0.05f, 0.04f};
  // Rate with 3 nodes: (1 + 2.7) / 9.1 ms beats 1 / 5.6 ms; the 4th node
  // adds 0.05 tokens for ~2 ms.
  EXPECT_THAT(TrimByScore(CpuCost(), 1, {{sure}}, 64), ElementsAre(3));
}

TEST(TrimByScoreTest, LongShotsAloneAreNotVerified) {
  const std::vector<float> weak = {0.1f, 0.05f};
  EXPECT_THAT(TrimByScore(CpuCost(), 1, {{weak}}, 64), ElementsAre(0));
}

TEST(TrimByScoreTest, AFlatCurveVerifiesEverythingThatMightHit) {
  const std::vector<float> weak = {0.3f, 0.1f, 0.01f};
  EXPECT_THAT(TrimByScore(FlatCost(), 1, {{weak}}, 64), ElementsAre(3));
}

TEST(TrimByScoreTest, BestNodesWinAcrossSequences) {
  const std::vector<float> a = {0.9f, 0.2f};
  const std::vector<float> b = {0.8f, 0.7f};
  // On the CPU curve with 2 roots: a's 0.9 and b's 0.8 pay (3.7 tokens in
  // 9.1 ms); b's 0.7 would make it 4.4 in ~11.1 ms, a's 0.2 less still.
  EXPECT_THAT(TrimByScore(CpuCost(), 2, {{a}, {b}}, 64), ElementsAre(1, 1));
  // At most one draft token in the step: the best one.
  EXPECT_THAT(TrimByScore(CpuCost(), 2, {{a}, {b}}, 1), ElementsAre(1, 0));
}

TEST(TrimByScoreTest, ScoresAreClampedAndNeverRiseAlongTheTree) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // The 0.99 after a 0.1 is lowered to 0.1: not worth it.
  const std::vector<float> rising = {0.1f, 0.99f, 0.99f};
  EXPECT_THAT(TrimByScore(CpuCost(), 1, {{rising}}, 64), ElementsAre(0));
  const std::vector<float> wild = {7.0f, nan, -1.0f};
  EXPECT_THAT(TrimByScore(CpuCost(), 1, {{wild}}, 64), ElementsAre(1));
}

TEST(TrimByScoreTest, ScaleCorrectsAnOptimisticCalibration) {
  const std::vector<float> scores = {0.9f, 0.9f, 0.9f};
  EXPECT_THAT(TrimByScore(CpuCost(), 1, {{scores, 1.0}}, 64), ElementsAre(3));
  // This sequence accepts a tenth of what its namespace predicts.
  EXPECT_THAT(TrimByScore(CpuCost(), 1, {{scores, 0.1}}, 64), ElementsAre(0));
}

TEST(TrimByScoreTest, FloorsAreKept) {
  const std::vector<float> weak = {0.01f, 0.01f};
  EXPECT_THAT(TrimByScore(CpuCost(), 1, {{weak, 1.0, 1}}, 64), ElementsAre(1));
  EXPECT_THAT(TrimByScore(CpuCost(), 1, {{weak, 1.0, 9}}, 0), ElementsAre(2));
}

TEST(TrimByScoreTest, EmptyInputs) {
  EXPECT_TRUE(TrimByScore(CpuCost(), 0, {}, 64).empty());
  EXPECT_THAT(TrimByScore(CpuCost(), 1, {{}}, 64), ElementsAre(0));
}

}  // namespace
}  // namespace lookahead::verifysvc
