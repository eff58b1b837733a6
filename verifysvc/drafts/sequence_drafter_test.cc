// The drafting policy (DraftPlanner over SequenceDrafters) on a fake source,
// without a model: the budget follows the cost curve and the room left;
// pacing stops asking after misses and probes at a bounded rate; the cost
// gates withhold the assistant and the Jacobi window when they cannot pay;
// a sequence that named its sources waits for the open's answer without
// blocking; a namespace's hopeless pacing carries over; one place counts
// draft tokens per source.
#include "verifysvc/drafts/sequence_drafter.h"

#include <torch/types.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "verifysvc/drafts/draft_budget.h"
#include "verifysvc/drafts/draft_fanout.h"
#include "verifysvc/drafts/draft_observer.h"
#include "verifysvc/drafts/draft_planner.h"
#include "verifysvc/drafts/draft_source.h"

namespace lookahead::verifysvc {
namespace {

using engine::DraftSourceTag;
using engine::DraftTree;

constexpr int32_t kVocab = 32;
constexpr int32_t kRoot = 1;
constexpr int32_t kBonus = 2;
constexpr double kSecondsPerToken = 0.02;

// A source that proposes a chain of tokens 10, 11, ... (or nothing) for
// every ask, and records what it is asked and told.
class FakeSource : public DraftSource {
 public:
  std::string name() const override { return "fake"; }
  int64_t Open(const DraftPolicy& policy,
               absl::Span<const int32_t> prompt) override {
    return ++opened;
  }
  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override {
    observed.insert(observed.end(), tokens.begin(), tokens.end());
  }
  bool OpenAnswered(int64_t handle) const override { return answered; }
  absl::Status Failure(int64_t handle) const override { return failure; }
  std::vector<DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                 bool* called) override {
    *called = false;
    std::vector<DraftTree> trees(asks.size());
    for (size_t i = 0; i < asks.size(); ++i) {
      this->asks.push_back(asks[i]);
      if (asks[i].budget == 0) continue;
      *called = true;
      // A model run in process: two passes and a gate decision per ask.
      stats.model_seconds += models ? 0.25 : 0;
      stats.model_passes += models ? 2 : 0;
      stats.model_gate_runs += models ? 1 : 0;
      for (int j = 0; proposes && j < asks[i].budget; ++j) {
        trees[i].tokens.push_back(10 + j);
        trees[i].parents.push_back(j - 1);
        trees[i].sources.push_back(DraftSourceTag::kTrie);
      }
    }
    return trees;
  }
  void Close(int64_t handle) override { ++closes; }
  DraftCost cost() const override { return draft_cost; }
  DraftSourceStats Stats() const override { return stats; }

  bool proposes = true;  // false: empty trees (every ask misses)
  bool models = false;   // true: counts model passes as an assistant would
  DraftSourceStats stats;
  bool answered = true;
  absl::Status failure;
  DraftCost draft_cost;
  int64_t opened = 0;
  int closes = 0;
  std::vector<DraftAsk> asks;
  std::vector<int32_t> observed;
};

class RecordingObserver : public DraftObserver {
 public:
  void OnDraftVerified(int verified, int accepted) override {
    this->verified += verified;
    this->accepted += accepted;
  }
  void OnDraftSourceVerified(DraftSourceTag source, int verified,
                             int accepted) override {
    per_source.push_back({static_cast<int>(source), verified, accepted});
  }
  void OnCostGate(GatedMechanism mechanism, bool ran) override {
    ++gate[static_cast<int>(mechanism)][ran ? 1 : 0];
  }
  void OnAssistantPasses(double seconds, int64_t passes) override {
    assistant_seconds += seconds;
    assistant_passes += passes;
  }

