#include "verifysvc/draft_budget.h"

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

int Sum(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0); }

TEST(StepCostModelTest, InterpolatesAndExtrapolates) {
  StepCostModel cost = CpuCost();
  EXPECT_DOUBLE_EQ(cost.Seconds(1), 0.020);
  EXPECT_DOUBLE_EQ(cost.Seconds(0), 0.020);
  EXPECT_NEAR(cost.Seconds(40), 0.055 + 0.095 * 24 / 48, 1e-12);
  EXPECT_NEAR(cost.Seconds(128), 0.15 + 0.095 * 64 / 48, 1e-12);
}

TEST(StepCostModelTest, ObserveMovesTheNearestPointOnly) {
  StepCostModel cost = CpuCost();
  cost.Observe(16, 0.155, 0.5);
  EXPECT_NEAR(cost.Seconds(16), 0.105, 1e-12);
  EXPECT_DOUBLE_EQ(cost.Seconds(1), 0.020);
  cost.Observe(40, 1.0, 0.5);  // 24 tokens from 16 and 64: no point is near.
  EXPECT_NEAR(cost.Seconds(64), 0.15, 1e-12);
}

TEST(StepCostModelTest, RejectsBadPoints) {
  EXPECT_FALSE(StepCostModel::Create({}).ok());
  EXPECT_FALSE(StepCostModel::Create({{2, 0.1}, {2, 0.2}}).ok());
  EXPECT_FALSE(StepCostModel::Create({{0, 0.1}}).ok());
  EXPECT_FALSE(StepCostModel::Create({{1, 0.0}}).ok());
}

TEST(ExpectedAcceptedTest, GrowsSublinearlyAndNeverExceedsTokens) {
  DraftCandidate c{/*cap=*/64, /*floor=*/0, /*accepted=*/2.0, /*verified=*/16};
  EXPECT_EQ(ExpectedAccepted(c, 0), 0);
  EXPECT_NEAR(ExpectedAccepted(c, 16), 2.0, 1e-12);
  EXPECT_LT(ExpectedAccepted(c, 8), 2.0);
  EXPECT_GT(ExpectedAccepted(c, 32), 2.0);
  EXPECT_LT(ExpectedAccepted(c, 32), 4.0);
  c.accepted = 10;
  EXPECT_LE(ExpectedAccepted(c, 3), 3.0);
}

TEST(AllocateDraftTokensTest, FailingDraftsGetNothing) {
  std::vector<DraftCandidate> c = {{16, 0, 0.0, 16}, {16, 0, 0.01, 16}};
  EXPECT_EQ(AllocateDraftTokens(CpuCost(), 2, c, 62), std::vector<int>({0, 0}));
}

TEST(AllocateDraftTokensTest, GoodDraftsGetTheirCapWhenTheStepPays) {
  std::vector<DraftCandidate> c = {{16, 0, 6.0, 16}};
  std::vector<int> got = AllocateDraftTokens(CpuCost(), 1, c, 63);
  EXPECT_GE(got[0], 12);  // Most of the cap: the step pays.
}

TEST(AllocateDraftTokensTest, FlatCostSpendsTheWholeBudget) {
  std::vector<DraftCandidate> c(4, DraftCandidate{16, 0, 1.0, 16});
  std::vector<int> got = AllocateDraftTokens(FlatCost(), 4, c, 60);
  EXPECT_EQ(Sum(got), 60);  // 4 x 15: below every cap of 16.
}

TEST(AllocateDraftTokensTest, BetterSequencesGetMore) {
  std::vector<DraftCandidate> c = {{32, 0, 0.5, 16}, {32, 0, 4.0, 16}};
  std::vector<int> got = AllocateDraftTokens(FlatCost(), 2, c, 24);
  EXPECT_EQ(Sum(got), 24);
  EXPECT_GT(got[1], got[0]);
}

TEST(AllocateDraftTokensTest, FloorsAreKeptAndCapsRespected) {
  std::vector<DraftCandidate> c = {{16, 4, 0.0, 16}, {2, 0, 5.0, 16}};
  std::vector<int> got = AllocateDraftTokens(CpuCost(), 2, c, 0);
  EXPECT_EQ(got[0], 4);  // A probe, even over the budget.
  EXPECT_EQ(got[1], 0);  // No budget left.
  got = AllocateDraftTokens(FlatCost(), 2, c, 62);
  EXPECT_EQ(got[1], 2);  // Capped.
}

TEST(AllocateDraftTokensTest, NeverPredictsSlowerThanPlainDecoding) {
  // Whatever it picks, the expected rate is at least plain decoding's.
  for (double accepted : {0.0, 0.1, 0.5, 1.0, 2.0, 4.0}) {
    std::vector<DraftCandidate> c(3, DraftCandidate{16, 0, accepted, 16});
    StepCostModel cost = CpuCost();
    std::vector<int> got = AllocateDraftTokens(cost, 3, c, 61);
    double expected = 3;
    for (size_t i = 0; i < c.size(); ++i) {
      expected += ExpectedAccepted(c[i], got[i]);
    }
    EXPECT_GE(expected / cost.Seconds(3 + Sum(got)),
              3 / cost.Seconds(3) - 1e-12)
        << accepted;
  }
}

}  // namespace
}  // namespace lookahead::verifysvc
