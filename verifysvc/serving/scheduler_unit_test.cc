// The scheduler on a tiny random-weight model (no real model) with a
// scripted draft source: the output is plain decoding's whatever the drafts
// (right, wrong, random, failing); budgets follow the step cost curve and
// the draft quality; failing drafts back off to probes at doubling
// intervals; a long prompt is prefilled in chunks while another sequence
// decodes; cancelled sequences free their slots; stop strings cut where
// plain decoding reaches them; every opened draft handle observes exactly
// its sequence's tokens and is closed once. Each test takes well under a
// second.

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "engine/model/llama_model.h"
#include "engine/model/sampler.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/reference_decode.h"
#include "engine/text/tokenizer.h"
#include "gtest/gtest.h"
#include "verifysvc/drafts/draft_budget.h"
#include "verifysvc/drafts/draft_fanout.h"
#include "verifysvc/drafts/draft_source.h"
#include "verifysvc/drafts/suffix_repeat.h"
#include "verifysvc/serving/output.h"
#include "verifysvc/serving/recording_sink.h"
#include "verifysvc/serving/request.h"
#include "verifysvc/serving/scheduler.h"
#include "verifysvc/serving/scheduler_observer.h"

namespace lookahead::verifysvc {
namespace {

using engine::DraftTree;

constexpr int kVocab = 101;  // engine::TinyModelSpec's
constexpr int32_t kEos = kVocab - 1;
// Plain decoding is run this many tokens past a request's end, so the
// scripted drafts know the truth below its last token too.
constexpr int kSlack = 48;
// A prompt seed whose plain decoding mixes steps that repeat their context
// with steps that do not (StepsThatRepeatTheirContextArePacedApart).
constexpr uint64_t kRepeatSeed = 23;

// A byte-level tokenizer over the tiny model's ids: 0..93 are the printable
// ASCII characters '!'..'~', 94 a space, 95..99 a space and a short word,
// 100 the control token <|im_end|> (EOS). All text is ASCII.
std::unique_ptr<engine::Tokenizer> TinyTokenizer() {
  engine::TokenizerSpec spec;
  spec.model = "gpt2";
  for (int c = '!'; c <= '~'; ++c) spec.tokens.push_back(std::string(1, c));
  const std::string space = "\xC4\xA0";  // GPT-2's stand-in for ' '
  spec.tokens.push_back(space);
  for (const char* word : {"the", "and", "of", "to", "in"}) {
    spec.tokens.push_back(space + word);
  }
  spec.token_types.assign(spec.tokens.size(),
                          static_cast<int32_t>(engine::TokenType::kNormal));
  spec.tokens.push_back("<|im_end|>");
  spec.token_types.push_back(static_cast<int32_t>(engine::TokenType::kControl));
  spec.eos_id = kEos;
  auto tokenizer = engine::Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

// ---------------------------------------------------------------------------
// A scripted draft source.

// What the source knows of one sequence.
struct FakeSession {
  std::vector<int32_t> prompt;
  std::vector<int32_t> observed;  // every token Observe'd, in order
  std::vector<int> asks;          // the budget of every ask, in order
  std::vector<size_t> asked_after;  // observed.size() at every ask
  // The sources every ask withheld (DraftAsk::withheld), in order.
  std::vector<engine::DraftSourceSet> withheld;
  int closes = 0;
  std::vector<DraftTree> proposed;  // every tree proposed, in order
  // Every ObserveVerified, with how many tokens were observed before it.
  std::vector<std::pair<size_t, VerifiedPredictions>> predictions;
  absl::Status failure;  // what Failure() returns
};

// Builds the tree for one ask of `budget` >= 1 tokens.
using DraftScript =
    std::function<DraftTree(const FakeSession& session, int budget)>;

// A DraftSource whose trees come from a script. Records every call; can fail
// (empty trees, available = false, failures counted); its cost is settable.
// `on_observe` (may be null) runs after each Observe, outside the lock.
class ScriptedDraftSource : public DraftSource {
 public:
  explicit ScriptedDraftSource(DraftScript script)
      : script_(std::move(script)) {}

  std::string name() const override { return "scripted"; }

  int64_t Open(const DraftPolicy& policy,
               absl::Span<const int32_t> prompt) override {
    absl::MutexLock lock(&mu_);
    const int64_t handle = next_handle_++;
    sessions_[handle].prompt.assign(prompt.begin(), prompt.end());
    return handle;
  }

  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override {
    FakeSession copy;
    {
      absl::MutexLock lock(&mu_);
      FakeSession& s = sessions_.at(handle);
      EXPECT_EQ(s.closes, 0) << "Observe after Close";
      s.observed.insert(s.observed.end(), tokens.begin(), tokens.end());
      copy = s;
    }
    if (on_observe_) on_observe_(copy);
  }

  std::vector<DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                 bool* called) override {
    absl::MutexLock lock(&mu_);
    *called = false;
    std::vector<DraftTree> trees(asks.size());
    std::vector<int> budgets;
    bool wanted = false;
    for (const DraftAsk& ask : asks) {
      FakeSession& s = sessions_.at(ask.handle);
      EXPECT_EQ(s.closes, 0) << "Propose after Close";
      s.asks.push_back(ask.budget);
      s.asked_after.push_back(s.observed.size());
      s.withheld.push_back(ask.withheld);
      budgets.push_back(ask.budget);
      wanted = wanted || ask.budget > 0;
    }
    calls_.push_back(budgets);
    if (!wanted) return trees;
    *called = true;
    if (failing_calls_ != 0) {
      if (failing_calls_ > 0) --failing_calls_;
      ++stats_.failures;
      stats_.available = false;
      return trees;
    }
    stats_.available = true;
    for (size_t i = 0; i < asks.size(); ++i) {
      FakeSession& s = sessions_.at(asks[i].handle);
      if (asks[i].budget > 0) {
        trees[i] = script_(s, asks[i].budget);
        s.proposed.push_back(trees[i]);
      }
      if (!fail_sessions_.ok()) s.failure = fail_sessions_;
    }
    return trees;
  }

  bool WantsPredictions(int64_t handle) const override {
    absl::MutexLock lock(&mu_);
    return wants_predictions_;
  }

  void ObserveVerified(int64_t handle,
                       const VerifiedPredictions& predictions) override {
    absl::MutexLock lock(&mu_);
    FakeSession& s = sessions_.at(handle);
    EXPECT_TRUE(wants_predictions_) << "predictions nobody asked for";
    s.predictions.emplace_back(s.observed.size(), predictions);
  }

  absl::Status Failure(int64_t handle) const override {
    absl::MutexLock lock(&mu_);
    return sessions_.at(handle).failure;
  }

  void Close(int64_t handle) override {
    absl::MutexLock lock(&mu_);
    ++sessions_.at(handle).closes;
  }

  DraftCost cost() const override {
    absl::MutexLock lock(&mu_);
    return cost_;
  }

  DraftSourceStats Stats() const override {
    absl::MutexLock lock(&mu_);
    DraftSourceStats stats = stats_;
    for (const auto& [handle, s] : sessions_)
      stats.open_sessions += s.closes == 0;
    return stats;
  }

  // The next `calls` Propose calls that ask for tokens fail; -1: all do.
  void FailCalls(int calls) {
    absl::MutexLock lock(&mu_);
    failing_calls_ = calls;
  }
  void SetCost(DraftCost cost) {
    absl::MutexLock lock(&mu_);
    cost_ = cost;
  }
  void SetWantsPredictions(bool wants) {
    absl::MutexLock lock(&mu_);
    wants_predictions_ = wants;
  }
  // Every session asked for a draft from now on fails with `status`.
  void FailSessions(absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_sessions_ = std::move(status);
  }
  // REQUIRES: set before the source is used.
  void SetOnObserve(std::function<void(const FakeSession&)> on_observe) {
    on_observe_ = std::move(on_observe);
  }

  std::vector<FakeSession> sessions() const {
    absl::MutexLock lock(&mu_);
    std::vector<FakeSession> out;
    for (const auto& [handle, s] : sessions_) out.push_back(s);
    return out;
  }
  // The session opened for `prompt`, if any (prompts are distinct).
  std::optional<FakeSession> SessionOf(
      const std::vector<int32_t>& prompt) const {
    for (FakeSession& s : sessions()) {
      if (s.prompt == prompt) return s;
    }
    return std::nullopt;
  }
  // The budgets of each Propose call, one per ask.
  std::vector<std::vector<int>> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  const DraftScript script_;
  std::function<void(const FakeSession&)> on_observe_;

  mutable absl::Mutex mu_;
  std::map<int64_t, FakeSession> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::vector<int>> calls_ ABSL_GUARDED_BY(mu_);
  int failing_calls_ ABSL_GUARDED_BY(mu_) = 0;
  DraftSourceStats stats_ ABSL_GUARDED_BY(mu_);
  DraftCost cost_ ABSL_GUARDED_BY(mu_);
  bool wants_predictions_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fail_sessions_ ABSL_GUARDED_BY(mu_);
};

// Plain decoding's continuation of each prompt (kSlack tokens past the end).
using Continuations = std::map<std::vector<int32_t>, std::vector<int32_t>>;

// Up to `n` true tokens after what `session` has observed.
std::vector<int32_t> NextTokens(const Continuations& truth,
                                const FakeSession& session, int n) {
  auto it = truth.find(session.prompt);
  if (it == truth.end()) return {};
  const std::vector<int32_t>& all = it->second;
  const size_t from = std::min(session.observed.size(), all.size());
  const size_t to = std::min(all.size(), from + static_cast<size_t>(n));
  return std::vector<int32_t>(all.begin() + from, all.begin() + to);
}

// A chain of `budget` tokens: the first right_fraction * budget are the true
// continuation, the rest are not (the true token + 1).
DraftScript ChainDrafts(const Continuations* truth, double right_fraction) {
  return [truth, right_fraction](const FakeSession& s, int budget) {
    const std::vector<int32_t> next = NextTokens(*truth, s, budget);
    const int right = static_cast<int>(right_fraction * budget);
    DraftTree tree;
    for (int j = 0; j < budget; ++j) {
      const int32_t true_token =
          j < static_cast<int>(next.size()) ? next[j] : 0;
      tree.tokens.push_back(j < right ? true_token : (true_token + 1) % kVocab);
      tree.parents.push_back(j - 1);
    }
    return tree;
  };
}

// The true continuation as the assistant's chain, its passes reported to
// cost `seconds`; nothing when the ask withholds the assistant.
DraftScript AssistantChain(const Continuations* truth, double seconds) {
  DraftScript chain = ChainDrafts(truth, /*right_fraction=*/1.0);
  return [chain, seconds](const FakeSession& s, int budget) {
    DraftTree tree;
    if (s.withheld.back() &
        engine::SourceBit(engine::DraftSourceTag::kAssistant)) {
      return tree;
    }
    tree = chain(s, budget);
    tree.sources.assign(tree.size(), engine::DraftSourceTag::kAssistant);
    tree.source_seconds = seconds;
    return tree;
  };
}

// Random trees: nothing (a quarter of the asks), or a few random nodes, a
// copy of 0..budget true tokens (a third of them with one token changed),
// and random nodes hung anywhere (siblings, branches). No two siblings carry
// one token.
DraftScript RandomDrafts(const Continuations* truth, uint64_t seed) {
  auto rng = std::make_shared<std::mt19937_64>(seed);
  return [truth, rng](const FakeSession& s, int budget) {
    std::mt19937_64& r = *rng;
    DraftTree tree;
    if (r() % 4 == 0) return tree;
    std::map<std::pair<int32_t, int32_t>, int32_t> child;  // (parent, token)
    // Returns the node of `token` under `parent`, adding it if room.
    auto node = [&](int32_t parent, int32_t token) -> int32_t {
      auto it = child.find({parent, token});
      if (it != child.end()) return it->second;
      if (tree.size() >= budget) return -2;
      tree.tokens.push_back(token);
      tree.parents.push_back(parent);
      child[{parent, token}] = tree.size() - 1;
      return tree.size() - 1;
    };
    auto random_nodes = [&](int n) {
      for (int k = 0; k < n; ++k) {
        const int32_t parent =
            static_cast<int32_t>(r() % (tree.size() + 1)) - 1;
        node(parent, static_cast<int32_t>(r() % kVocab));
      }
    };
    random_nodes(static_cast<int>(r() % (budget / 3 + 1)));
    const std::vector<int32_t> next = NextTokens(*truth, s, budget);
    const int copied = static_cast<int>(r() % (next.size() + 1));
    const int typo =
        copied > 0 && r() % 3 == 0 ? static_cast<int>(r() % copied) : -1;
    int32_t parent = -1;
    for (int j = 0; j < copied && parent != -2; ++j) {
      parent = node(parent, j == typo ? (next[j] + 1) % kVocab : next[j]);
    }
    random_nodes(budget);
    return tree;
  };
}

// ---------------------------------------------------------------------------
// A recording observer.

struct DraftCall {
  int64_t new_failures = 0;
  bool available = true;
};

class RecordingObserver : public SchedulerObserver {
 public:
  void OnRequestEnded(RequestOutcome outcome) override {
    absl::MutexLock lock(&mu_);
    ++outcomes_[outcome];
  }
  void OnDraftVerified(int verified, int accepted) override {
    absl::MutexLock lock(&mu_);
    verified_ += verified;
    accepted_ += accepted;
  }
  void OnDraftCall(double seconds, int64_t new_failures,
                   bool available) override {
    absl::MutexLock lock(&mu_);
    draft_calls_.push_back({new_failures, available});
  }
  void OnDraftSourceVerified(engine::DraftSourceTag source, int verified,
                             int accepted) override {
    absl::MutexLock lock(&mu_);
    per_source_.push_back({static_cast<int>(source), verified, accepted});
  }
  void OnStep(const StepReport& step) override {
    absl::MutexLock lock(&mu_);
    steps_.push_back(step);
  }
  void OnCostGate(GatedMechanism mechanism, bool ran) override {
    absl::MutexLock lock(&mu_);
    ++gate_[static_cast<int>(mechanism)][ran ? 1 : 0];
  }
  // {skipped, ran} sequence steps of `mechanism`.
  std::array<int, 2> gate(GatedMechanism mechanism) const {
    absl::MutexLock lock(&mu_);
    return gate_[static_cast<int>(mechanism)];
  }

