#include "verifysvc/drafts/draft_pacer.h"

#include "gtest/gtest.h"
#include "verifysvc/drafts/draft_budget.h"

namespace lookahead::verifysvc {
namespace {

// Options with round numbers, so every probe step can be counted by hand.
DraftPacerOptions SmallOptions() {
  DraftPacerOptions options;
  options.prior_quality = 0.5;
  options.ema_weight = 0.25;
  options.probe_interval = 3;
  options.max_probe_interval = 12;
  options.probe_tokens = 2;
  return options;
}

// Runs `steps` steps that get no draft (no probe due in between).
void SkipSteps(DraftPacer* pacer, int steps) {
  for (int i = 0; i < steps; ++i) {
    const DraftCandidate c = pacer->Candidate(/*cap=*/16, /*depth=*/4);
    ASSERT_EQ(c.floor, 0) << "a probe came early, at skipped step " << i;
    ASSERT_FALSE(pacer->probing());
    pacer->Update(/*verified=*/0, /*accepted=*/0);
  }
}

TEST(DraftPacerTest, StartsAtThePriorQuality) {
  DraftPacerOptions options = SmallOptions();
  options.prior_quality = 0.77;
  DraftPacer pacer(options);
  EXPECT_DOUBLE_EQ(pacer.quality(), 0.77);
  EXPECT_EQ(pacer.probe_interval(), 3);
  EXPECT_FALSE(pacer.probing());

  const DraftCandidate c = pacer.Candidate(/*cap=*/10, /*depth=*/6);
  EXPECT_EQ(c.cap, 10);
  EXPECT_EQ(c.floor, 0);  // A new sequence is not probed: it drafts freely.
  EXPECT_DOUBLE_EQ(c.quality, 0.77);
  EXPECT_EQ(c.depth, 6);
  EXPECT_FALSE(pacer.probing());
}

TEST(DraftPacerTest, DefaultOptionsMatchTheirDocumentation) {
  const DraftPacerOptions options;
  EXPECT_DOUBLE_EQ(options.prior_quality, 0.9);
  EXPECT_DOUBLE_EQ(options.ema_weight, 0.3);
  EXPECT_EQ(options.probe_interval, 8);
  EXPECT_EQ(options.max_probe_interval, 128);
  EXPECT_EQ(options.probe_tokens, 1);
}

TEST(DraftPacerTest, DraftedStepsMoveQualityByTheMovingAverage) {
  DraftPacer pacer(SmallOptions());
  double expected = 0.5;
  // (verified, accepted) of successive drafted steps.
  const int steps[][2] = {{8, 8}, {8, 0}, {1, 1}, {15, 3}, {4, 0}};
  for (const auto& [verified, accepted] : steps) {
    pacer.Candidate(/*cap=*/16, /*depth=*/0);
    pacer.Update(verified, accepted);
    expected += 0.25 * (QualityOf(accepted, verified) - expected);
    EXPECT_NEAR(pacer.quality(), expected, 1e-12)
        << "after verified=" << verified << " accepted=" << accepted;
  }
  // The candidate carries the quality now.
  EXPECT_NEAR(pacer.Candidate(16, 0).quality, expected, 1e-12);
}

TEST(DraftPacerTest, AHitRaisesQualityAndAMissLowersIt) {
  DraftPacer pacer(SmallOptions());
  pacer.Candidate(16, 0);
  pacer.Update(/*verified=*/3, /*accepted=*/3);  // QualityOf = 3 / ln 4 > 2.
  const double after_hit = pacer.quality();
  EXPECT_GT(after_hit, 0.5);
  pacer.Candidate(16, 0);
  pacer.Update(/*verified=*/3, /*accepted=*/0);
  EXPECT_LT(pacer.quality(), after_hit);
  EXPECT_NEAR(pacer.quality(), 0.75 * after_hit, 1e-12);
}

TEST(DraftPacerTest, UndraftedStepsLeaveQualityAlone) {
  DraftPacer pacer(SmallOptions());
  pacer.Candidate(16, 0);
  pacer.Update(/*verified=*/0, /*accepted=*/0);
  EXPECT_DOUBLE_EQ(pacer.quality(), 0.5);
}

TEST(DraftPacerTest, AskingAndGettingNothingLowersQualityAndCountsAsUndrafted) {
  DraftPacer pacer(SmallOptions());
  pacer.Candidate(16, 0);
  pacer.Missed();
  EXPECT_DOUBLE_EQ(pacer.quality(), 0.5 * 0.75);  // as 0 accepted, ema 0.25
  // Steps that got nothing still count toward the next probe.
  pacer.Candidate(16, 0);
  pacer.Missed();
  pacer.Candidate(16, 0);
  pacer.Missed();
  EXPECT_EQ(pacer.Candidate(16, 0).floor, 2);
  // A probe that gets nothing back doubles the interval, as a missed one,
  // and the next probe is a whole interval away.
  pacer.Missed();
  EXPECT_EQ(pacer.probe_interval(), 6);
  SkipSteps(&pacer, 6);
  EXPECT_EQ(pacer.Candidate(16, 0).floor, 2);
}

TEST(DraftPacerTest, ProbesThatGetNothingStayAnIntervalApartAtTheMaximum) {
  // A source with nothing to say (an empty tree per ask): once the interval
  // stops doubling, probes still come max_probe_interval steps apart, not
  // every step.
  DraftPacer pacer(SmallOptions());
  for (int interval : {3, 6, 12, 12, 12}) {
    SCOPED_TRACE(interval);
    SkipSteps(&pacer, interval);
    ASSERT_EQ(pacer.Candidate(16, 0).floor, 2);
    pacer.Missed();
  }
  EXPECT_EQ(pacer.probe_interval(), 12);
}

TEST(DraftPacerTest, InheritStartsWhereTheEndedSequenceLeftOff) {
  // A sequence whose probes all failed: quality down, interval at the max.
  DraftPacer ended(SmallOptions());
  for (int interval : {3, 6, 12}) {
    SkipSteps(&ended, interval);
    ended.Candidate(16, 0);
    ended.Update(/*verified=*/2, /*accepted=*/0);
  }
  ASSERT_EQ(ended.probe_interval(), 12);
  ASSERT_LT(ended.quality(), 0.5);

  DraftPacer next(SmallOptions());
  next.Inherit(ended);
  EXPECT_DOUBLE_EQ(next.quality(), ended.quality());
  EXPECT_EQ(next.probe_interval(), 12);
  EXPECT_DOUBLE_EQ(next.Candidate(16, 0).quality, ended.quality());
  next.Update(0, 0);
  // Its first probe comes after options.probe_interval steps (3), as a new
  // sequence's would; a failed one then waits the inherited interval.
  SkipSteps(&next, 2);
  ASSERT_EQ(next.Candidate(16, 0).floor, 2);
  next.Update(/*verified=*/1, /*accepted=*/0);
  EXPECT_EQ(next.probe_interval(), 12);
  SkipSteps(&next, 12);
  EXPECT_EQ(next.Candidate(16, 0).floor, 2);
}

TEST(DraftPacerTest, InheritingAFreshPacerChangesNothing) {
  DraftPacer fresh(SmallOptions());
  DraftPacer next(SmallOptions());
  next.Inherit(fresh);
  EXPECT_DOUBLE_EQ(next.quality(), 0.5);
  EXPECT_EQ(next.probe_interval(), 3);
  SkipSteps(&next, 3);
  EXPECT_EQ(next.Candidate(16, 0).floor, 2);
}

TEST(DraftPacerTest, ProbeFloorAppearsAfterProbeIntervalUndraftedSteps) {
  DraftPacer pacer(SmallOptions());
  SkipSteps(&pacer, 3);  // probe_interval = 3 steps without a draft.
  const DraftCandidate c = pacer.Candidate(/*cap=*/16, /*depth=*/4);
  EXPECT_TRUE(pacer.probing());
  EXPECT_EQ(c.floor, 2);  // probe_tokens
  EXPECT_EQ(c.cap, 16);
  EXPECT_EQ(c.depth, 4);
}

TEST(DraftPacerTest, ProbeStaysDueUntilADraftIsVerified) {
  DraftPacer pacer(SmallOptions());
  SkipSteps(&pacer, 3);
  // The due probe got nothing verified (e.g. the source had no tree): it is
  // still due next step.
  EXPECT_EQ(pacer.Candidate(16, 0).floor, 2);
  pacer.Update(/*verified=*/0, /*accepted=*/0);
  EXPECT_EQ(pacer.Candidate(16, 0).floor, 2);
  EXPECT_TRUE(pacer.probing());
  EXPECT_EQ(pacer.probe_interval(), 3);  // Unchanged: nothing was verified.
}

TEST(DraftPacerTest, ADraftedStepRestartsTheCountToTheNextProbe) {
  DraftPacer pacer(SmallOptions());
  SkipSteps(&pacer, 2);
  pacer.Candidate(16, 0);
  pacer.Update(/*verified=*/4, /*accepted=*/1);  // Not a probe: drafted.
  SkipSteps(&pacer, 3);  // Fails if the earlier undrafted steps still count.
  EXPECT_EQ(pacer.Candidate(16, 0).floor, 2);
}

TEST(DraftPacerTest, FailedProbesDoubleTheIntervalUpToTheMaximum) {
  DraftPacer pacer(SmallOptions());
  // max_probe_interval = 12: 3 -> 6 -> 12 -> 12.
  for (int interval : {3, 6, 12, 12}) {
    SCOPED_TRACE(interval);
    ASSERT_EQ(pacer.probe_interval(), interval);
    SkipSteps(&pacer, interval);  // No probe before `interval` steps.
    const DraftCandidate c = pacer.Candidate(16, 0);
    ASSERT_EQ(c.floor, 2);
    ASSERT_TRUE(pacer.probing());
    pacer.Update(/*verified=*/2, /*accepted=*/0);
  }
  EXPECT_EQ(pacer.probe_interval(), 12);
}

TEST(DraftPacerTest, AHitProbeResetsTheInterval) {
  DraftPacer pacer(SmallOptions());
  for (int interval : {3, 6}) {
    SkipSteps(&pacer, interval);
    pacer.Candidate(16, 0);
    pacer.Update(/*verified=*/2, /*accepted=*/0);
  }
  ASSERT_EQ(pacer.probe_interval(), 12);
  SkipSteps(&pacer, 12);
  ASSERT_EQ(pacer.Candidate(16, 0).floor, 2);
  pacer.Update(/*verified=*/2, /*accepted=*/1);
  EXPECT_EQ(pacer.probe_interval(), 3);
  SkipSteps(&pacer, 3);
  EXPECT_EQ(pacer.Candidate(16, 0).floor, 2);
}

TEST(DraftPacerTest, NonProbeStepsDoNotChangeTheInterval) {
  DraftPacer pacer(SmallOptions());
  SkipSteps(&pacer, 3);
  pacer.Candidate(16, 0);
  pacer.Update(/*verified=*/2, /*accepted=*/0);  // Failed probe: 3 -> 6.
  ASSERT_EQ(pacer.probe_interval(), 6);
  // Drafted steps that are not probes, hit or miss, leave it alone.
  pacer.Candidate(16, 0);
  ASSERT_FALSE(pacer.probing());
  pacer.Update(/*verified=*/4, /*accepted=*/0);
  EXPECT_EQ(pacer.probe_interval(), 6);
  pacer.Candidate(16, 0);
  pacer.Update(/*verified=*/4, /*accepted=*/4);
  EXPECT_EQ(pacer.probe_interval(), 6);
}

TEST(DraftPacerTest, CandidateFloorNeverExceedsCap) {
  DraftPacerOptions options = SmallOptions();
  options.probe_tokens = 5;
  for (int cap : {-3, 0, 1, 4, 5, 9}) {
    SCOPED_TRACE(cap);
    DraftPacer pacer(options);
    SkipSteps(&pacer, 3);
    const DraftCandidate c = pacer.Candidate(cap, /*depth=*/2);
    EXPECT_TRUE(pacer.probing());
    EXPECT_GE(c.cap, 0);  // A negative cap means none.
    EXPECT_EQ(c.cap, cap < 0 ? 0 : cap);
    EXPECT_LE(c.floor, c.cap);
    EXPECT_EQ(c.floor, cap < 0 ? 0 : (cap < 5 ? cap : 5));
  }
}

TEST(DraftPacerTest, ProbeFloorIsAnAllocatorFloor) {
  // The candidate a due probe yields makes AllocateDraftTokens draft even
  // when quality has sunk to 0 and drafting would not pay.
  DraftPacer pacer(SmallOptions());
  for (int i = 0; i < 20; ++i) {
    pacer.Candidate(16, 0);
    pacer.Update(/*verified=*/8, /*accepted=*/0);
  }
  SkipSteps(&pacer, 3);
  const DraftCandidate probe = pacer.Candidate(/*cap=*/16, /*depth=*/0);
  const StepCostModel cost =
      StepCostModel::Create({{1, 0.02}, {2, 0.04}, {64, 1.0}}).value();
  const DraftCandidate candidates[] = {probe};
  EXPECT_EQ(AllocateDraftTokens(cost, /*base_tokens=*/1, candidates,
                                /*max_draft_tokens=*/64)[0],
            2);
}

}  // namespace
}  // namespace lookahead::verifysvc
