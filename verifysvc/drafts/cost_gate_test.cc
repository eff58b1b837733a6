#include "verifysvc/drafts/cost_gate.h"

#include <gtest/gtest.h>

#include <vector>

namespace lookahead::verifysvc {
namespace {

// 5 ms a token: a window of known cost 16 ms needs 3.2 tokens a step.
constexpr double kSecondsPerToken = 0.005;

TEST(CostGateTest, HopelessKnownCostNeverRunsNorProbes) {
  CostGate gate;
  for (int step = 0; step < 2000; ++step) {
    // At most 2 tokens a step (N = 3) cannot pay 16 ms at 5 ms a token.
    ASSERT_FALSE(gate.Decide(kSecondsPerToken, 0.016, 2)) << step;
    gate.Record(false, 0, 0);
  }
}

// An assistant whose one pass costs more than a token is worth (6 ms
// against 5 ms): even drafting 4 tokens all accepted, a step of it cannot
// pay, so it never runs, not even its optimistic start or a probe, whatever
// it was measured to cost or gain before.
TEST(CostGateTest, MeasuredCostBelowTheFloorNeverRunsNorProbes) {
  CostGate gate;
  for (int step = 0; step < 2000; ++step) {
    ASSERT_FALSE(gate.Decide(kSecondsPerToken, -1, 4, /*min_cost=*/4 * 0.006))
        << step;
    gate.Record(false, 0, 0);
  }
  // A verdict that it paid (all 4 tokens, no measured cost) changes nothing.
  CostGate paid;
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(paid.Decide(kSecondsPerToken, -1, 4));
    paid.Record(true, 4, 0);
  }
  ASSERT_TRUE(paid.Decide(kSecondsPerToken, -1, 4));
  EXPECT_FALSE(paid.Decide(kSecondsPerToken, -1, 4, 4 * 0.006));
}

// Below the bound, the floor stands in for a lower measured cost: 3 of 4
// tokens accepted pay 15 ms, so a 2 ms measured cost runs it, but not a 4
// ms pass floor (16 ms); an optimistic start runs on the bound alone.
TEST(CostGateTest, TheFloorCountsWhereTheMeasuredCostIsLower) {
  CostGate gate;
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(gate.Decide(kSecondsPerToken, -1, 4, 4 * 0.004)) << step;
    gate.Record(true, 3, 0.002);
  }
  EXPECT_TRUE(gate.Decide(kSecondsPerToken, -1, 4, 4 * 0.003));
  EXPECT_FALSE(gate.Decide(kSecondsPerToken, -1, 4, 4 * 0.004));
}

TEST(CostGateTest, CheapKnownCostRunsUntilMeasuredGainFallsShort) {
  CostGate gate;
  // 1 ms of rows: pays while the bound (2 tokens) is trusted.
  EXPECT_TRUE(gate.Decide(kSecondsPerToken, 0.001, 2));
  gate.Record(true, 0, 0);
  EXPECT_TRUE(gate.Decide(kSecondsPerToken, 0.001, 2));
  gate.Record(true, 0, 0);
  // Two runs measured with no credit: 0 tokens never pay 1 ms.
  EXPECT_FALSE(gate.Decide(kSecondsPerToken, 0.001, 2));
  EXPECT_EQ(gate.gain(2), 0);
}

// An assistant whose passes draftsvc ran out of the verifier's sight (a
// background prefill) reports no cost; with no credit either it must stop
// after its optimistic start and only probe, not run every step for free.
TEST(CostGateTest, NoGainStopsItEvenAtNoMeasuredCost) {
  CostGateOptions options;
  options.probe_interval = 8;
  options.max_probe_interval = 64;
  options.probe_steps = 1;
  CostGate gate(options);
  int ran = 0;
  for (int step = 0; step < 300; ++step) {
    const bool on = gate.Decide(kSecondsPerToken, -1, 8);
    ran += on;
    gate.Record(on, 0, 0);
  }
  // 2 optimistic runs, then probes 8, 16, 32, 64, 64, 64 steps apart.
  EXPECT_LE(ran, 9);
  EXPECT_GE(ran, 5);
  EXPECT_EQ(gate.probe_interval(), 64);
}

