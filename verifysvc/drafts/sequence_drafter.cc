#include "verifysvc/drafts/sequence_drafter.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/time/clock.h"
#include "verifysvc/drafts/verify_predictions.h"

namespace lookahead::verifysvc {
namespace {

using SourceCounts = std::array<int, engine::kNumDraftSourceTags>;

// Adds one to every source of `tree`'s node `node` (a node several sources
// proposed counts for each).
void CountSources(const engine::DraftTree& tree, int node,
                  SourceCounts* counts) {
  const engine::DraftSourceSet set = tree.SourcesOf(node);
  for (int t = 0; t < engine::kNumDraftSourceTags; ++t) {
    if ((set >> t) & 1) ++(*counts)[t];
  }
}

}  // namespace

int SequenceDrafter::ScratchRowsOf(const DraftPolicy& policy) {
  if (!policy.enabled() || policy.lookahead_window <= 0 ||
      policy.lookahead_ngram < 2 ||
      !policy.MayUse(engine::DraftSourceTag::kNgram)) {
    return 0;
  }
  return policy.lookahead_window * (policy.lookahead_ngram - 1);
}

SequenceDrafter::SequenceDrafter(const DraftingContext* context,
                                 const DraftPolicy& policy,
                                 const engine::SamplingParams& sampling,
                                 absl::Span<const int32_t> prompt,
                                 int64_t handle, absl::Time opened)
    : context_(context),
      policy_(policy),
      sampling_(sampling),
      opened_(opened),
      handle_(handle),
      pacers_{DraftPacer(context->options.pacing),
              DraftPacer(context->options.pacing)},
      window_gate_(context->options.gate),
      assistant_gate_(context->options.gate) {
  if (context_->options.pace_repeats) repeats_.Append(prompt);
  if (ScratchRowsOf(policy_) > 0) {
    window_context_.assign(prompt.begin(), prompt.end());
  }
  assistant_seen_ =
      (policy_.sources &
       engine::SourceBit(engine::DraftSourceTag::kAssistant)) != 0;
}

SequenceDrafter::~SequenceDrafter() {
  if (handle_ != 0) context_->fanout->Close(handle_);
}

bool SequenceDrafter::AwaitingOpen(absl::Time now) const {
  return policy_.sources != 0 && handle_ != 0 &&
         now < opened_ + context_->options.open_answer_wait &&
         !context_->fanout->OpenAnswered(handle_);
}

absl::Status SequenceDrafter::Failure() const {
  return handle_ == 0 ? absl::OkStatus() : context_->fanout->Failure(handle_);
}

DraftCandidate SequenceDrafter::Candidate(int room) {
  asked_ = 0;
  pace_ = repeats_.repeats() ? 1 : 0;
  return pacer().Candidate(std::clamp(policy_.decoding_length, 0, room),
                           policy_.branch_length);
}

int SequenceDrafter::ScratchRows(int base_rows, const TokenPrice& price) {
  window_runs_ = false;
  const int rows = ScratchRowsOf(policy_);
  if (rows == 0 || window_failed_) return 0;
  // Its rows' cost on the cost curve, against the most its n-grams can add
  // (N - 1 tokens a step) and then what they were measured to add.
  const StepCostModel& cost = *context_->cost;
  const bool runs = window_gate_.Decide(
      price.seconds_per_token,
      cost.Seconds(base_rows + rows) - cost.Seconds(base_rows),
      policy_.lookahead_ngram - 1);
  context_->observer->OnCostGate(GatedMechanism::kJacobiWindow, runs);
  if (!runs) return 0;
  if (window_ == nullptr && !MakeWindow()) return 0;
  // The scheduler sized the cache for the prompt, the output, a full tree
  // and ScratchRowsOf, so the rows always fit.
  window_runs_ = true;
  return rows;
}

bool SequenceDrafter::MakeWindow() {
  JacobiOptions options;
  options.window = policy_.lookahead_window;
  options.ngram = policy_.lookahead_ngram;
  options.max_ngrams = policy_.lookahead_guess;
  options.vocab_size = context_->vocab_size;
  options.seed = sampling_.seed;
  absl::StatusOr<std::unique_ptr<JacobiWindow>> window =
      JacobiWindow::Create(options, window_context_);
  if (!window.ok()) {
    // The request builder checked W, N and G: a bug, not the client's.
    std::fprintf(stderr, "verifysvc: Jacobi window: %s\n",
                 window.status().ToString().c_str());
    window_failed_ = true;
    return false;
  }
  window_ = *std::move(window);
  window_context_ = {};
  return true;
}

DraftAsk SequenceDrafter::Ask(int budget, int cap, const TokenPrice& price) {
  // A sequence the budget gives drafts asks for a scored tree of
  // draft_ask_tokens, cut once its nodes' estimates are known; one it gives
  // none asks for none (no round trip), a probe for its probe, unless
  // asking is cheap next to the pass (a free ask, without the assistant).
  const double free_from = context_->options.free_ask_min_pass_seconds;
  const bool free_ask = budget == 0 && !pacer().probing() && free_from > 0 &&
                        context_->cost->Seconds(1) >= free_from;
  const int ask =
      (budget == 0 && !free_ask) || pacer().probing()
          ? budget
          : std::max(budget, std::min(cap, context_->options.draft_ask_tokens));
  DraftAsk a{handle_, ask, policy_.mode};
  const double plain = context_->cost->Seconds(1);
  a.token_seconds = std::min(plain, price.seconds_per_token);
  a.row_seconds = std::max(0.0, context_->cost->Seconds(2) - plain);
  if (!AssistantRuns(free_ask ? 0 : ask, cap, price)) {
    a.withheld = engine::SourceBit(engine::DraftSourceTag::kAssistant);
  }
  asked_ = ask;
  return a;
}

bool SequenceDrafter::AssistantRuns(int ask, int cap, const TokenPrice& price) {
  assistant_runs_ = false;
  if (!policy_.MayUse(engine::DraftSourceTag::kAssistant)) return false;
  // The verifier's own assistant gates itself (AssistantSource).
  if (context_->options.assistant_in_process) return true;
  // Its passes' cost as draftsvc measured them says an assistant runs.
  if (price.assistant_seconds_per_token > 0) assistant_seen_ = true;
  // A step that asks for no draft does not start it either: the first
  // Step entry it may draft for opens its draftsvc session, which prefills
  // the whole context in the background.
  if (ask == 0) {
    if (assistant_seen_) {
      context_->observer->OnCostGate(GatedMechanism::kAssistant, false);
    }
    return false;
  }
  // Only default sources, and no sign of an assistant yet: nothing to gate
  // (draftsvc may run none).
  if (!assistant_seen_) return assistant_runs_ = true;
  // Its cost is measured from what draftsvc reports, and is at least a
  // pass per token it drafts. draftsvc timed that pass at a short context,
  // as the scheduler timed its plain step at start; at the context of now
  // both grow alike. A drafted token accepted saves at most the plain step
  // that would make it otherwise, less the row it adds to the verify pass
  // (the cost curve's average over the sequence's cap; the throughput's
  // price of a token can be higher, after big trees that missed). An
  // assistant whose pass alone costs more than that (the target itself as
  // its own drafter on the verifier's cores) is never asked, so it never
  // prefills a context it cannot pay back.
  const StepCostModel& cost = *context_->cost;
  const double plain = cost.Seconds(1);
  const double startup = context_->startup_plain_seconds;
  const double pass = startup > 0
                          ? price.assistant_seconds_per_token * plain / startup
                          : price.assistant_seconds_per_token;
  const double row = cap > 0 ? (cost.Seconds(1 + cap) - plain) / cap : 0;
  const double worth =
      std::max(0.0, std::min(price.seconds_per_token, plain - row));
  assistant_runs_ = assistant_gate_.Decide(
      worth, /*known_cost=*/-1, cap,
      /*min_cost=*/cap * pass * context_->options.assistant_cost_share);
  context_->observer->OnCostGate(GatedMechanism::kAssistant, assistant_runs_);
  return assistant_runs_;
}

ScoredDraft SequenceDrafter::Scored(const engine::DraftTree& tree) const {
  ScoredDraft d;
  d.scores = tree.scores;
  // Half a token of prior on both sides: 1 until the sequence has shown
  // how its drafts fare against their estimates.
  d.scale =
      std::clamp((actual_hits_ + 0.5) / (predicted_hits_ + 0.5), 0.05, 2.0);
  d.floor = pacer().probing() ? 1 : 0;
  return d;
}

void SequenceDrafter::AppendScratchRows(engine::SequenceRows* rows) {
  if (!window_runs_) return;
  absl::Status appended = window_->AppendRows(rows);
  if (!appended.ok()) {
    // A bug, not the client's: this step runs without the window.
    std::fprintf(stderr, "verifysvc: Jacobi window: %s\n",
                 appended.ToString().c_str());
    window_runs_ = false;
  }
}

void SequenceDrafter::Verified(const engine::DraftTree& tree, int32_t root,
                               const torch::Tensor& logits,
                               absl::Span<const int32_t> path,
                               absl::Span<const int32_t> tokens,
                               double* prediction_seconds) {
  const int verified = tree.size();
  const int hits = static_cast<int>(tokens.size()) - 1;
  if (verified == 0 && asked_ > 0 && !tree.pending) {
    pacer().Missed();
  } else {
    pacer().Update(verified, hits);
  }
  if (verified > 0 && tree.scores.size() == tree.tokens.size()) {
    double predicted = 0;
    for (float p : tree.scores) predicted += std::clamp(p, 0.0f, 1.0f);
    constexpr double kWeight = 0.3;
    predicted_hits_ += kWeight * (predicted - predicted_hits_);
    actual_hits_ += kWeight * (hits - actual_hits_);
  }
  // The tree's rows; the scratch rows follow them.
  const torch::Tensor tree_logits = logits.narrow(0, 0, 1 + verified);
  // Before Emitted, whose Observe reports the step's tokens after the tree.
  RecyclePredictions(tree, tree_logits, prediction_seconds);
  AdvanceWindow(logits, root, tokens);
  RecordAssistant(tree, path, hits);
}

void SequenceDrafter::RecyclePredictions(const engine::DraftTree& tree,
                                         const torch::Tensor& tree_logits,
                                         double* prediction_seconds) {
  // Only where the budget still finds drafts worth asking for: a text the
  // sources cannot match does not pay a top-k per step either.
  const int k = context_->options.prediction_k;
  if (k == 0 || asked_ == 0 || !context_->fanout->WantsPredictions(handle_)) {
    return;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<VerifiedPredictions> predictions =
      TopPredictions(tree, tree_logits, k);
  *prediction_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  if (!predictions.ok()) {
    // A bug (the logits were accepted from), never the client's: no
    // predictions this step.
    std::fprintf(stderr, "verifysvc: recycling predictions: %s\n",
                 predictions.status().ToString().c_str());
    return;
  }
  context_->fanout->ObserveVerified(handle_, *predictions);
}

void SequenceDrafter::AdvanceWindow(const torch::Tensor& logits, int32_t root,
                                    absl::Span<const int32_t> emitted) {
  const bool ran = window_runs_;
  window_runs_ = false;
  if (ScratchRowsOf(policy_) > 0 && !emitted.empty()) {
    // Credited with the accepted tokens after `root` that its recent
    // n-grams foresaw.
    window_gate_.Record(
        ran,
        NgramCredit(window_ngrams_, root, emitted.first(emitted.size() - 1)),
        /*cost=*/0);  // charged by the cost curve in ScratchRows
  }
  if (window_ == nullptr) return;
  if (!ran) {
    absl::Status skipped = window_->Skip(emitted);
    if (!skipped.ok()) {
      std::fprintf(stderr, "verifysvc: Jacobi window: %s\n",
                   skipped.ToString().c_str());
    }
    return;
  }
  absl::StatusOr<std::vector<JacobiNgram>> ngrams =
      window_->Update(logits, sampling_, emitted);
  if (!ngrams.ok()) {
    std::fprintf(stderr, "verifysvc: Jacobi window: %s\n",
                 ngrams.status().ToString().c_str());
    return;
  }
  if (ngrams->empty()) return;
  context_->fanout->ObserveNgrams(handle_, *ngrams);
  // The credit looks back over about the pool's reach of recent n-grams.
  constexpr size_t kCreditNgrams = 64;
  window_ngrams_.insert(window_ngrams_.end(), ngrams->begin(), ngrams->end());
  if (window_ngrams_.size() > kCreditNgrams) {
    window_ngrams_.erase(
        window_ngrams_.begin(),
        window_ngrams_.end() - static_cast<ptrdiff_t>(kCreditNgrams));
  }
}

void SequenceDrafter::RecordAssistant(const engine::DraftTree& tree,
                                      absl::Span<const int32_t> path,
                                      int hits) {
  if (!policy_.MayUse(engine::DraftSourceTag::kAssistant) ||
      context_->options.assistant_in_process) {
    return;
  }
  const engine::DraftSourceSet alone =
      engine::SourceBit(engine::DraftSourceTag::kAssistant);
  if (!assistant_seen_) {
    bool proposed = tree.source_seconds > 0;
    for (int j = 0; j < tree.size() && !proposed; ++j) {
      proposed = (tree.SourcesOf(j) & alone) != 0;
    }
    if (!proposed) return;
    assistant_seen_ = true;  // its gate decides from the next step on
  }
  // Credit: accepted tokens no other source proposed.
  int credit = 0;
  for (int m = 1; m <= hits && m < static_cast<int>(path.size()); ++m) {
    if (tree.SourcesOf(path[m] - 1) == alone) ++credit;
  }
  assistant_gate_.Record(
      assistant_runs_, credit,
      tree.source_seconds * context_->options.assistant_cost_share);
  assistant_runs_ = false;
}

void SequenceDrafter::Emitted(absl::Span<const int32_t> tokens,
                              absl::Span<const int32_t> output, int hits,
                              const engine::DraftTree* tree,
                              absl::Span<const int32_t> path) {
  ++steps_;
  if (context_->options.pace_repeats) repeats_.Append(tokens);
  if (window_ == nullptr && !window_failed_ && ScratchRowsOf(policy_) > 0) {
    window_context_.insert(window_context_.end(), output.begin(), output.end());
  }
  // Draft tokens count as accepted only if they reached the output.
  const int kept_hits = std::min(hits, static_cast<int>(output.size()));
  if (tree != nullptr) CountVerified(*tree, kept_hits, path);
  if (handle_ != 0) context_->fanout->Observe(handle_, output);
}

void SequenceDrafter::CountVerified(const engine::DraftTree& tree,
                                    int kept_hits,
                                    absl::Span<const int32_t> path) {
  const int verified = tree.size();
  SourceCounts source_verified{};
  for (int j = 0; j < verified; ++j) CountSources(tree, j, &source_verified);
  // path[m] is verify row m: draft node path[m] - 1.
  SourceCounts source_accepted{};
  for (int m = 1; m <= kept_hits && m < static_cast<int>(path.size()); ++m) {
    CountSources(tree, path[m] - 1, &source_accepted);
  }
  draft_tokens_ += verified;
  accepted_draft_tokens_ += kept_hits;
  for (int t = 0; t < engine::kNumDraftSourceTags; ++t) {
    source_drafts_[t] += source_verified[t];
    source_accepted_[t] += source_accepted[t];
  }
  if (verified == 0) return;
  DraftObserver* observer = context_->observer;
  observer->OnDraftVerified(verified, kept_hits);
  for (int t = 0; t < engine::kNumDraftSourceTags; ++t) {
    if (source_verified[t] == 0) continue;
    observer->OnDraftSourceVerified(static_cast<engine::DraftSourceTag>(t),
                                    source_verified[t], source_accepted[t]);
  }
}

}  // namespace lookahead::verifysvc