  int64_t verified = 0, accepted = 0;
  double assistant_seconds = 0;
  int64_t assistant_passes = 0;
  std::vector<std::array<int, 3>> per_source;  // {tag, verified, accepted}
  std::array<std::array<int, 2>, kNumGatedMechanisms> gate{};  // {off, ran}
};

// A GPU-like cost: flat up to 64 rows.
StepCostModel FlatCost() {
  return StepCostModel::Create({{1, 0.010}, {64, 0.011}}).value();
}
// A CPU-like cost (draft_budget_test.cc): a step after 2 rows, then a slope.
StepCostModel CpuCost() {
  return StepCostModel::Create(
             {{1, 0.020}, {2, 0.021}, {3, 0.050}, {16, 0.055}, {64, 0.15}})
      .value();
}
// A row beyond the root costs nine roots: no draft pays.
StepCostModel SteepCost() {
  return StepCostModel::Create({{1, 0.010}, {2, 0.100}}).value();
}

DraftPolicy Policy(int decoding_length = 6) {
  DraftPolicy policy;
  policy.mode = DraftMode::kTrieHierarchical;
  policy.decoding_length = decoding_length;
  policy.name_space = "test";
  return policy;
}

DrafterOptions Options() {
  DrafterOptions options;
  options.charge_draft_calls = false;  // the fake's calls take no time
  options.pace_repeats = false;
  // These curves take 10-20 ms a pass: asks follow the pacer alone unless
  // a test says otherwise (SlowPassesAskFreelyWhereThePacerGivesNone).
  options.free_ask_min_pass_seconds = 0;
  return options;
}

class SequenceDrafterTest : public ::testing::Test {
 protected:
  void SetUp() override { cost_ = std::make_unique<StepCostModel>(FlatCost()); }

  // A planner over the fake source with `cost` and `options`.
  DraftPlanner* NewPlanner(StepCostModel cost,
                           DrafterOptions options = Options()) {
    cost_ = std::make_unique<StepCostModel>(std::move(cost));
    fanout_ = std::make_unique<DraftFanout>(std::vector<DraftSource*>{&source_},
                                            kVocab);
    planner_ = std::make_unique<DraftPlanner>(fanout_.get(), cost_.get(),
                                              kVocab, options, &observer_);
    return planner_.get();
  }

  std::unique_ptr<SequenceDrafter> Open(const DraftPolicy& policy) {
    return planner_->Open(policy, engine::SamplingParams(), {3, 4, 5, 6});
  }

  // One decoding step of `drafter`: drafts with `room` rows left in its
  // cache, accepts the first `hits` nodes of its chain (at most the tree),
  // emits them and a bonus token. Returns the step's draft.
  SequenceDraft Step(SequenceDrafter* drafter, int hits, int room = 64) {
    StepDrafts step = planner_->Draft({drafter}, {room}, /*prefill_tokens=*/0,
                                      /*max_step_tokens=*/64, kSecondsPerToken);
    SequenceDraft draft = std::move(step.drafts[0]);
    const DraftTree& tree = draft.tree;
    const int accepted = std::min(hits, tree.size());
    std::vector<int32_t> path = {0}, tokens;
    for (int m = 1; m <= accepted; ++m) {
      path.push_back(m);
      tokens.push_back(tree.tokens[m - 1]);
    }
    tokens.push_back(kBonus);
    const torch::Tensor logits = torch::zeros({1 + tree.size(), kVocab});
    double prediction_seconds = 0;
    drafter->Verified(tree, kRoot, logits, path, tokens, &prediction_seconds);
    drafter->Emitted(tokens, tokens, accepted, &tree, path);
    return draft;
  }