TEST(CostGateTest, CreditEarnedLaterKeepsItRunning) {
  CostGate gate;
  int ran = 0;
  for (int step = 0; step < 200; ++step) {
    const bool on = gate.Decide(kSecondsPerToken, 0.004, 3);
    if (step >= 100) ran += on;
    // Each run is credited one accepted token a step later: 1 token at
    // 5 ms pays 4 ms.
    gate.Record(on, step > 0 ? 1 : 0, 0);
  }
  EXPECT_EQ(ran, 100);
}

TEST(CostGateTest, MeasuredCostStopsItAndProbesBackOffExponentially) {
  CostGateOptions options;
  options.probe_interval = 4;
  options.max_probe_interval = 32;
  options.probe_steps = 2;
  CostGate gate(options);
  // Unknown cost: runs first, then measures 20 ms for 1 token at 5 ms.
  int ran = 0;
  std::vector<int> runs_at;
  for (int step = 0; step < 400; ++step) {
    const bool on = gate.Decide(kSecondsPerToken, -1, 8);
    if (on) runs_at.push_back(step);
    ran += on;
    gate.Record(on, on ? 1 : 0, on ? 0.020 : 0);
  }
  ASSERT_GE(runs_at.size(), 4u);
  EXPECT_EQ(runs_at[0], 0);
  EXPECT_EQ(runs_at[1], 1);
  // Probes of 2 steps with intervals 4, 8, 16, 32, 32, ...: a few % of steps.
  EXPECT_LT(ran, 40);
  EXPECT_EQ(gate.probe_interval(), 32);
  EXPECT_NEAR(gate.cost(), 0.020, 1e-9);
}

TEST(CostGateTest, ProbeThatPaysWinsItBack) {
  CostGateOptions options;
  options.probe_interval = 4;
  options.probe_steps = 3;
  CostGate gate(options);
  // Phase 1: costs 20 ms for nothing.
  for (int step = 0; step < 100; ++step) {
    const bool on = gate.Decide(kSecondsPerToken, -1, 8);
    gate.Record(on, 0, on ? 0.020 : 0);
  }
  EXPECT_FALSE(gate.Decide(kSecondsPerToken, -1, 8));
  gate.Record(false, 0, 0);
  // Phase 2: the text changed: each run now earns 6 tokens for 10 ms.
  int tail_runs = 0;
  for (int step = 0; step < 600; ++step) {
    const bool on = gate.Decide(kSecondsPerToken, -1, 8);
    gate.Record(on, on ? 6 : 0, on ? 0.010 : 0);
    if (step >= 500) tail_runs += on;
  }
  EXPECT_EQ(tail_runs, 100);
  EXPECT_EQ(gate.probe_interval(), 4);
}

TEST(CostGateTest, DisabledRunsEveryStep) {
  CostGateOptions options;
  options.enabled = false;
  CostGate gate(options);
  for (int step = 0; step < 100; ++step) {
    ASSERT_TRUE(gate.Decide(kSecondsPerToken, 1.0, 0));
    gate.Record(true, 0, 1.0);
  }
}

TEST(CostGateTest, InheritedVerdictSkipsTheOptimisticStart) {
  CostGate first;
  for (int step = 0; step < 40; ++step) {
    const bool on = first.Decide(kSecondsPerToken, -1, 8);
    first.Record(on, 0, on ? 0.020 : 0);
  }
  CostGate fresh, next;
  next.Inherit(first);
  // A fresh gate trusts the bounds; the heir knows it does not pay.
  EXPECT_TRUE(fresh.Decide(kSecondsPerToken, -1, 8));
  EXPECT_FALSE(next.Decide(kSecondsPerToken, -1, 8));
  EXPECT_EQ(next.probe_interval(), first.probe_interval());
}

}  // namespace
}  // namespace lookahead::verifysvc
