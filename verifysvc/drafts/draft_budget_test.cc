#include "verifysvc/drafts/draft_budget.h"

#include <cmath>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::verifysvc {
namespace {

// A CPU-like cost: flat for 1-2 tokens (matrix-vector), then a step and a
// slope (matrix-matrix), as engine_bench measures here.
StepCostModel CpuCost() {
  return StepCostModel::Create(
             {{1, 0.020}, {2, 0.021}, {3, 0.050}, {16, 0.055}, {64, 0.15}})
      .value();
}

// A GPU-like cost: flat up to 64 tokens.
StepCostModel FlatCost() {
  return StepCostModel::Create({{1, 0.010}, {64, 0.011}}).value();
}

int Sum(const std::vector<int>& v) {
  return std::accumulate(v.begin(), v.end(), 0);
}

TEST(StepCostModelTest, InterpolatesAndExtrapolates) {
  StepCostModel cost = CpuCost();
  EXPECT_DOUBLE_EQ(cost.Seconds(1), 0.020);
  EXPECT_DOUBLE_EQ(cost.Seconds(0), 0.020);
  EXPECT_NEAR(cost.Seconds(40), 0.055 + 0.095 * 24 / 48, 1e-12);
  EXPECT_NEAR(cost.Seconds(128), 0.15 + 0.095 * 64 / 48, 1e-12);
}

TEST(StepCostModelTest, ObserveMovesTheNearestPointAndScalesTheUnseen) {
  StepCostModel cost = CpuCost();
  cost.Observe(16, 0.065, 0.5);
  EXPECT_NEAR(cost.Seconds(16), 0.060, 1e-12);
  // The machine runs 60/55 as slow as at start: so do the unseen sizes.
  EXPECT_NEAR(cost.Seconds(1), 0.020 * 0.060 / 0.055, 1e-12);
  EXPECT_NEAR(cost.Seconds(64), 0.15 * 0.060 / 0.055, 1e-12);
  cost.Observe(16, 10.0, 0.5);  // An outlier moves it by at most w / 2.
  EXPECT_NEAR(cost.Seconds(16), 0.060 * 1.25, 1e-12);
  cost.Observe(1, 0.020, 0.5);
  cost.Observe(40, 1.0, 0.5);  // 24 tokens from 16 and 64: no point is near.
  EXPECT_NEAR(cost.Seconds(64), 0.15 * 0.075 / 0.055, 1e-12);
  // 2 and 3 lie between the seen 1 and 16: on the line between them.
  const double one = cost.Seconds(1);
  EXPECT_NEAR(cost.Seconds(2), one + (0.075 - one) / 15, 1e-12);
}

TEST(StepCostModelTest, PoolsPointsThatDipAsTokensGrow) {
  // A start-up where the 1-token pass ran slow: no size may look cheaper
  // than a smaller one, so a draft row never looks free.
  StepCostModel cost =
      StepCostModel::Create({{1, 0.010}, {2, 0.008}, {3, 0.012}}).value();
  EXPECT_NEAR(cost.Seconds(1), 0.009, 1e-12);
  EXPECT_NEAR(cost.Seconds(2), 0.009, 1e-12);
  EXPECT_NEAR(cost.Seconds(3), 0.012, 1e-12);
  cost = StepCostModel::Create({{1, 0.012}, {2, 0.009}, {4, 0.006}}).value();
  EXPECT_NEAR(cost.Seconds(4), 0.009, 1e-12);  // all three pooled
}

TEST(StepCostModelTest, ObservedPointsBoundTheOthersAndLineUpTheUnseen) {
  // Start-up passes ran three times slower than served ones (a hiccup
  // while it measured): after the sizes served are seen, the sizes between
  // them must not stay dearer than larger ones, or the budget would never
  // pick them and never see them.
  StepCostModel cost =
      StepCostModel::Create({{1, 0.010}, {2, 0.030}, {3, 0.030}, {4, 0.031}})
          .value();
  cost.Observe(4, 0.020, 1.0);
  EXPECT_NEAR(cost.Seconds(4), 0.020, 1e-12);
  // Below the one seen size, the start-up values scaled as it was.
  EXPECT_NEAR(cost.Seconds(3), 0.030 * 0.020 / 0.031, 1e-12);
  EXPECT_NEAR(cost.Seconds(2), 0.030 * 0.020 / 0.031, 1e-12);
  EXPECT_NEAR(cost.Seconds(1), 0.010 * 0.020 / 0.031, 1e-12);
  cost.Observe(1, 0.008, 1.0);
  EXPECT_NEAR(cost.Seconds(1), 0.008, 1e-12);
  EXPECT_NEAR(cost.Seconds(2), 0.012, 1e-12);  // on the line from 1 to 4
  EXPECT_NEAR(cost.Seconds(3), 0.016, 1e-12);
  // A seen point keeps its own value; a larger one seen costing less pulls
  // it down, never the other way round.
  cost.Observe(2, 0.010, 1.0);
  EXPECT_NEAR(cost.Seconds(2), 0.010, 1e-12);
  EXPECT_NEAR(cost.Seconds(3), 0.015, 1e-12);  // now between 2 and 4
  cost.Observe(1, 0.012, 1.0);
  EXPECT_NEAR(cost.Seconds(1), 0.012, 1e-12);
  EXPECT_NEAR(cost.Seconds(2), 0.012, 1e-12);  // raised to stay monotone
  EXPECT_NEAR(cost.Seconds(4), 0.020, 1e-12);
}

TEST(StepCostModelTest, UnseenSizesFollowTheServedLevel) {
  // Start-up passes ran slow at every size; served 1-token passes are
  // seen at 60% of it. The larger sizes, not yet seen, scale with it, so a
  // draft row costs what the start-up shape says, not a stale 67% more.
  StepCostModel cost =
      StepCostModel::Create({{1, 0.0045}, {2, 0.0046}, {4, 0.0051}}).value();
  for (int i = 0; i < 200; ++i) cost.Observe(1, 0.0027);
  EXPECT_NEAR(cost.Seconds(1), 0.0027, 1e-7);
  EXPECT_NEAR(cost.Seconds(2) / cost.Seconds(1), 0.0046 / 0.0045, 1e-3);
  EXPECT_NEAR(cost.Seconds(4) / cost.Seconds(1), 0.0051 / 0.0045, 1e-3);
}

TEST(StepCostModelTest, RejectsBadPoints) {
  EXPECT_FALSE(StepCostModel::Create({}).ok());
  EXPECT_FALSE(StepCostModel::Create({{2, 0.1}, {2, 0.2}}).ok());
  EXPECT_FALSE(StepCostModel::Create({{0, 0.1}}).ok());
  EXPECT_FALSE(StepCostModel::Create({{1, 0.0}}).ok());
}

TEST(ExpectedAcceptedTest, GrowsLogarithmicallyWithinBounds) {
  DraftCandidate c{/*cap=*/64, /*floor=*/0, /*quality=*/1.0, /*depth=*/0};
  EXPECT_EQ(ExpectedAccepted(c, 0), 0);
  EXPECT_NEAR(ExpectedAccepted(c, 1), std::log(2.0), 1e-12);
  EXPECT_NEAR(ExpectedAccepted(c, 15), std::log(16.0), 1e-12);
  c.quality = 10;
  EXPECT_EQ(ExpectedAccepted(c, 3), 3.0);  // At most every token.
  c.depth = 8;
  EXPECT_EQ(ExpectedAccepted(c, 64), 8.0);  // At most the branch depth.
}

TEST(ExpectedAcceptedTest, QualityCarriesAcrossDraftSizes) {
  // A 1-token draft accepted every time predicts ~4 tokens from 15.
  DraftCandidate c{64, 0, QualityOf(1, 1), 0};
  EXPECT_NEAR(ExpectedAccepted(c, 15), 4.0, 1e-12);
  EXPECT_NEAR(QualityOf(0, 16), 0.0, 1e-12);
  EXPECT_NEAR(QualityOf(4, 15), 4 / std::log(16.0), 1e-12);
}

TEST(AllocateDraftTokensTest, FailingDraftsGetNothing) {
  std::vector<DraftCandidate> c = {{16, 0, 0.0, 0}, {16, 0, 0.003, 0}};
  EXPECT_EQ(AllocateDraftTokens(CpuCost(), 2, c, 62), std::vector<int>({0, 0}));
}

TEST(AllocateDraftTokensTest, GoodDraftsGetTheirCapWhenTheStepPays) {
  std::vector<DraftCandidate> c = {{16, 0, 2.0, 0}};
  std::vector<int> got = AllocateDraftTokens(CpuCost(), 1, c, 63);
  EXPECT_GE(got[0], 12);  // Most of the cap: the step pays.
}

TEST(AllocateDraftTokensTest, FlatCostSpendsTheWholeBudget) {
  std::vector<DraftCandidate> c(4, DraftCandidate{16, 0, 0.35, 0});
  std::vector<int> got = AllocateDraftTokens(FlatCost(), 4, c, 60);
  EXPECT_EQ(Sum(got), 60);  // 4 x 15: below every cap of 16.
}

TEST(AllocateDraftTokensTest, BetterSequencesGetMore) {
  std::vector<DraftCandidate> c = {{32, 0, 0.2, 0}, {32, 0, 1.5, 0}};
  std::vector<int> got = AllocateDraftTokens(FlatCost(), 2, c, 24);
  EXPECT_EQ(Sum(got), 24);
  EXPECT_GT(got[1], got[0]);
}

TEST(AllocateDraftTokensTest, FloorsAreKeptAndCapsRespected) {
  std::vector<DraftCandidate> c = {{16, 4, 0.0, 0}, {2, 0, 2.0, 0}};
  std::vector<int> got = AllocateDraftTokens(CpuCost(), 2, c, 0);
  EXPECT_EQ(got[0], 4);  // A probe, even over the budget.
  EXPECT_EQ(got[1], 0);  // No budget left.
  got = AllocateDraftTokens(FlatCost(), 2, c, 62);
  EXPECT_EQ(got[1], 2);  // Capped.
}

TEST(AllocateDraftTokensTest, NeverPredictsSlowerThanPlainDecoding) {
  // Whatever it picks, the expected rate is at least plain decoding's.
  for (double quality : {0.0, 0.05, 0.2, 0.5, 1.0, 2.0}) {
    std::vector<DraftCandidate> c(3, DraftCandidate{16, 0, quality, 8});
    StepCostModel cost = CpuCost();
    std::vector<int> got = AllocateDraftTokens(cost, 3, c, 61);
    double expected = 3;
    for (size_t i = 0; i < c.size(); ++i) {
      expected += ExpectedAccepted(c[i], got[i]);
    }
    EXPECT_GE(expected / cost.Seconds(3 + Sum(got)),
              3 / cost.Seconds(3) - 1e-12)
        << quality;
  }
}

}  // namespace
}  // namespace lookahead::verifysvc