  int outcomes(RequestOutcome outcome) const {
    absl::MutexLock lock(&mu_);
    auto it = outcomes_.find(outcome);
    return it == outcomes_.end() ? 0 : it->second;
  }
  int64_t verified() const {
    absl::MutexLock lock(&mu_);
    return verified_;
  }
  int64_t accepted() const {
    absl::MutexLock lock(&mu_);
    return accepted_;
  }
  std::vector<DraftCall> draft_calls() const {
    absl::MutexLock lock(&mu_);
    return draft_calls_;
  }
  std::vector<StepReport> steps() const {
    absl::MutexLock lock(&mu_);
    return steps_;
  }
  // Every OnDraftSourceVerified: {tag, verified, accepted}.
  std::vector<std::array<int, 3>> per_source() const {
    absl::MutexLock lock(&mu_);
    return per_source_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<RequestOutcome, int> outcomes_ ABSL_GUARDED_BY(mu_);
  int64_t verified_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t accepted_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<DraftCall> draft_calls_ ABSL_GUARDED_BY(mu_);
  std::vector<StepReport> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<std::array<int, 3>> per_source_ ABSL_GUARDED_BY(mu_);
  std::array<std::array<int, 2>, kNumGatedMechanisms> gate_
      ABSL_GUARDED_BY(mu_) = {};
};

// ---------------------------------------------------------------------------
// Step cost curves. The scheduler folds each timed pass into the point
// nearest its size if within a quarter of it (StepCostModel::Observe): the
// tiny model's passes (< 750 tokens) never reach a point at 1000 or more,
// and a one-token pass only pulls the point at 1 down toward its real,
// sub-millisecond time, which makes a rising curve steeper still.

// A pass costs the same up to 1000 tokens: drafts are free.
StepCostModel FlatCost() {
  return *StepCostModel::Create({{1000, 0.01}, {2000, 0.01}});
}
// Each token in the pass adds 2% of a one-token step: the prior quality
// buys 8-token drafts, a quality near 0 buys none.
StepCostModel RisingCost() {
  return *StepCostModel::Create({{1, 1.0}, {1001, 21.0}});
}
// Each token costs two one-token steps: no draft pays for itself.
StepCostModel SteepCost() {
  return *StepCostModel::Create({{1, 1.0}, {1001, 2001.0}});
}

class SchedulerUnitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = engine::LoadTinyModel(engine::TinyModelSpec());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    tokenizer_ = TinyTokenizer();
  }
  static void TearDownTestSuite() {
    model_.reset();
    tokenizer_.reset();
  }
  void SetUp() override {
    ASSERT_NE(model_, nullptr);
    ASSERT_NE(tokenizer_, nullptr);
    ASSERT_EQ(model_->config().vocab_size, tokenizer_->vocab_size());
  }

  // `model` null: the suite's model. The curves above are in made-up units
  // (a pass "costs" a second), so free asks, which weigh a real ask against
  // a pass's seconds, stay off here (sequence_drafter_test covers them).
  static std::unique_ptr<Scheduler> NewScheduler(
      DraftFanout* drafts, StepCostModel cost, SchedulerOptions options,
      const engine::LlamaModel* model = nullptr) {
    options.free_ask_min_pass_seconds = 0;
    auto scheduler =
        Scheduler::Create(model != nullptr ? model : model_.get(),
                          tokenizer_.get(), drafts, std::move(cost), options);
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    return scheduler.ok() ? *std::move(scheduler) : nullptr;
  }

  // `length` ids in [0, kEos), from `seed`.
  static std::vector<int32_t> RandomPrompt(uint64_t seed, int length) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> prompt(length);
    for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % kEos);
    return prompt;
  }

  // A prompt of `length` ids (from the first of `seed`, `seed` + 1, ...
  // that works) whose plain decoding runs `tokens` tokens without EOS.
  static std::vector<int32_t> PromptWithoutEos(uint64_t seed, int length,
                                               int tokens) {
    for (uint64_t s = seed; s < seed + 1000; s += 37) {
      std::vector<int32_t> prompt = RandomPrompt(s, length);
      if (static_cast<int>(PlainDecode(prompt, tokens).size()) == tokens) {
        return prompt;
      }
    }
    ADD_FAILURE() << "every prompt from seed " << seed << " meets EOS";
    return RandomPrompt(seed, length);
  }

  // Plain decoding (engine::Generate without drafts), ending at EOS.
  static std::vector<int32_t> PlainDecode(
      const std::vector<int32_t>& prompt, int max_new_tokens,
      const engine::SamplingParams& sampling = {}) {
    engine::GenerationOptions options;
    options.max_new_tokens = max_new_tokens;
    options.sampling = sampling;
    options.stop_token_ids = tokenizer_->end_of_generation_ids();
    auto result = engine::Generate(*model_, prompt, options, nullptr);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->tokens : std::vector<int32_t>();
  }

  // The first `max_new_tokens` of a continuation: what a request emits.
  static std::vector<int32_t> Head(const std::vector<int32_t>& tokens,
                                   int max_new_tokens) {
    return std::vector<int32_t>(
        tokens.begin(),
        tokens.begin() + std::min<size_t>(tokens.size(), max_new_tokens));
  }

  static GenerationRequest Request(
      std::vector<int32_t> prompt, int max_new_tokens, int decoding_length,
      const engine::SamplingParams& sampling = {}) {
    GenerationRequest request;
    request.prompt = std::move(prompt);
    request.max_new_tokens = max_new_tokens;
    request.sampling = sampling;
    if (decoding_length > 0) {
      request.draft.mode = DraftMode::kTrieHierarchical;
      request.draft.decoding_length = decoding_length;
    }
    return request;
  }

  // Runs `prompt` for `max_new_tokens` with drafts of up to `decoding_length`
  // tokens to its end, and expects plain decoding's first tokens (`plain`).
  static void DecodeExpectingPlain(Scheduler* scheduler,
                                   const std::vector<int32_t>& prompt,
                                   int max_new_tokens, int decoding_length,
                                   const std::vector<int32_t>& plain,
                                   RecordingSink* sink) {
    DecodeRequestExpectingPlain(
        scheduler, Request(prompt, max_new_tokens, decoding_length), plain,
        sink);
  }

  // The same for a request built by the caller.
  static void DecodeRequestExpectingPlain(Scheduler* scheduler,
                                          GenerationRequest request,
                                          const std::vector<int32_t>& plain,
                                          RecordingSink* sink) {
    const int max_new_tokens = request.max_new_tokens;
    ASSERT_TRUE(scheduler->Submit(std::move(request), sink).ok());
    ASSERT_TRUE(sink->Wait());
    ASSERT_TRUE(sink->status().ok()) << sink->status();
    EXPECT_EQ(sink->tokens(), Head(plain, max_new_tokens));
  }

  // Decodes `prompt` as an assistant-only request (new_tokens,
  // decoding length 4) through a fresh scheduler over `source`, checked
  // against `plain`; *session: what the source recorded of it.
  static void DecodeAssistantOnly(ScriptedDraftSource* source,
                                  const SchedulerOptions& options,
                                  const std::vector<int32_t>& prompt,
                                  int new_tokens,
                                  const std::vector<int32_t>& plain,
                                  FakeSession* session) {
    DraftFanout fanout({source}, kVocab);
    auto scheduler = NewScheduler(&fanout, FlatCost(), options);
    ASSERT_NE(scheduler, nullptr);
    GenerationRequest request = Request(prompt, new_tokens, 4);
    request.draft.sources =
        engine::SourceBit(engine::DraftSourceTag::kAssistant);
    RecordingSink sink;
    ASSERT_NO_FATAL_FAILURE(DecodeRequestExpectingPlain(
        scheduler.get(), std::move(request), plain, &sink));
    scheduler.reset();
    std::optional<FakeSession> recorded = source->SessionOf(prompt);
    ASSERT_TRUE(recorded.has_value()) << "never opened";
    ASSERT_EQ(recorded->asks.size(), recorded->withheld.size());
    *session = *std::move(recorded);
  }

  // The source's session for `prompt` observed exactly the sink's tokens, in
  // order, and was closed once.
  static void ExpectObservedAndClosed(const ScriptedDraftSource& source,
                                      const std::vector<int32_t>& prompt,
                                      const RecordingSink& sink) {
    std::optional<FakeSession> session = source.SessionOf(prompt);
    ASSERT_TRUE(session.has_value()) << "never opened";
    EXPECT_EQ(session->observed, sink.tokens());
    EXPECT_EQ(session->closes, 1);
  }

  static inline std::unique_ptr<engine::LlamaModel> model_;
  static inline std::unique_ptr<engine::Tokenizer> tokenizer_;
};