  FakeSource source_;
  RecordingObserver observer_;
  std::unique_ptr<StepCostModel> cost_;
  std::unique_ptr<DraftFanout> fanout_;
  std::unique_ptr<DraftPlanner> planner_;
};

TEST_F(SequenceDrafterTest, BudgetFollowsTheCostCurveAndTheRoomLeft) {
  NewPlanner(FlatCost());
  std::unique_ptr<SequenceDrafter> drafter = Open(Policy(6));
  ASSERT_NE(drafter, nullptr);
  // A flat curve pays for the whole decoding length.
  SequenceDraft draft = Step(drafter.get(), 6);
  EXPECT_EQ(draft.asked, 6);
  EXPECT_EQ(draft.tree.size(), 6);
  // The cache's room bounds it.
  draft = Step(drafter.get(), 6, /*room=*/3);
  EXPECT_EQ(draft.asked, 3);
  EXPECT_EQ(draft.tree.size(), 3);
  planner_->Close(drafter.get());

  // A curve on which no row pays: nothing is asked, no call does work.
  NewPlanner(SteepCost());
  drafter = Open(Policy(6));
  StepDrafts step =
      planner_->Draft({drafter.get()}, {64}, 0, 64, kSecondsPerToken);
  EXPECT_EQ(step.drafts[0].asked, 0);
  EXPECT_TRUE(step.drafts[0].tree.empty());
  EXPECT_EQ(step.requested, 0);
  ASSERT_FALSE(source_.asks.empty());
  EXPECT_EQ(source_.asks.back().budget, 0);
  planner_->Close(drafter.get());
}

TEST_F(SequenceDrafterTest, PacingStopsAskingAfterMissesThenProbes) {
  DrafterOptions options = Options();
  options.pacing.probe_interval = 4;
  options.pacing.max_probe_interval = 16;
  options.pacing.probe_tokens = 1;
  NewPlanner(CpuCost(), options);
  source_.proposes = false;  // every ask misses
  std::unique_ptr<SequenceDrafter> drafter = Open(Policy(8));
  std::vector<int> asks;
  for (int i = 0; i < 200; ++i) asks.push_back(Step(drafter.get(), 0).asked);
  EXPECT_GT(asks[0], 1) << "the prior asks for a real draft first";
  // It stops asking within a few missed steps...
  int first_off = -1;
  for (int i = 0; i < 20 && first_off < 0; ++i) {
    if (asks[i] == 0) first_off = i;
  }
  EXPECT_GE(first_off, 1);
  // ...and from then on only probes: one token each, at most one per
  // max_probe_interval steps once the interval has grown.
  int probes = 0;
  for (int i = 100; i < 200; ++i) {
    if (asks[i] == 0) continue;
    ++probes;
    EXPECT_EQ(asks[i], options.pacing.probe_tokens) << "step " << i;
  }
  EXPECT_GE(probes, 1);
  EXPECT_LE(probes, 100 / options.pacing.max_probe_interval + 1);

  // Drafts that hold again win the sequence back: a probe that hits resets
  // the interval, and the quality grows until it asks for more than one.
  source_.proposes = true;
  int most = 0;
  for (int i = 0; i < 100; ++i)
    most = std::max(most, Step(drafter.get(), 8).asked);
  EXPECT_GT(most, 1);
  planner_->Close(drafter.get());
}

TEST_F(SequenceDrafterTest, SlowPassesAskFreelyWhereThePacerGivesNone) {
  // CpuCost's one-token pass takes 20 ms: at or past the threshold a
  // sequence whose misses stopped its budget still asks every step (never
  // the assistant), and the cut keeps what pays; below it, only probes.
  for (const double from : {0.020, 0.021, 0.0}) {
    DrafterOptions options = Options();
    options.free_ask_min_pass_seconds = from;
    options.pacing.probe_interval = 4;
    options.pacing.max_probe_interval = 16;
    NewPlanner(CpuCost(), options);
    source_.proposes = false;
    std::unique_ptr<SequenceDrafter> drafter = Open(Policy(8));  // any source
    ASSERT_NE(drafter, nullptr);
    int zero_asks = 0;
    for (int i = 0; i < 100; ++i) {
      const size_t before = source_.asks.size();
      Step(drafter.get(), 0);
      ASSERT_EQ(source_.asks.size(), before + 1);
      const DraftAsk& ask = source_.asks.back();
      if (ask.budget == 0) ++zero_asks;
      if (i >= 20 && ask.budget > 1) {
        EXPECT_NE(ask.withheld & engine::SourceBit(DraftSourceTag::kAssistant),
                  0)
            << "a free ask runs no assistant pass; step " << i;
      }
    }
    if (from == 0.020) {
      EXPECT_EQ(zero_asks, 0) << "at the threshold every step asks";
    } else {
      EXPECT_GT(zero_asks, 60) << "threshold " << from;
    }
    // A hit from a free ask is verified and accepted as any other.
    if (from == 0.020) {
      source_.proposes = true;
      SequenceDraft draft = Step(drafter.get(), 8);
      EXPECT_GT(draft.tree.size(), 0);
    }
    planner_->Close(drafter.get());
  }
}

TEST_F(SequenceDrafterTest, HopelessPacingCarriesOverInItsNamespaceOnly) {
  DrafterOptions options = Options();
  options.pacing.probe_interval = 4;
  options.pacing.max_probe_interval = 64;
  NewPlanner(CpuCost(), options);
  source_.proposes = false;
  std::unique_ptr<SequenceDrafter> hopeless = Open(Policy(8));
  for (int i = 0; i < 40; ++i) Step(hopeless.get(), 0);
  planner_->Close(hopeless.get());
  // The next request of its namespace starts from its verdict: no asks.
  std::unique_ptr<SequenceDrafter> next = Open(Policy(8));
  EXPECT_EQ(Step(next.get(), 0).asked, 0);
  planner_->Close(next.get());
  // Another namespace starts from the prior.
  DraftPolicy other = Policy(8);
  other.name_space = "other";
  std::unique_ptr<SequenceDrafter> fresh = Open(other);
  EXPECT_GT(Step(fresh.get(), 0).asked, 0);
  planner_->Close(fresh.get());
}

TEST_F(SequenceDrafterTest, AssistantGateWithholdsItWhileItCannotPay) {
  const engine::DraftSourceSet assistant =
      engine::SourceBit(DraftSourceTag::kAssistant);
  NewPlanner(FlatCost());
  // Default sources and no sign of an assistant: nothing to gate.
  std::unique_ptr<SequenceDrafter> drafter = Open(Policy());
  Step(drafter.get(), 2);
  EXPECT_EQ(source_.asks.back().withheld, 0);
  EXPECT_EQ(observer_.gate[1][0] + observer_.gate[1][1], 0);
  planner_->Close(drafter.get());

  // Its passes reported at a second a token: withheld from the first ask,
  // never probed.
  source_.draft_cost.assistant_seconds_per_token = 1.0;
  drafter = Open(Policy());
  for (int i = 0; i < 40; ++i) {
    Step(drafter.get(), 2);
    EXPECT_EQ(source_.asks.back().withheld, assistant) << "step " << i;
  }
  EXPECT_EQ(observer_.gate[static_cast<int>(GatedMechanism::kAssistant)][1], 0);
  EXPECT_EQ(observer_.gate[static_cast<int>(GatedMechanism::kAssistant)][0],
            40);
  planner_->Close(drafter.get());

  // Named by the request and free: it runs.
  source_.draft_cost.assistant_seconds_per_token = 0;
  DraftPolicy named = Policy();
  named.name_space = "named";
  named.sources = assistant;
  drafter = Open(named);
  Step(drafter.get(), 2);
  EXPECT_EQ(source_.asks.back().withheld, 0);
  EXPECT_EQ(observer_.gate[static_cast<int>(GatedMechanism::kAssistant)][1], 1);
  planner_->Close(drafter.get());
}

TEST_F(SequenceDrafterTest, NewNamespaceStartsFromTheAssistantsLastVerdict) {
  const engine::DraftSourceSet assistant =
      engine::SourceBit(DraftSourceTag::kAssistant);
  const int kAssistant = static_cast<int>(GatedMechanism::kAssistant);
  DrafterOptions options = Options();
  options.gate.probe_interval = 4;
  NewPlanner(FlatCost(), options);
  // Cheap enough to try, and never a token accepted from it (the fake
  // proposes trie nodes only): it runs on the optimistic start, then stops.
  source_.draft_cost.assistant_seconds_per_token = 0.001;
  DraftPolicy first = Policy();
  first.name_space = "first";
  std::unique_ptr<SequenceDrafter> drafter = Open(first);
  for (int i = 0; i < 3; ++i) Step(drafter.get(), 2);
  const int ran_first = observer_.gate[kAssistant][1];
  EXPECT_GT(ran_first, 0);
  EXPECT_EQ(source_.asks.back().withheld, assistant);
  planner_->Close(drafter.get());

  // Another namespace, never seen: withheld from its first step, and its
  // first probe comes within 4 base intervals (16 steps), not 512.
  DraftPolicy other = Policy();
  other.name_space = "other";
  drafter = Open(other);
  Step(drafter.get(), 2);
  EXPECT_EQ(source_.asks.back().withheld, assistant);
  int probe_step = -1;
  for (int i = 1; i <= 20 && probe_step < 0; ++i) {
    Step(drafter.get(), 2);
    if (source_.asks.back().withheld == 0) probe_step = i;
  }
  EXPECT_GT(probe_step, 0) << "never probed";
  EXPECT_LE(probe_step, 16);
  planner_->Close(drafter.get());

  // Without a verdict anywhere (a new planner), a sequence runs it first.
  NewPlanner(FlatCost(), options);
  drafter = Open(other);
  Step(drafter.get(), 2);
  EXPECT_EQ(source_.asks.back().withheld, 0);
  planner_->Close(drafter.get());
}

TEST_F(SequenceDrafterTest, WindowGateAddsScratchRowsOnlyWhereTheyPay) {
  DraftPolicy policy = Policy();
  policy.lookahead_window = 2;
  policy.lookahead_ngram = 3;
  policy.lookahead_guess = 2;
  EXPECT_EQ(SequenceDrafter::ScratchRowsOf(policy), 4);
  DraftPolicy no_pool = policy;
  no_pool.sources = engine::SourceBit(DraftSourceTag::kTrie);
  EXPECT_EQ(SequenceDrafter::ScratchRowsOf(no_pool), 0);
  const int window = static_cast<int>(GatedMechanism::kJacobiWindow);

  // 4 rows on the steep curve cost far more than 2 tokens are worth.
  NewPlanner(SteepCost());
  std::unique_ptr<SequenceDrafter> drafter = Open(policy);
  StepDrafts step =
      planner_->Draft({drafter.get()}, {64}, 0, 64, kSecondsPerToken);
  EXPECT_EQ(step.scratch_rows, 0);
  EXPECT_EQ(observer_.gate[window][0], 1);
  planner_->Close(drafter.get());

  // On a flat curve they cost almost nothing: the window runs at once.
  NewPlanner(FlatCost());
  drafter = Open(policy);
  step = planner_->Draft({drafter.get()}, {64}, 0, 64, kSecondsPerToken);
  EXPECT_EQ(step.scratch_rows, 4);
  EXPECT_EQ(observer_.gate[window][1], 1);
  planner_->Close(drafter.get());
}

TEST_F(SequenceDrafterTest, NamedSourcesWaitForTheOpenWithoutBlocking) {
  NewPlanner(FlatCost());
  source_.answered = false;
  DraftPolicy named = Policy();
  named.sources = engine::SourceBit(DraftSourceTag::kTrie);
  const absl::Time now = absl::Now();
  std::unique_ptr<SequenceDrafter> drafter = Open(named);
  EXPECT_TRUE(drafter->AwaitingOpen(now));
  // The wait is bounded: past open_answer_wait it goes on without.
  EXPECT_FALSE(drafter->AwaitingOpen(now + Options().open_answer_wait +
                                     absl::Milliseconds(100)));
  source_.answered = true;
  EXPECT_FALSE(drafter->AwaitingOpen(now));
  // Default sources never wait.
  source_.answered = false;
  std::unique_ptr<SequenceDrafter> defaults = Open(Policy());
  EXPECT_FALSE(defaults->AwaitingOpen(now));

  // A refusal is the request's status, at the open and at a draft step.
  source_.failure = absl::FailedPreconditionError("not served");
  EXPECT_EQ(drafter->Failure(), source_.failure);
  StepDrafts step = planner_->Draft({drafter.get(), defaults.get()}, {64, 64},
                                    0, 64, kSecondsPerToken);
  EXPECT_EQ(step.drafts[0].failure, source_.failure);
  EXPECT_EQ(step.drafts[1].failure, source_.failure);
  planner_->Close(drafter.get());
  planner_->Close(defaults.get());
  planner_->Close(defaults.get());  // idempotent
  EXPECT_EQ(source_.closes, 2);
  EXPECT_TRUE(drafter->Failure().ok()) << "closed: no more sources";
}

TEST_F(SequenceDrafterTest, CountsDraftTokensPerSourceWhereTheyReachTheOutput) {
  NewPlanner(FlatCost());
  std::unique_ptr<SequenceDrafter> drafter = Open(Policy());
  // A chain of 4: the tries proposed nodes 0, 2 and 3, the pool node 1 and
  // (shared) node 2.
  DraftTree tree;
  tree.tokens = {10, 11, 12, 13};
  tree.parents = {-1, 0, 1, 2};
  const engine::DraftSourceSet trie = engine::SourceBit(DraftSourceTag::kTrie);
  const engine::DraftSourceSet pool = engine::SourceBit(DraftSourceTag::kNgram);
  tree.source_sets = {trie, pool, trie | pool, trie};
  // Three nodes accepted and a bonus, but the output ends after two (EOS).
  const std::vector<int32_t> path = {0, 1, 2, 3};
  const std::vector<int32_t> tokens = {10, 11, 12, kBonus};
  const std::vector<int32_t> output = {10, 11};
  drafter->Emitted(tokens, output, /*hits=*/3, &tree, path);

  EXPECT_EQ(drafter->draft_tokens(), 4);
  EXPECT_EQ(drafter->accepted_draft_tokens(), 2);
  const int t = static_cast<int>(DraftSourceTag::kTrie);
  const int n = static_cast<int>(DraftSourceTag::kNgram);
  EXPECT_EQ(drafter->source_drafts()[t], 3);
  EXPECT_EQ(drafter->source_drafts()[n], 2);
  EXPECT_EQ(drafter->source_accepted()[t], 1);
  EXPECT_EQ(drafter->source_accepted()[n], 1);
  EXPECT_EQ(observer_.verified, 4);
  EXPECT_EQ(observer_.accepted, 2);
  const std::vector<std::array<int, 3>> expected = {{t, 3, 1}, {n, 2, 1}};
  EXPECT_EQ(observer_.per_source, expected);
  // The sources are told only what reached the output.
  EXPECT_EQ(source_.observed, output);
  // The first token: no tree, nothing counted.
  drafter->Emitted({kBonus}, {kBonus}, 0, nullptr, {});
  EXPECT_EQ(drafter->draft_tokens(), 4);
  planner_->Close(drafter.get());
}

// A source's in-process model (the verifier's assistant) reports its passes
// and its gate per step through the observer, from its Stats; the gate for
// draftsvc's assistant stands aside (it would withhold an assistant whose
// reported cost is a second a token, and count its own decisions too).
TEST_F(SequenceDrafterTest, InProcessModelPassesReachTheObserver) {
  DrafterOptions options = Options();
  options.assistant_in_process = true;
  NewPlanner(FlatCost(), options);
  source_.models = true;
  source_.draft_cost.assistant_seconds_per_token = 1.0;
  DraftPolicy named = Policy(6);
  named.sources = engine::SourceBit(DraftSourceTag::kAssistant);
  std::unique_ptr<SequenceDrafter> drafter = Open(named);
  Step(drafter.get(), 6);
  Step(drafter.get(), 6);
  EXPECT_EQ(source_.asks.back().withheld, 0);
  EXPECT_DOUBLE_EQ(observer_.assistant_seconds, 0.5);
  EXPECT_EQ(observer_.assistant_passes, 4);
  EXPECT_EQ(observer_.gate[static_cast<int>(GatedMechanism::kAssistant)][1], 2);
  EXPECT_EQ(observer_.gate[static_cast<int>(GatedMechanism::kAssistant)][0], 0);
  // A step it does not run in reports nothing.
  source_.models = false;
  Step(drafter.get(), 6);
  EXPECT_EQ(observer_.assistant_passes, 4);
  planner_->Close(drafter.get());
}

}  // namespace
}  // namespace lookahead::verifysvc