// ---------------------------------------------------------------------------

TEST_F(SchedulerUnitTest, OutputIsPlainDecodingWhateverTheDrafts) {
  constexpr int kNew = 40;
  engine::SamplingParams seeded;
  seeded.temperature = 0.8f;
  seeded.top_k = 20;
  seeded.seed = 1234;
  for (const engine::SamplingParams& sampling :
       {engine::SamplingParams(), seeded}) {
    SCOPED_TRACE(sampling.greedy() ? "greedy" : "seeded sampling");
    // Six prompts of 2..37 tokens decoded three at a time; drafts of 1..16
    // tokens, none for the last.
    std::vector<std::vector<int32_t>> prompts;
    Continuations truth;
    for (int i = 0; i < 6; ++i) {
      prompts.push_back(RandomPrompt(100 + i, 2 + 7 * i));
      truth[prompts.back()] =
          PlainDecode(prompts.back(), kNew + kSlack, sampling);
    }
    ScriptedDraftSource source(RandomDrafts(&truth, /*seed=*/7));
    DraftFanout fanout({&source}, kVocab);
    RecordingObserver observer;
    std::vector<RecordingSink> sinks(prompts.size());
    SchedulerOptions options;
    options.max_running = 3;
    options.observer = &observer;
    auto scheduler = NewScheduler(&fanout, FlatCost(), options);
    ASSERT_NE(scheduler, nullptr);
    const int lengths[] = {1, 4, 16, 7, 12, 0};
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_TRUE(scheduler
                      ->Submit(Request(prompts[i], kNew, lengths[i], sampling),
                               &sinks[i])
                      .ok());
    }
    int64_t drafted = 0, accepted = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE(i);
      ASSERT_TRUE(sinks[i].Wait());
      ASSERT_TRUE(sinks[i].status().ok()) << sinks[i].status();
      EXPECT_EQ(sinks[i].tokens(), Head(truth[prompts[i]], kNew));
      const Usage usage = sinks[i].usage();
      EXPECT_EQ(usage.output_tokens,
                static_cast<int>(sinks[i].tokens().size()));
      EXPECT_LE(usage.accepted_draft_tokens, usage.draft_tokens);
      drafted += usage.draft_tokens;
      accepted += usage.accepted_draft_tokens;
      if (lengths[i] == 0) {
        EXPECT_FALSE(source.SessionOf(prompts[i]).has_value());
        EXPECT_EQ(usage.draft_tokens, 0);
      } else {
        ExpectObservedAndClosed(source, prompts[i], sinks[i]);
      }
    }
    // The drafts were verified: some accepted, some not. (A sequence's
    // last step is recorded after its Finish: stop the thread first.)
    scheduler->Shutdown(absl::ZeroDuration());
    EXPECT_GT(accepted, 10);
    EXPECT_GT(drafted, accepted);
    EXPECT_EQ(observer.verified(), drafted);
    EXPECT_EQ(observer.accepted(), accepted);
    const SchedulerStats stats = scheduler->Stats();
    EXPECT_EQ(stats.requests_finished, 6);
    EXPECT_EQ(stats.draft_tokens, drafted);
    EXPECT_EQ(stats.accepted_draft_tokens, accepted);
  }
}

TEST_F(SchedulerUnitTest, FlatCostAsksForTheWholeDecodingLength) {
  // One sequence: every ask is its decoding length.
  {
    const std::vector<int32_t> prompt = PromptWithoutEos(1, 6, 40);
    Continuations truth = {{prompt, PlainDecode(prompt, 40 + kSlack)}};
    ScriptedDraftSource source(ChainDrafts(&truth, 1.0));
    DraftFanout fanout({&source}, kVocab);
    RecordingSink sink;
    auto scheduler = NewScheduler(&fanout, FlatCost(), {});
    ASSERT_NE(scheduler, nullptr);
    ASSERT_NO_FATAL_FAILURE(DecodeExpectingPlain(
        scheduler.get(), prompt, 40, 12, truth[prompt], &sink));
    const std::vector<int> asks = source.SessionOf(prompt)->asks;
    ASSERT_FALSE(asks.empty());
    for (int ask : asks) EXPECT_EQ(ask, 12);
  }
  // Two sequences whose lengths exceed the step: they share what the roots
  // leave of max_step_tokens, all of it.
  {
    const std::vector<int32_t> a = PromptWithoutEos(2, 5, 40),
                               b = PromptWithoutEos(3, 9, 40);
    Continuations truth = {{a, PlainDecode(a, 40 + kSlack)},
                           {b, PlainDecode(b, 40 + kSlack)}};
    ScriptedDraftSource source(ChainDrafts(&truth, 0.5));
    // The first token waits for both requests to be queued, so that they
    // decode side by side however the threads are scheduled.
    absl::Notification queued;
    source.SetOnObserve([&queued](const FakeSession& s) {
      if (s.observed.size() == 1) queued.WaitForNotification();
    });
    DraftFanout fanout({&source}, kVocab);
    RecordingSink sink_a, sink_b;
    SchedulerOptions options;
    options.max_step_tokens = 24;
    auto scheduler = NewScheduler(&fanout, FlatCost(), options);
    ASSERT_NE(scheduler, nullptr);
    ASSERT_TRUE(scheduler->Submit(Request(a, 40, 16), &sink_a).ok());
    ASSERT_TRUE(scheduler->Submit(Request(b, 40, 16), &sink_b).ok());
    queued.Notify();
    ASSERT_TRUE(sink_a.Wait());
    ASSERT_TRUE(sink_b.Wait());
    EXPECT_EQ(sink_a.tokens(), Head(truth[a], 40));
    EXPECT_EQ(sink_b.tokens(), Head(truth[b], 40));
    int shared = 0;
    for (const std::vector<int>& call : source.calls()) {
      for (int ask : call) {
        EXPECT_GE(ask, 1);
        EXPECT_LE(ask, 16);
      }
      if (call.size() == 2) {
        ++shared;
        EXPECT_EQ(call[0] + call[1], 24 - 2);
      }
    }
    EXPECT_GT(shared, 0);
  }
  // A source whose every call costs 100 steps is not asked, but for the
  // probes; a probe has paid for the call, so it gets the whole length.
  {
    const std::vector<int32_t> prompt = PromptWithoutEos(21, 7, 40);
    Continuations truth = {{prompt, PlainDecode(prompt, 40 + kSlack)}};
    ScriptedDraftSource source(ChainDrafts(&truth, 1.0));
    source.SetCost({/*seconds_per_call=*/1.0, /*seconds_per_token=*/0});
    DraftFanout fanout({&source}, kVocab);
    RecordingSink sink;
    auto scheduler = NewScheduler(&fanout, FlatCost(), {});
    ASSERT_NE(scheduler, nullptr);
    ASSERT_NO_FATAL_FAILURE(DecodeExpectingPlain(
        scheduler.get(), prompt, 40, 12, truth[prompt], &sink));
    // The probes hit, so the interval stays DraftPacerOptions' 8.
    const std::vector<int> asks = source.SessionOf(prompt)->asks;
    std::vector<int> expected;
    while (expected.size() < asks.size()) {
      expected.insert(expected.end(), 8, 0);
      expected.push_back(12);
    }
    expected.resize(asks.size());
    EXPECT_EQ(asks, expected);
  }
}

TEST_F(SchedulerUnitTest, WrongDraftsShrinkTheBudgetToZero) {
  const std::vector<int32_t> prompt = PromptWithoutEos(4, 6, 40);
  Continuations truth = {{prompt, PlainDecode(prompt, 40 + kSlack)}};
  ScriptedDraftSource source(ChainDrafts(&truth, 0.0));
  DraftFanout fanout({&source}, kVocab);
  RecordingSink sink;
  SchedulerOptions options;
  options.pacing.probe_interval = 1000;  // No probes in this test.
  options.pacing.max_probe_interval = 1000;
  auto scheduler = NewScheduler(&fanout, RisingCost(), options);
  ASSERT_NE(scheduler, nullptr);
  ASSERT_NO_FATAL_FAILURE(DecodeExpectingPlain(
      scheduler.get(), prompt, 40, 8, truth[prompt], &sink));

  // The prior buys a full draft; each miss lowers the quality (x0.7), the
  // budget with it, until no draft pays: 0.9 * 0.7^k < 0.02 / ln 2 by k = 10.
  const std::vector<int> asks = source.SessionOf(prompt)->asks;
  ASSERT_EQ(asks.size(), 39u);  // One token per step: no draft is accepted.
  EXPECT_EQ(asks.front(), 8);
  for (size_t i = 1; i < asks.size(); ++i) EXPECT_LE(asks[i], asks[i - 1]);
  const size_t zero = std::find(asks.begin(), asks.end(), 0) - asks.begin();
  EXPECT_GE(zero, 3u);
  EXPECT_LE(zero, 12u);
  int64_t sum = 0;
  for (int ask : asks) sum += ask;
  EXPECT_EQ(sink.usage().draft_tokens, sum);
  EXPECT_EQ(sink.usage().accepted_draft_tokens, 0);
}

TEST_F(SchedulerUnitTest, SlowDraftCallsThatFindNothingStopBeingMade) {
  // A source that takes 3 ms a call and never has anything (a draftsvc round
  // trip on a text it cannot match), on a machine where a step costs ~1 ms
  // plus 2% a token. Charged for the time its calls took, the sequence stops
  // asking after the first call has been timed; uncharged, asking looks
  // free and it goes on until its quality has decayed.
  const std::vector<int32_t> prompt = PromptWithoutEos(4, 6, 40);
  Continuations truth = {{prompt, PlainDecode(prompt, 40 + kSlack)}};
  int asking_steps[2] = {0, 0};
  for (bool charge : {false, true}) {
    SCOPED_TRACE(charge ? "charged" : "free");
    ScriptedDraftSource source([](const FakeSession&, int) {
      absl::SleepFor(absl::Milliseconds(3));
      return DraftTree();
    });
    DraftFanout fanout({&source}, kVocab);
    RecordingSink sink;
    SchedulerOptions options;
    options.pacing.probe_interval = 1000;  // No probes in this test.
    options.pacing.max_probe_interval = 1000;
    options.pace_repeats = false;
    options.charge_draft_calls = charge;
    auto scheduler = NewScheduler(
        &fanout, *StepCostModel::Create({{1, 0.001}, {1001, 0.021}}), options);
    ASSERT_NE(scheduler, nullptr);
    ASSERT_NO_FATAL_FAILURE(DecodeExpectingPlain(
        scheduler.get(), prompt, 40, 8, truth[prompt], &sink));
    const std::vector<int> asks = source.SessionOf(prompt)->asks;
    ASSERT_EQ(asks.size(), 39u);
    EXPECT_GT(asks.front(), 0);  // Nothing timed yet: the prior decides.
    asking_steps[charge] = static_cast<int>(
        std::count_if(asks.begin(), asks.end(), [](int a) { return a > 0; }));
    EXPECT_EQ(sink.usage().draft_tokens, 0);
  }
  EXPECT_EQ(asking_steps[true], 1);
  EXPECT_GE(asking_steps[false], 3);
}

TEST_F(SchedulerUnitTest, ANamespaceWhoseDraftsNeverHoldStartsFromItsVerdict) {
  // A source that has nothing (random text, a high temperature) until told
  // to draft right. The first request of a namespace asks from the prior
  // until its misses have lowered its quality, probing between; the next
  // request of that namespace starts where the first left off: no asks but
  // its probes, the first after probe_interval steps, then one per
  // (inherited) max interval. After a request whose drafts held, the next
  // starts from the prior again; so does another namespace, and every
  // request with inheritance off.
  std::vector<std::vector<int32_t>> prompts;
  Continuations truth;
  for (uint64_t seed : {4, 9, 11, 13, 15, 17}) {
    prompts.push_back(PromptWithoutEos(seed, 6, 40));
    truth[prompts.back()] = PlainDecode(prompts.back(), 40 + kSlack);
  }
  bool right = false;
  const DraftScript chain = ChainDrafts(&truth, 1.0);
  // Asks (one per step) of `prompt` decoded for `tokens` in `name_space`.
  const auto run = [&](Scheduler* scheduler, ScriptedDraftSource* source,
                       const std::vector<int32_t>& prompt,
                       const std::string& name_space, int tokens = 40) {
    GenerationRequest request = Request(prompt, tokens, 8);
    request.draft.name_space = name_space;
    RecordingSink sink;
    EXPECT_NO_FATAL_FAILURE(DecodeRequestExpectingPlain(
        scheduler, std::move(request), truth[prompt], &sink));
    EXPECT_EQ(sink.usage().accepted_draft_tokens > 0, right);
    std::optional<FakeSession> session = source->SessionOf(prompt);
    return session.has_value() ? session->asks : std::vector<int>();
  };
  // The steps that asked for drafts.
  const auto asking = [](const std::vector<int>& asks) {
    std::vector<int> steps;
    for (size_t i = 0; i < asks.size(); ++i) {
      if (asks[i] > 0) steps.push_back(static_cast<int>(i));
    }
    return steps;
  };
  for (bool inherit : {true, false}) {
    SCOPED_TRACE(inherit ? "inherited" : "not inherited");
    right = false;
    ScriptedDraftSource source([&](const FakeSession& s, int budget) {
      return right ? chain(s, budget) : DraftTree();
    });
    DraftFanout fanout({&source}, kVocab);
    SchedulerOptions options;
    options.pacing.probe_interval = 4;
    options.pacing.max_probe_interval = 8;
    options.pace_repeats = false;
    options.charge_draft_calls = false;  // Pacing alone decides,
    options.follow_step_costs = false;   // on this curve.
    options.inherit_pacing = inherit;
    auto scheduler = NewScheduler(&fanout, RisingCost(), options);
    ASSERT_NE(scheduler, nullptr);
    const std::vector<int> fresh =
        run(scheduler.get(), &source, prompts[0], "a");
    ASSERT_EQ(fresh.size(), 39u);
    EXPECT_GT(fresh.front(), 0);  // The prior asks at once.
    // A request too short to tell (under 2 probe intervals) changes no
    // verdict.
    run(scheduler.get(), &source, prompts[5], "a", /*tokens=*/6);
    const std::vector<int> next =
        run(scheduler.get(), &source, prompts[1], "a");
    ASSERT_EQ(next.size(), 39u);
    if (inherit) {
      EXPECT_EQ(asking(next), (std::vector<int>{4, 13, 22, 31}));
      EXPECT_LT(asking(next).size(), asking(fresh).size());
    } else {
      EXPECT_EQ(asking(next), asking(fresh));
    }
    // Namespace "b" has no verdict: the prior.
    EXPECT_EQ(asking(run(scheduler.get(), &source, prompts[2], "b")),
              asking(fresh));
    // A request of "a" whose drafts hold, then one whose drafts do not:
    // the latter starts from the prior.
    right = true;
    run(scheduler.get(), &source, prompts[3], "a");
    right = false;
    EXPECT_EQ(asking(run(scheduler.get(), &source, prompts[4], "a")),
              asking(fresh));
  }
}

TEST_F(SchedulerUnitTest, ScoredTreesAreCutToWhatPaysForItsRows) {
  // Scored chains whose first two nodes are likely (0.9) and the rest long
  // shots (0.001): with each row costing 2% of a step, the scheduler asks
  // for draft_ask_tokens and verifies only the first two of each tree.
  const std::vector<int32_t> prompt = PromptWithoutEos(7, 6, 40);
  Continuations truth = {{prompt, PlainDecode(prompt, 40 + kSlack)}};
  DraftScript chain = ChainDrafts(&truth, 1.0);
  ScriptedDraftSource source([chain](const FakeSession& s, int budget) {
    DraftTree tree = chain(s, budget);
    for (int j = 0; j < tree.size(); ++j) {
      tree.scores.push_back(j < 2 ? 0.9f : 0.001f);
    }
    return tree;
  });
  DraftFanout fanout({&source}, kVocab);
  RecordingSink sink;
  SchedulerOptions options;
  options.draft_ask_tokens = 8;
  auto scheduler = NewScheduler(&fanout, RisingCost(), options);
  ASSERT_NE(scheduler, nullptr);
  ASSERT_NO_FATAL_FAILURE(DecodeExpectingPlain(
      scheduler.get(), prompt, 40, 12, truth[prompt], &sink));
  const std::vector<int> asks = source.SessionOf(prompt)->asks;
  ASSERT_FALSE(asks.empty());
  EXPECT_GE(*std::max_element(asks.begin(), asks.end()), 8);
  // Every drafted step verified two nodes and accepted both.
  const Usage& usage = sink.usage();
  EXPECT_GT(usage.draft_tokens, 0);
  EXPECT_EQ(usage.draft_tokens % 2, 0);
  EXPECT_EQ(usage.accepted_draft_tokens, usage.draft_tokens);
  EXPECT_LE(usage.draft_tokens, 2 * usage.decoding_steps);
}

TEST_F(SchedulerUnitTest, FailedProbesDoubleTheInterval) {
  const std::vector<int32_t> prompt = PromptWithoutEos(5, 6, 60);
  Continuations truth = {{prompt, PlainDecode(prompt, 60 + kSlack)}};
  SchedulerOptions options;
  options.pacing.probe_interval = 3;
  options.pacing.max_probe_interval = 12;
  options.pacing.probe_tokens = 2;
  // Drafts that never pay: asks are 0 but a probe of probe_tokens after
  // `interval` undrafted steps; a probe that misses doubles the interval
  // (up to the max), one that hits resets it.
  auto expected_asks = [&](size_t n, bool probes_hit) {
    std::vector<int> asks;
    int interval = options.pacing.probe_interval;
    while (asks.size() < n) {
      asks.insert(asks.end(), interval, 0);
      asks.push_back(options.pacing.probe_tokens);
      if (!probes_hit) {
        interval = std::min(2 * interval, options.pacing.max_probe_interval);
      }
    }
    asks.resize(n);
    return asks;
  };
  for (bool probes_hit : {false, true}) {
    SCOPED_TRACE(probes_hit ? "probes hit" : "probes miss");
    // One pacer for every step: the test counts its probes.
    options.pace_repeats = false;
    ScriptedDraftSource source(ChainDrafts(&truth, probes_hit ? 1.0 : 0.0));
    DraftFanout fanout({&source}, kVocab);
    RecordingSink sink;
    auto scheduler = NewScheduler(&fanout, SteepCost(), options);
    ASSERT_NE(scheduler, nullptr);
    ASSERT_NO_FATAL_FAILURE(DecodeExpectingPlain(
        scheduler.get(), prompt, 60, 8, truth[prompt], &sink));
    const std::vector<int> asks = source.SessionOf(prompt)->asks;
    if (!probes_hit) {
      EXPECT_EQ(asks.size(), 59u);  // One token per step.
    }
    EXPECT_EQ(asks, expected_asks(asks.size(), probes_hit));
    const int probes =
        static_cast<int>(std::count(asks.begin(), asks.end(), 2));
    EXPECT_EQ(sink.usage().draft_tokens, 2 * probes);
    EXPECT_EQ(sink.usage().accepted_draft_tokens, probes_hit ? 2 * probes : 0);
  }
}

TEST_F(SchedulerUnitTest, StepsThatRepeatTheirContextArePacedApart) {
  // Drafts that hold exactly where the context's last 3 tokens occurred
  // before (a copied span) and fail elsewhere. Paced apart, the failures in
  // free text stop only the drafts there; with one pacer they also stop
  // drafts that would have held.
  const std::vector<int32_t> prompt = PromptWithoutEos(kRepeatSeed, 6, 80);
  Continuations truth = {{prompt, PlainDecode(prompt, 80 + kSlack)}};
  auto repeats = [&prompt](const std::vector<int32_t>& observed, size_t n) {
    SuffixRepeat r;
    r.Append(prompt);
    r.Append(absl::MakeConstSpan(observed).first(n));
    return r.repeats();
  };
  DraftScript right = ChainDrafts(&truth, 1.0), wrong = ChainDrafts(&truth, 0);
  int zero_repeat_asks[2] = {0, 0}, zero_other_asks[2] = {0, 0};
  int repeat_asks[2] = {0, 0};
  int64_t accepted[2] = {0, 0};
  for (bool apart : {false, true}) {
    SCOPED_TRACE(apart ? "paced apart" : "one pacer");
    ScriptedDraftSource source([&](const FakeSession& s, int budget) {
      return repeats(s.observed, s.observed.size()) ? right(s, budget)
                                                    : wrong(s, budget);
    });
    DraftFanout fanout({&source}, kVocab);
    RecordingSink sink;
    SchedulerOptions options;
    options.pace_repeats = apart;
    options.pacing.probe_interval = 1000;  // No probes in this test.
    options.pacing.max_probe_interval = 1000;
    auto scheduler = NewScheduler(&fanout, RisingCost(), options);
    ASSERT_NE(scheduler, nullptr);
    ASSERT_NO_FATAL_FAILURE(DecodeExpectingPlain(
        scheduler.get(), prompt, 80, 8, truth[prompt], &sink));
    accepted[apart] = sink.usage().accepted_draft_tokens;
    const FakeSession s = *source.SessionOf(prompt);
    for (size_t i = 0; i < s.asks.size(); ++i) {
      if (repeats(s.observed, s.asked_after[i])) {
        ++repeat_asks[apart];
        zero_repeat_asks[apart] += s.asks[i] == 0;
      } else {
        zero_other_asks[apart] += s.asks[i] == 0;
      }
    }
  }
  // The text has both kinds of step, and free-text drafts stop either way.
  EXPECT_GE(repeat_asks[0], 5);
  EXPECT_GE(zero_other_asks[0], 5);
  EXPECT_GE(zero_other_asks[1], 5);
  // One pacer: failures elsewhere cost drafts that would hold. Apart: every
  // repeating step gets its draft.
  EXPECT_GE(zero_repeat_asks[0], 3);
  EXPECT_EQ(zero_repeat_asks[1], 0);
  EXPECT_GE(repeat_asks[1], 5);
  EXPECT_GT(accepted[1], accepted[0] + 10);
}

TEST_F(SchedulerUnitTest, RightDraftsKeepTheBudgetAndCountAsAccepted) {
  // 64 = 1 + 7 * 9 tokens: the prefill's first token, then 7 steps that each
  // accept a whole 8-token draft and add the bonus token.
  constexpr int kNew = 64;
  const std::vector<int32_t> right = PromptWithoutEos(6, 7, 64),
                             half = PromptWithoutEos(7, 8, 64);
  Continuations truth = {{right, PlainDecode(right, kNew + kSlack)},
                         {half, PlainDecode(half, kNew + kSlack)}};
  ASSERT_GE(truth[right].size(), static_cast<size_t>(kNew)) << "EOS early";
  // Drafts right for the `right` prompt, half right for the other.
  DraftScript all_right = ChainDrafts(&truth, 1.0);
  DraftScript half_right = ChainDrafts(&truth, 0.5);
  ScriptedDraftSource mixed([&](const FakeSession& s, int budget) {
    return s.prompt == right ? all_right(s, budget) : half_right(s, budget);
  });
  DraftFanout fanout({&mixed}, kVocab);
  RecordingObserver observer;
  RecordingSink sink_right, sink_half;
  SchedulerOptions options;
  options.observer = &observer;
  auto scheduler = NewScheduler(&fanout, RisingCost(), options);
  ASSERT_NE(scheduler, nullptr);
  ASSERT_TRUE(scheduler->Submit(Request(right, kNew, 8), &sink_right).ok());
  ASSERT_TRUE(scheduler->Submit(Request(half, kNew, 8), &sink_half).ok());
  ASSERT_TRUE(sink_right.Wait());
  ASSERT_TRUE(sink_half.Wait());
  ASSERT_TRUE(sink_right.status().ok()) << sink_right.status();
  ASSERT_TRUE(sink_half.status().ok()) << sink_half.status();
  EXPECT_EQ(sink_right.tokens(), Head(truth[right], kNew));
  EXPECT_EQ(sink_half.tokens(), Head(truth[half], kNew));

  // Hits keep the quality (and so the budget) up, every step.
  for (const std::vector<int32_t>* prompt : {&right, &half}) {
    const std::vector<int> asks = mixed.SessionOf(*prompt)->asks;
    ASSERT_FALSE(asks.empty());
    for (int ask : asks) EXPECT_EQ(ask, 8);
  }
  const Usage r = sink_right.usage();
  EXPECT_EQ(r.output_tokens, kNew);
  EXPECT_EQ(r.decoding_steps, 8);
  EXPECT_EQ(r.draft_tokens, 7 * 8);
  EXPECT_EQ(r.accepted_draft_tokens, 7 * 8);
  EXPECT_DOUBLE_EQ(r.edl, 8.0);
  // Half-right drafts: 4 of 8 accepted per step (the last step may stop
  // early), each step emitting the accepted tokens and the bonus token.
  const Usage h = sink_half.usage();
  EXPECT_EQ(h.draft_tokens, 8 * (h.decoding_steps - 1));
  EXPECT_GE(h.accepted_draft_tokens, h.output_tokens - h.decoding_steps);
  EXPECT_LE(h.accepted_draft_tokens, h.output_tokens - h.decoding_steps + 1);
  EXPECT_LE(h.accepted_draft_tokens, 4 * (h.decoding_steps - 1));
  EXPECT_GE(h.accepted_draft_tokens, 4 * (h.decoding_steps - 2));
  // The observer and the stats saw the same, once the last step is
  // recorded (after the sinks' Finish).
  scheduler->Shutdown(absl::ZeroDuration());
  EXPECT_EQ(observer.verified(), r.draft_tokens + h.draft_tokens);
  EXPECT_EQ(observer.accepted(),
            r.accepted_draft_tokens + h.accepted_draft_tokens);
  const SchedulerStats stats = scheduler->Stats();
  EXPECT_EQ(stats.draft_tokens, r.draft_tokens + h.draft_tokens);
  EXPECT_EQ(stats.accepted_draft_tokens,
            r.accepted_draft_tokens + h.accepted_draft_tokens);
  EXPECT_EQ(stats.output_tokens, 2 * kNew);
}

TEST_F(SchedulerUnitTest, LongPromptIsPrefilledInChunksWhileAnotherDecodes) {
  engine::ModelOptions model_options;
  model_options.prefill_chunk_tokens = 32;
  auto chunked = engine::LoadTinyModel(engine::TinyModelSpec(), model_options);
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  constexpr int kChunk = 8, kDraft = 4;
  const std::vector<int32_t> short_prompt = PromptWithoutEos(8, 4, 80),
                             long_prompt = RandomPrompt(9, 100);
  Continuations truth = {{short_prompt, PlainDecode(short_prompt, 80 + kSlack)},
                         {long_prompt, PlainDecode(long_prompt, 8)}};
  ScriptedDraftSource source(ChainDrafts(&truth, 1.0));
  // The short prompt's first token waits for the long one to be queued, so
  // that it is prefilled while the short one decodes however the threads
  // are scheduled.
  absl::Notification queued;
  source.SetOnObserve([&queued](const FakeSession& s) {
    if (s.observed.size() == 1) queued.WaitForNotification();
  });
  DraftFanout fanout({&source}, kVocab);
  SchedulerOptions options;
  options.prefill_chunk_tokens = kChunk;

  // While the short prompt's sequence decodes (with drafts), the long prompt
  // goes in kChunk-token chunks; before, the model's 32-token chunks.
  {
    RecordingObserver observer;
    options.observer = &observer;
    RecordingSink decoding, prefilling;
    auto scheduler = NewScheduler(&fanout, FlatCost(), options, chunked->get());
    ASSERT_NE(scheduler, nullptr);
    ASSERT_TRUE(
        scheduler->Submit(Request(short_prompt, 80, kDraft), &decoding).ok());
    ASSERT_TRUE(
        scheduler->Submit(Request(long_prompt, 8, 0), &prefilling).ok());
    queued.Notify();
    ASSERT_TRUE(prefilling.Wait());
    ASSERT_TRUE(decoding.Wait());
    ASSERT_TRUE(prefilling.status().ok()) << prefilling.status();
    ASSERT_TRUE(decoding.status().ok()) << decoding.status();
    EXPECT_EQ(prefilling.tokens(), truth[long_prompt]);
    EXPECT_EQ(decoding.tokens(), Head(truth[short_prompt], 80));
    scheduler->Shutdown(absl::ZeroDuration());  // Every step reported.
    int chunk_steps = 0;
    for (const StepReport& step : observer.steps()) {
      if (step.decoding_sequences == 0) {
        EXPECT_LE(step.batch_tokens, 32);
        continue;
      }
      EXPECT_LE(step.batch_tokens,
                step.decoding_sequences * (1 + kDraft) + kChunk);
      chunk_steps += step.batch_sequences > step.decoding_sequences;
    }
    // At least (100 - 32) / 8 steps prefilled a chunk beside the decoding.
    EXPECT_GE(chunk_steps, (100 - 32) / kChunk);
  }
  // Alone, the long prompt goes in the model's chunks.
  {
    RecordingObserver observer;
    options.observer = &observer;
    RecordingSink alone;
    auto scheduler = NewScheduler(&fanout, FlatCost(), options, chunked->get());
    ASSERT_NE(scheduler, nullptr);
    ASSERT_TRUE(scheduler->Submit(Request(long_prompt, 8, 0), &alone).ok());
    ASSERT_TRUE(alone.Wait());
    ASSERT_TRUE(alone.status().ok()) << alone.status();
    EXPECT_EQ(alone.tokens(), truth[long_prompt]);
    scheduler->Shutdown(absl::ZeroDuration());
    std::vector<int64_t> prefill;
    for (const StepReport& step : observer.steps()) {
      if (step.decoding_sequences == 0) prefill.push_back(step.batch_tokens);
    }
    EXPECT_EQ(prefill, std::vector<int64_t>({32, 32, 32, 4}));
  }
}

TEST_F(SchedulerUnitTest, CancelledSequencesEndAndFreeTheirSlots) {
  const std::vector<int32_t> first = PromptWithoutEos(10, 5, 40),
                             queued = RandomPrompt(11, 6),
                             last = RandomPrompt(12, 7);
  Continuations truth = {{first, PlainDecode(first, 300)},
                         {last, PlainDecode(last, 20 + kSlack)}};
  ScriptedDraftSource source(ChainDrafts(&truth, 0.5));
  RecordingSink sink_first, sink_queued, sink_last;
  // The first sequence's client leaves after 12 tokens; the queued one's
  // after the first sequence's 3rd token (it is still queued: one slot).
  source.SetOnObserve([&](const FakeSession& s) {
    if (s.prompt != first) return;
    if (s.observed.size() >= 3) sink_queued.Cancel();
    if (s.observed.size() >= 12) sink_first.Cancel();
  });
  DraftFanout fanout({&source}, kVocab);
  RecordingObserver observer;
  SchedulerOptions options;
  options.max_running = 1;
  options.observer = &observer;
  auto scheduler = NewScheduler(&fanout, FlatCost(), options);
  ASSERT_NE(scheduler, nullptr);
  ASSERT_TRUE(scheduler->Submit(Request(first, 280, 4), &sink_first).ok());
  ASSERT_TRUE(scheduler->Submit(Request(queued, 20, 4), &sink_queued).ok());
  ASSERT_TRUE(scheduler->Submit(Request(last, 20, 4), &sink_last).ok());

  ASSERT_TRUE(sink_queued.Wait());
  EXPECT_EQ(sink_queued.status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(sink_queued.tokens().empty());           // It never ran...
  EXPECT_FALSE(source.SessionOf(queued).has_value());  // ...nor drafted.

  ASSERT_TRUE(sink_first.Wait());
  EXPECT_EQ(sink_first.status().code(), absl::StatusCode::kCancelled);
  const std::vector<int32_t> got = sink_first.tokens();
  EXPECT_GE(got.size(), 12u);
  EXPECT_LT(got.size(), 280u);
  EXPECT_EQ(got, Head(truth[first], static_cast<int>(got.size())));
  ExpectObservedAndClosed(source, first, sink_first);

  // Its slot went to the last request, which runs to the end.
  ASSERT_TRUE(sink_last.Wait());
  ASSERT_TRUE(sink_last.status().ok()) << sink_last.status();
  EXPECT_EQ(sink_last.tokens(), Head(truth[last], 20));
  ExpectObservedAndClosed(source, last, sink_last);

  const SchedulerStats stats = scheduler->Stats();
  EXPECT_EQ(stats.requests_admitted, 3);
  EXPECT_EQ(stats.requests_cancelled, 2);
  EXPECT_EQ(stats.requests_finished, 1);
  EXPECT_EQ(stats.requests_failed, 0);
  EXPECT_EQ(observer.outcomes(RequestOutcome::kCancelled), 2);
  EXPECT_EQ(observer.outcomes(RequestOutcome::kFinished), 1);
}

TEST_F(SchedulerUnitTest, StopStringCutsWherePlainDecodingReachesIt) {
  constexpr int kNew = 48;
  const std::vector<int32_t> prompt = PromptWithoutEos(13, 6, 48);
  Continuations truth = {{prompt, PlainDecode(prompt, kNew + kSlack)}};
  ASSERT_GE(truth[prompt].size(), static_cast<size_t>(kNew)) << "EOS early";

  // Plain decoding's text, from the scheduler without drafts.
  RecordingSink full;
  {
    auto plain = NewScheduler(nullptr, FlatCost(), {});
    ASSERT_NE(plain, nullptr);
    ASSERT_TRUE(plain->Submit(Request(prompt, kNew, 0), &full).ok());
    ASSERT_TRUE(full.Wait());
    ASSERT_TRUE(full.status().ok()) << full.status();
  }
  EXPECT_EQ(full.tokens(), Head(truth[prompt], kNew));
  const std::string text = full.text();
  ASSERT_GT(text.size(), 20u) << text;
  // Three characters from the second half of the text; it ends where it
  // first appears.
  const std::string stop = text.substr(text.size() / 2, 3);
  const size_t at = text.find(stop);

  // With drafts that are right: the stop may fall inside a step's tokens.
  ScriptedDraftSource source(ChainDrafts(&truth, 1.0));
  DraftFanout fanout({&source}, kVocab);
  auto scheduler = NewScheduler(&fanout, FlatCost(), {});
  ASSERT_NE(scheduler, nullptr);
  RecordingSink cut;
  GenerationRequest request = Request(prompt, kNew, 6);
  request.stop = {"\x01never", stop};
  ASSERT_TRUE(scheduler->Submit(request, &cut).ok());
  ASSERT_TRUE(cut.Wait());
  ASSERT_TRUE(cut.status().ok()) << cut.status();
  EXPECT_EQ(cut.text(), text.substr(0, at)) << "stop \"" << stop << "\"";
  EXPECT_EQ(cut.usage().finish_reason, FinishReason::kStopString);
  // The tokens are plain decoding's, up to the one completing the stop.
  const std::vector<int32_t> some = cut.tokens();
  ASSERT_FALSE(some.empty());
  EXPECT_EQ(some, Head(truth[prompt], static_cast<int>(some.size())));
  engine::DecodeOptions visible;
  visible.render_special = false;
  EXPECT_NE(tokenizer_->Decode(some, visible)->find(stop), std::string::npos);
  EXPECT_EQ(
      tokenizer_
          ->Decode(absl::MakeConstSpan(some).first(some.size() - 1), visible)
          ->find(stop),
      std::string::npos);
  EXPECT_EQ(cut.usage().output_tokens, static_cast<int>(some.size()));
  ExpectObservedAndClosed(source, prompt, cut);
}

TEST_F(SchedulerUnitTest, FailingDraftSourceFallsBackToPlainDecoding) {
  constexpr int kNew = 40;
  const std::vector<int32_t> prompt = PromptWithoutEos(14, 6, 40);
  Continuations truth = {{prompt, PlainDecode(prompt, kNew + kSlack)}};
  ScriptedDraftSource source(ChainDrafts(&truth, 1.0));
  source.FailCalls(-1);
  DraftFanout fanout({&source}, kVocab);
  RecordingObserver observer;
  SchedulerOptions options;
  options.observer = &observer;
  // Asking stays free, so every step asks (and fails) however far the
  // quality falls: the test counts failures, not pacing.
  options.charge_draft_calls = false;
  auto scheduler = NewScheduler(&fanout, FlatCost(), options);
  ASSERT_NE(scheduler, nullptr);
  RecordingSink sink;
  ASSERT_NO_FATAL_FAILURE(DecodeExpectingPlain(
      scheduler.get(), prompt, kNew, 8, truth[prompt], &sink));
  EXPECT_EQ(sink.usage().finish_reason, FinishReason::kLength);
  EXPECT_EQ(sink.usage().draft_tokens, 0);
  EXPECT_EQ(sink.usage().decoding_steps, kNew);
  ExpectObservedAndClosed(source, prompt, sink);

  // Every call failed, and said so.
  const std::vector<DraftCall> calls = observer.draft_calls();
  ASSERT_EQ(calls.size(), static_cast<size_t>(kNew - 1));
  for (const DraftCall& call : calls) {
    EXPECT_FALSE(call.available);
    EXPECT_EQ(call.new_failures, 1);
  }
  SchedulerStats stats = scheduler->Stats();
  EXPECT_FALSE(stats.drafts_available);
  EXPECT_EQ(stats.draft_failures, kNew - 1);
  EXPECT_EQ(stats.requests_finished, 1);

  // A source that recovers drafts again, and the output does not change.
  const std::vector<int32_t> again = PromptWithoutEos(15, 7, 40);
  truth[again] = PlainDecode(again, kNew + kSlack);
  source.FailCalls(3);
  RecordingSink recovered;
  ASSERT_TRUE(scheduler->Submit(Request(again, kNew, 8), &recovered).ok());
  ASSERT_TRUE(recovered.Wait());
  ASSERT_TRUE(recovered.status().ok()) << recovered.status();
  EXPECT_EQ(recovered.tokens(), Head(truth[again], kNew));
  EXPECT_GT(recovered.usage().accepted_draft_tokens, 0);
  EXPECT_TRUE(observer.draft_calls().back().available);
  stats = scheduler->Stats();
  EXPECT_TRUE(stats.drafts_available);
  EXPECT_EQ(stats.draft_failures, kNew - 1 + 3);
}

TEST_F(SchedulerUnitTest, EveryOpenedHandleIsObservedAndClosed) {
  // Sequences that end every way: length, stop string, cancelled while
  // running, cancelled while queued (never opened), ended by Shutdown.
  const std::vector<int32_t> length = RandomPrompt(16, 5),
                             stopped = PromptWithoutEos(17, 6, 30),
                             cancelled = PromptWithoutEos(18, 7, 40),
                             queued = RandomPrompt(19, 8),
                             shut = PromptWithoutEos(20, 9, 200);
  Continuations truth;
  for (const auto* p : {&length, &stopped, &cancelled, &queued, &shut}) {
    truth[*p] = PlainDecode(*p, (p == &shut ? 200 : 30) + kSlack);
  }
  ScriptedDraftSource source(RandomDrafts(&truth, /*seed=*/11));
  RecordingSink sink_length, sink_stopped, sink_cancelled, sink_queued,
      sink_shut;
  source.SetOnObserve([&](const FakeSession& s) {
    if (s.prompt == cancelled && s.observed.size() >= 5) {
      sink_cancelled.Cancel();
    }
    // Slow steps: the scheduler shuts down long before `shut` could end.
    if (s.prompt == shut) absl::SleepFor(absl::Milliseconds(20));
  });
  sink_queued.Cancel();  // Its client left while it waited for a slot.
  DraftFanout fanout({&source}, kVocab);
  SchedulerOptions options;
  options.max_running = 3;
  auto scheduler = NewScheduler(&fanout, FlatCost(), options);
  ASSERT_NE(scheduler, nullptr);
  // The stop string: a character of plain decoding's 10th token onwards.
  const std::string stop(
      1, tokenizer_->TokenBytes(truth[stopped][9], false).empty()
             ? '!'
             : tokenizer_->TokenBytes(truth[stopped][9], false).back());
  GenerationRequest stop_request = Request(stopped, 30, 5);
  stop_request.stop = {stop};
  ASSERT_TRUE(scheduler->Submit(Request(length, 30, 5), &sink_length).ok());
  ASSERT_TRUE(scheduler->Submit(stop_request, &sink_stopped).ok());
  ASSERT_TRUE(
      scheduler->Submit(Request(cancelled, 200, 5), &sink_cancelled).ok());
  ASSERT_TRUE(scheduler->Submit(Request(queued, 30, 5), &sink_queued).ok());
  ASSERT_TRUE(sink_length.Wait());
  ASSERT_TRUE(sink_stopped.Wait());
  ASSERT_TRUE(sink_cancelled.Wait());
  ASSERT_TRUE(sink_queued.Wait());
  // One that is still running when the scheduler shuts down.
  ASSERT_TRUE(scheduler->Submit(Request(shut, 200, 5), &sink_shut).ok());
  while (sink_shut.tokens().size() < 3 && !sink_shut.finished()) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  scheduler->Shutdown(absl::ZeroDuration());
  ASSERT_TRUE(sink_shut.Wait());

  EXPECT_TRUE(sink_length.status().ok()) << sink_length.status();
  const std::vector<int32_t> plain_length = Head(truth[length], 30);
  EXPECT_EQ(sink_length.usage().finish_reason, plain_length.back() == kEos
                                                   ? FinishReason::kEos
                                                   : FinishReason::kLength);
  EXPECT_TRUE(sink_stopped.status().ok()) << sink_stopped.status();
  EXPECT_EQ(sink_stopped.usage().finish_reason, FinishReason::kStopString);
  EXPECT_EQ(sink_cancelled.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(sink_queued.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(sink_shut.status().code(), absl::StatusCode::kUnavailable);
  for (const auto& [prompt, sink] :
       std::vector<std::pair<const std::vector<int32_t>*, RecordingSink*>>{
           {&length, &sink_length},
           {&stopped, &sink_stopped},
           {&cancelled, &sink_cancelled},
           {&shut, &sink_shut}}) {
    SCOPED_TRACE(prompt->size());
    ExpectObservedAndClosed(source, *prompt, *sink);
    EXPECT_EQ(sink->tokens(),
              Head(truth[*prompt], static_cast<int>(sink->tokens().size())));
  }
  EXPECT_FALSE(source.SessionOf(queued).has_value());
  EXPECT_EQ(source.sessions().size(), 4u);
  EXPECT_EQ(source.Stats().open_sessions, 0);
}

}  // namespace
}  // namespace lookahead::verifysvc

namespace lookahead::verifysvc {
namespace {

// ---------------------------------------------------------------------------
// Token Recycling, per-source accounting, source failures.

TEST_F(SchedulerUnitTest, PredictionsOfEveryVerifiedRowReachTheSource) {
  constexpr int kNew = 30;
  const std::vector<int32_t> prompt = PromptWithoutEos(500, 9, kNew);
  Continuations truth;
  truth[prompt] = PlainDecode(prompt, kNew + kSlack);
  ScriptedDraftSource source(ChainDrafts(&truth, /*right_fraction=*/0.5));
  source.SetWantsPredictions(true);
  DraftFanout fanout({&source}, kVocab);
  SchedulerOptions options;
  options.prediction_k = 3;
  auto scheduler = NewScheduler(&fanout, FlatCost(), options);
  ASSERT_NE(scheduler, nullptr);
  RecordingSink sink;
  ASSERT_NO_FATAL_FAILURE(DecodeExpectingPlain(
      scheduler.get(), prompt, kNew, 6, truth[prompt], &sink));
  scheduler.reset();

  std::optional<FakeSession> session = source.SessionOf(prompt);
  ASSERT_TRUE(session.has_value());
  // One per decoding step (every step after the first token), each before
  // that step's tokens were observed, for the tree proposed for it.
  ASSERT_FALSE(session->predictions.empty());
  EXPECT_EQ(session->predictions.size(), session->asks.size());
  size_t proposed = 0;
  size_t last_observed = 0;
  for (const auto& [observed, p] : session->predictions) {
    SCOPED_TRACE(observed);
    EXPECT_GE(observed, 1u);  // the first token came from the prefill
    EXPECT_GT(observed, last_observed);  // each step emits >= 1 token
    last_observed = observed;
    ASSERT_LT(observed, session->observed.size());
    EXPECT_EQ(p.k, 3);
    ASSERT_EQ(p.top_tokens.size(), 3 * (p.tokens.size() + 1));
    if (!p.tokens.empty()) {
      ASSERT_LT(proposed, session->proposed.size());
      EXPECT_EQ(p.tokens, session->proposed[proposed].tokens);
      EXPECT_EQ(p.parents, session->proposed[proposed].parents);
      ++proposed;
    }
    // Greedy: the root's best prediction is the next token emitted, and
    // along the accepted chain each node's best is the token after it.
    EXPECT_EQ(p.top_tokens[0], session->observed[observed]);
    for (size_t j = 0;
         j < p.tokens.size() && observed + j + 1 < session->observed.size() &&
         p.tokens[j] == session->observed[observed + j];
         ++j) {
      EXPECT_EQ(p.top_tokens[3 * (j + 1)], session->observed[observed + j + 1])
          << "node " << j;
    }
    for (int32_t id : p.top_tokens) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, kVocab);
    }
  }
  EXPECT_EQ(proposed, session->proposed.size());
}

TEST_F(SchedulerUnitTest, NoPredictionsWhenOffOrUnwanted) {
  constexpr int kNew = 12;
  const std::vector<int32_t> prompt = PromptWithoutEos(600, 5, kNew);
  Continuations truth;
  truth[prompt] = PlainDecode(prompt, kNew + kSlack);
  for (bool wanted : {false, true}) {
    SCOPED_TRACE(wanted);
    ScriptedDraftSource source(ChainDrafts(&truth, 1.0));
    source.SetWantsPredictions(wanted);
    DraftFanout fanout({&source}, kVocab);
    SchedulerOptions options;
    options.prediction_k = wanted ? 0 : 4;  // off, or nobody wants them
    auto scheduler = NewScheduler(&fanout, FlatCost(), options);
    ASSERT_NE(scheduler, nullptr);
    RecordingSink sink;
    ASSERT_TRUE(scheduler->Submit(Request(prompt, kNew, 4), &sink).ok());
    ASSERT_TRUE(sink.Wait());
    EXPECT_EQ(sink.tokens(), Head(truth[prompt], kNew));
    scheduler.reset();
    const std::optional<FakeSession> session = source.SessionOf(prompt);
    ASSERT_TRUE(session.has_value());
    EXPECT_TRUE(session->predictions.empty());
  }
}

// Even nodes come from the trie alone, odd ones from the trie and the
// n-gram pool (merged), so per step the trie counts every verified and
// accepted draft token and the pool every second one.
TEST_F(SchedulerUnitTest, UsageCountsDraftTokensPerSource) {
  constexpr int kNew = 40;
  const std::vector<int32_t> prompt = PromptWithoutEos(700, 7, kNew);
  Continuations truth;
  truth[prompt] = PlainDecode(prompt, kNew + kSlack);
  DraftScript chain = ChainDrafts(&truth, /*right_fraction=*/0.75);
  ScriptedDraftSource source([chain](const FakeSession& s, int budget) {
    DraftTree tree = chain(s, budget);
    for (int j = 0; j < tree.size(); ++j) {
      tree.sources.push_back(engine::DraftSourceTag::kTrie);
      tree.source_sets.push_back(
          engine::SourceBit(engine::DraftSourceTag::kTrie) |
          (j % 2 == 1 ? engine::SourceBit(engine::DraftSourceTag::kNgram) : 0));
    }
    return tree;
  });
  DraftFanout fanout({&source}, kVocab);
  RecordingObserver observer;
  SchedulerOptions options;
  options.observer = &observer;
  auto scheduler = NewScheduler(&fanout, FlatCost(), options);
  ASSERT_NE(scheduler, nullptr);
  RecordingSink sink;
  ASSERT_NO_FATAL_FAILURE(DecodeExpectingPlain(
      scheduler.get(), prompt, kNew, 8, truth[prompt], &sink));
  scheduler.reset();

  const Usage usage = sink.usage();
  ASSERT_GT(usage.accepted_draft_tokens, 0);
  ASSERT_EQ(usage.sources.size(), 2u);
  EXPECT_EQ(usage.sources[0].source, engine::DraftSourceTag::kTrie);
  EXPECT_EQ(usage.sources[0].draft_tokens, usage.draft_tokens);
  EXPECT_EQ(usage.sources[0].accepted_draft_tokens,
            usage.accepted_draft_tokens);
  EXPECT_EQ(usage.sources[1].source, engine::DraftSourceTag::kNgram);
  int64_t ngram_verified = 0;
  const std::optional<FakeSession> session = source.SessionOf(prompt);
  ASSERT_TRUE(session.has_value());
  for (const DraftTree& tree : session->proposed) {
    ngram_verified += tree.size() / 2;
  }
  EXPECT_EQ(usage.sources[1].draft_tokens, ngram_verified);
  // Per step (trie first, then the pool): the pool's accepted nodes are
  // the odd ones of the accepted chain.
  int64_t ngram_accepted = 0;
  const std::vector<std::array<int, 3>> per_source = observer.per_source();
  for (size_t i = 0; i < per_source.size(); ++i) {
    const auto& [tag, verified, accepted] = per_source[i];
    if (tag != static_cast<int>(engine::DraftSourceTag::kNgram)) continue;
    ASSERT_GT(i, 0u);
    const auto& trie = per_source[i - 1];
    EXPECT_EQ(trie[0], static_cast<int>(engine::DraftSourceTag::kTrie));
    EXPECT_EQ(verified, trie[1] / 2);
    EXPECT_EQ(accepted, trie[2] / 2);
    ngram_accepted += accepted;
  }
  EXPECT_EQ(usage.sources[1].accepted_draft_tokens, ngram_accepted);
  EXPECT_GT(ngram_accepted, 0);
}

TEST_F(SchedulerUnitTest, SourceFailureEndsTheRequestWithItsStatus) {
  constexpr int kNew = 20;
  const std::vector<int32_t> prompt = PromptWithoutEos(800, 6, kNew);
  Continuations truth;
  truth[prompt] = PlainDecode(prompt, kNew + kSlack);
  ScriptedDraftSource source(ChainDrafts(&truth, 1.0));
  source.FailSessions(absl::FailedPreconditionError(
      "draftsvc: source DRAFT_SOURCE_ASSISTANT is not served (--assistant)"));
  DraftFanout fanout({&source}, kVocab);
  auto scheduler = NewScheduler(&fanout, FlatCost(), SchedulerOptions());
  ASSERT_NE(scheduler, nullptr);
  RecordingSink failing, plain;
  ASSERT_TRUE(scheduler->Submit(Request(prompt, kNew, 4), &failing).ok());
  ASSERT_TRUE(failing.Wait());
  EXPECT_EQ(failing.status().code(), absl::StatusCode::kFailedPrecondition)
      << failing.status();
  EXPECT_EQ(failing.status().message(),
            "draftsvc: source DRAFT_SOURCE_ASSISTANT is not served "
            "(--assistant)");
  // It ended at its first drafted step: only the prefill's token went out.
  EXPECT_EQ(failing.tokens(), Head(truth[prompt], 1));
  const std::optional<FakeSession> session = source.SessionOf(prompt);
  ASSERT_TRUE(session.has_value());
  EXPECT_EQ(session->closes, 1);
  // The scheduler goes on serving: a request without drafts completes.
  ASSERT_TRUE(scheduler->Submit(Request(prompt, kNew, 0), &plain).ok());
  ASSERT_TRUE(plain.Wait());
  ASSERT_TRUE(plain.status().ok()) << plain.status();
  EXPECT_EQ(plain.tokens(), Head(truth[prompt], kNew));
}

// The assistant's gate: its drafts are withheld from draftsvc once the
// seconds its passes are reported to cost outweigh what its accepted tokens
// are worth, and never while they cost nothing. Output is plain decoding's
// either way.
TEST_F(SchedulerUnitTest, AssistantIsWithheldWhileItsPassesCostMoreThanItAdds) {
  constexpr int kNew = 60;
  const std::vector<int32_t> prompt = PromptWithoutEos(900, 7, kNew);
  Continuations truth;
  truth[prompt] = PlainDecode(prompt, kNew + kSlack);
  const engine::DraftSourceSet assistant =
      engine::SourceBit(engine::DraftSourceTag::kAssistant);
  for (double seconds : {0.0, 1.0}) {
    SCOPED_TRACE(absl::StrCat(seconds, " s of assistant passes per draft"));
    ScriptedDraftSource source(AssistantChain(&truth, seconds));
    RecordingObserver observer;
    SchedulerOptions options;
    options.observer = &observer;
    FakeSession session;
    ASSERT_NO_FATAL_FAILURE(DecodeAssistantOnly(&source, options, prompt, kNew,
                                                truth[prompt], &session));
    const std::vector<engine::DraftSourceSet>& withheld = session.withheld;
    ASSERT_GE(withheld.size(), 4u);
    int withheld_asks = 0;
    for (engine::DraftSourceSet set : withheld) withheld_asks += set != 0;
    const std::array<int, 2> gate = observer.gate(GatedMechanism::kAssistant);
    EXPECT_EQ(gate[0], withheld_asks);
    EXPECT_EQ(gate[0] + gate[1], static_cast<int>(withheld.size()));
    if (seconds == 0) {
      EXPECT_EQ(withheld_asks, 0);
      continue;
    }
    // Unmeasured, it runs; after two 1 s drafts it is withheld but for
    // probes (3 steps after 16, 32, ... steps off).
    EXPECT_EQ(withheld[0], 0u);
    EXPECT_EQ(withheld[1], 0u);
    EXPECT_EQ(withheld[2], assistant);
    EXPECT_GT(withheld_asks, static_cast<int>(withheld.size()) * 2 / 3);
  }
}

// An assistant whose one pass, as its source measured it, costs more than a
// token is worth at the verifier's throughput (the target drafting for
// itself on the verifier's cores) is withheld from the first ask on: it
// never starts a session it cannot pay back, though it would draft the
// truth and report no cost. Where draftsvc has cores of its own
// (assistant_cost_share 0), or the pass is cheap, it runs from the start.
TEST_F(SchedulerUnitTest, AnAssistantWhosePassCostsMoreThanATokenIsNeverAsked) {
  constexpr int kNew = 40;
  const std::vector<int32_t> prompt = PromptWithoutEos(920, 7, kNew);
  Continuations truth;
  truth[prompt] = PlainDecode(prompt, kNew + kSlack);
  const engine::DraftSourceSet assistant =
      engine::SourceBit(engine::DraftSourceTag::kAssistant);
  struct Case {
    double pass_seconds;
    double cost_share;
    bool withheld;
  };
  for (const Case& c : {Case{10.0, 1.0, true}, Case{10.0, 0.0, false},
                        Case{1e-9, 1.0, false}, Case{0.0, 1.0, false}}) {
    SCOPED_TRACE(absl::StrCat(c.pass_seconds, " s a pass, cost share ",
                              c.cost_share));
    ScriptedDraftSource source(AssistantChain(&truth, /*seconds=*/0));
    DraftCost cost;
    cost.assistant_seconds_per_token = c.pass_seconds;
    source.SetCost(cost);
    SchedulerOptions options;
    options.assistant_cost_share = c.cost_share;
    FakeSession session;
    ASSERT_NO_FATAL_FAILURE(DecodeAssistantOnly(&source, options, prompt, kNew,
                                                truth[prompt], &session));
    const std::vector<engine::DraftSourceSet>& withheld = session.withheld;
    ASSERT_GE(withheld.size(), 4u);
    for (size_t k = 0; k < withheld.size(); ++k) {
      EXPECT_EQ(withheld[k], c.withheld ? assistant : 0u) << "ask " << k;
    }
  }
}

// A step that asks draftsvc for no draft tokens withholds the assistant
// too, whatever its gate would say: the first entry it may draft for opens
// its session, which prefills the whole context. Here nothing drafts (the
// source has nothing), so the pacer soon asks for none between probes.
TEST_F(SchedulerUnitTest, AStepThatAsksForNoDraftWithholdsTheAssistant) {
  constexpr int kNew = 60;
  const std::vector<int32_t> prompt = PromptWithoutEos(930, 7, kNew);
  Continuations truth;
  truth[prompt] = PlainDecode(prompt, kNew + kSlack);
  const engine::DraftSourceSet assistant =
      engine::SourceBit(engine::DraftSourceTag::kAssistant);
  ScriptedDraftSource source(
      [](const FakeSession&, int) { return DraftTree(); });
  FakeSession session;
  ASSERT_NO_FATAL_FAILURE(DecodeAssistantOnly(&source, SchedulerOptions(),
                                              prompt, kNew, truth[prompt],
                                              &session));
  int empty_asks = 0;
  for (size_t k = 0; k < session.asks.size(); ++k) {
    if (session.asks[k] != 0) continue;
    ++empty_asks;
    EXPECT_EQ(session.withheld[k], assistant) << "ask " << k;
  }
  EXPECT_GT(empty_asks, 0);
}

// The Jacobi window's gate: on a cost curve where its rows cost more than
// every n-gram accepted could add it never runs (a 2-core CPU); where rows
// are free (a GPU below its critical length) it runs every step. Output is
// plain decoding's either way.
TEST_F(SchedulerUnitTest, JacobiWindowRunsOnlyWhereItsRowsCanPay) {
  constexpr int kNew = 40;
  const std::vector<int32_t> prompt = PromptWithoutEos(950, 7, kNew);
  Continuations truth;
  truth[prompt] = PlainDecode(prompt, kNew + kSlack);
  for (bool flat : {true, false}) {
    SCOPED_TRACE(flat ? "flat cost" : "steep cost");
    ScriptedDraftSource source(ChainDrafts(&truth, /*right_fraction=*/0.5));
    DraftFanout fanout({&source}, kVocab);
    RecordingObserver observer;
    SchedulerOptions options;
    options.observer = &observer;
    auto scheduler =
        NewScheduler(&fanout, flat ? FlatCost() : SteepCost(), options);
    ASSERT_NE(scheduler, nullptr);
    GenerationRequest request = Request(prompt, kNew, 4);
    request.draft.lookahead_window = 4;
    request.draft.lookahead_ngram = 3;
    request.draft.lookahead_guess = 4;
    RecordingSink sink;
    ASSERT_TRUE(scheduler->Submit(std::move(request), &sink).ok());
    ASSERT_TRUE(sink.Wait());
    ASSERT_TRUE(sink.status().ok()) << sink.status();
    EXPECT_EQ(sink.tokens(), Head(truth[prompt], kNew));
    scheduler.reset();
    const std::array<int, 2> gate =
        observer.gate(GatedMechanism::kJacobiWindow);
    EXPECT_GT(gate[0] + gate[1], 0);
    if (flat) {
      EXPECT_EQ(gate[0], 0);
    } else {
      EXPECT_EQ(gate[1], 0);
    }
  }
}


// A source whose opens answer only when the test says so, refusing the
// sessions then if told to (OpenAnswered, Failure).
class SlowOpenSource : public ScriptedDraftSource {
 public:
  using ScriptedDraftSource::ScriptedDraftSource;

  bool OpenAnswered(int64_t handle) const override {
    absl::MutexLock lock(&open_mu_);
    return answered_;
  }
  absl::Status Failure(int64_t handle) const override {
    absl::MutexLock lock(&open_mu_);
    return refusal_;
  }
  // Every open answers from now on, refusing with `refusal` (OK: serves).
  void Answer(absl::Status refusal) {
    absl::MutexLock lock(&open_mu_);
    answered_ = true;
    refusal_ = std::move(refusal);
  }

 private:
  mutable absl::Mutex open_mu_;
  bool answered_ ABSL_GUARDED_BY(open_mu_) = false;
  absl::Status refusal_ ABSL_GUARDED_BY(open_mu_);
};

// A request that named its sources holds its first token until they answer
// its open, without holding up the model thread: another request decodes
// to its end meanwhile. A refusal then ends it before any token; an answer
// that serves it lets it decode as plain decoding does.
TEST_F(SchedulerUnitTest, NamedSourcesHoldTheFirstTokenNotTheOthers) {
  constexpr int kNew = 12;
  const std::vector<int32_t> prompt = PromptWithoutEos(1000, 6, kNew);
  const std::vector<int32_t> other = PromptWithoutEos(1100, 7, kNew);
  Continuations truth;
  truth[prompt] = PlainDecode(prompt, kNew + kSlack);
  truth[other] = PlainDecode(other, kNew + kSlack);
  for (bool refused : {true, false}) {
    SCOPED_TRACE(refused ? "refused" : "served");
    SlowOpenSource source(ChainDrafts(&truth, 1.0));
    DraftFanout fanout({&source}, kVocab);
    SchedulerOptions options;
    options.open_answer_wait = absl::Seconds(60);  // the test answers
    auto scheduler = NewScheduler(&fanout, FlatCost(), options);
    ASSERT_NE(scheduler, nullptr);
    GenerationRequest named = Request(prompt, kNew, 4);
    named.draft.sources = engine::SourceBit(engine::DraftSourceTag::kTrie);
    RecordingSink held, decoding;
    ASSERT_TRUE(scheduler->Submit(std::move(named), &held).ok());
    ASSERT_TRUE(scheduler->Submit(Request(other, kNew, 4), &decoding).ok());
    ASSERT_TRUE(decoding.Wait());
    EXPECT_TRUE(decoding.status().ok()) << decoding.status();
    EXPECT_EQ(decoding.tokens(), Head(truth[other], kNew));
    EXPECT_FALSE(held.finished());
    EXPECT_TRUE(held.tokens().empty());
    source.Answer(refused ? absl::FailedPreconditionError("not served")
                          : absl::OkStatus());
    ASSERT_TRUE(held.Wait());
    if (refused) {
      EXPECT_EQ(held.status().code(), absl::StatusCode::kFailedPrecondition)
          << held.status();
      EXPECT_TRUE(held.tokens().empty());
    } else {
      EXPECT_TRUE(held.status().ok()) << held.status();
      EXPECT_EQ(held.tokens(), Head(truth[prompt], kNew));
    }
  }
}

}  // namespace
}  // namespace lookahead::verifysvc
