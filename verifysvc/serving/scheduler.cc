#include "verifysvc/serving/scheduler.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/model/acceptance.h"
#include "engine/model/batch.h"
#include "engine/model/kv_cache.h"
#include "engine/model/token_logprobs.h"
#include "verifysvc/drafts/draft_trim.h"
#include "verifysvc/drafts/jacobi_window.h"
#include "verifysvc/serving/output_processor.h"
#include "verifysvc/serving/verify_predictions.h"

namespace lookahead::verifysvc {
namespace {

// A moving average that takes 10% of each new sample; 0 means no sample yet.
double MovingAverage(double average, double sample) {
  return average == 0 ? sample : 0.9 * average + 0.1 * sample;
}

int32_t SelectToken(const torch::Tensor& logits_row,
                    const engine::SamplingParams& params, int64_t position) {
  torch::Tensor row = logits_row.to(torch::kCPU).contiguous();
  absl::Span<const float> values(row.data_ptr<float>(),
                                 static_cast<size_t>(row.numel()));
  return params.greedy() ? engine::ArgMax(values)
                         : engine::SampleToken(values, params, position);
}

// The logprobs of `tokens` when `request` asks for them (else none): token
// j was chosen from row rows[j] of `logits` (n, vocab), any float dtype and
// device. The rows are read as acceptance reads them (float32 on the host),
// so a token's logprobs are the same whichever step and tree verified it.
std::vector<engine::ChoiceLogprobs> LogprobsOf(
    const GenerationRequest& request, const torch::Tensor& logits,
    absl::Span<const int32_t> rows, absl::Span<const int32_t> tokens) {
  std::vector<engine::ChoiceLogprobs> logprobs;
  if (!request.logprobs.has_value()) return logprobs;
  const torch::Tensor index =
      torch::tensor(std::vector<int64_t>(rows.begin(), rows.end()),
                    torch::kLong)
          .to(logits.device());
  const torch::Tensor host =
      logits.index_select(0, index).to(torch::kCPU, torch::kFloat).contiguous();
  const int64_t vocab = host.size(1);
  const float* data = host.data_ptr<float>();
  logprobs.reserve(tokens.size());
  for (size_t j = 0; j < tokens.size(); ++j) {
    logprobs.push_back(engine::LogprobsOfChoice(
        absl::MakeConstSpan(data + j * vocab, vocab), request.sampling,
        tokens[j], *request.logprobs));
  }
  return logprobs;
}

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

struct Scheduler::Sequence {
  Sequence(GenerationRequest r, GenerationSink* k,
           const engine::Tokenizer* tokenizer, const DraftPacerOptions& pacing,
           const CostGateOptions& gate)
      : request(std::move(r)),
        sink(k),
        output(tokenizer, request.stop, request.max_new_tokens),
        pacers{DraftPacer(pacing), DraftPacer(pacing)},
        window_gate(gate),
        assistant_gate(gate) {}

  GenerationRequest request;
  GenerationSink* sink;
  std::unique_ptr<engine::KvCache> cache;
  int prefilled = 0;             // Prompt tokens in the cache.
  int cached_prompt_tokens = 0;  // Of them, restored from the prefix cache.
  OutputProcessor output;
  int64_t draft_handle = 0;  // 0: not drafted.
  // Draft pacing: pacers[1] for steps whose context's last tokens repeat
  // (SuffixRepeat, fed the prompt and every accepted token), pacers[0] for
  // the rest; `pace` picks this step's.
  DraftPacer pacers[2];
  SuffixRepeat repeats;
  int pace = 0;
  DraftPacer& pacer() { return pacers[pace]; }
  const DraftPacer& pacer() const { return pacers[pace]; }
  bool done = false;
  // The request's Jacobi lookahead window, made at its first decoding step
  // (WindowRows); null while none runs. window_runs: its rows are in this
  // step's pass.
  std::unique_ptr<JacobiWindow> jacobi;
  bool window_failed = false;
  bool window_runs = false;
  // Whether the window and the assistant run this step (CostGate), and the
  // window's recent n-grams, for its credit.
  CostGate window_gate;
  CostGate assistant_gate;
  bool assistant_runs = false;
  // The request names the assistant, or its drafts or costs have shown up
  // (a request on default sources may or may not have one).
  bool assistant_seen = false;
  std::vector<JacobiNgram> window_ngrams;
  // Recent accepted draft tokens and what the trees' scores predicted for
  // them (moving averages over drafted steps): the sequence's correction
  // of its namespace-wide calibration, for TrimByScore.
  double predicted_hits = 0;
  double actual_hits = 0;

  // Usage.
  int steps = 0;
  int64_t draft_tokens = 0;
  int64_t accepted_draft_tokens = 0;
  // Per engine::DraftSourceTag: draft tokens verified and accepted.
  std::array<int64_t, engine::kNumDraftSourceTags> source_drafts{};
  std::array<int64_t, engine::kNumDraftSourceTags> source_accepted{};
  absl::Time admitted;
  absl::Time first_token;

  bool decoding() const { return !output.tokens().empty(); }
  int32_t last_token() const { return output.tokens().back(); }
};

// One step's work, planned before the forward pass.
struct Scheduler::StepPlan {
  absl::Time start;
  std::vector<Sequence*> decoding, prefilling;
  std::vector<int> chunk;  // per prefilling sequence: tokens this step
  int prefill_tokens = 0;
  std::vector<engine::DraftTree> trees;  // per decoding sequence
  std::vector<int> asked;                // per decoding sequence: its ask
  int requested_drafts = 0;
  std::vector<engine::TreeInput> batch;  // decoding first, then chunks
  std::vector<int64_t> root_position;    // per decoding sequence
  int64_t batch_tokens = 0;
  int64_t draft_total = 0;
  double forward_seconds = 0;
  double plain_step_seconds = 0;  // plain decoding's estimate of this step
  double prediction_seconds = 0;  // top-k of the verify logits, all rows
};

// What one step emitted.
struct Scheduler::StepTally {
  int64_t emitted = 0, accepted = 0, steps = 0;
  int64_t decode_emitted = 0;  // By decoding sequences (not first tokens).
};

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const engine::LlamaModel* model, const engine::Tokenizer* tokenizer,
    DraftMixer* drafts, StepCostModel cost, SchedulerOptions options) {
  const DraftPacerOptions& p = options.pacing;
  if (options.max_running < 1 || options.max_queued < 0 ||
      options.max_step_tokens < 1 || options.prefill_chunk_tokens < 1 ||
      p.probe_interval < 1 || p.max_probe_interval < p.probe_interval ||
      p.probe_tokens < 0 || options.prediction_k < 0) {
    return absl::InvalidArgumentError(
        "scheduler options: max_running, max_step_tokens, "
        "prefill_chunk_tokens and probe_interval must be >= 1, max_queued, "
        "probe_tokens and prediction_k >= 0, max_probe_interval >= "
        "probe_interval");
  }
  return std::unique_ptr<Scheduler>(
      new Scheduler(model, tokenizer, drafts, std::move(cost), options));
}

Scheduler::Scheduler(const engine::LlamaModel* model,
                     const engine::Tokenizer* tokenizer, DraftMixer* drafts,
                     StepCostModel cost, SchedulerOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      drafts_(drafts != nullptr && !drafts->empty() ? drafts : nullptr),
      options_(options),
      observer_(options.observer != nullptr ? options.observer
                                            : new SchedulerObserver()),
      own_observer_(options.observer != nullptr ? nullptr : observer_),
      cost_(std::move(cost)),
      startup_plain_seconds_(cost_.Seconds(1)),
      thread_([this] { Loop(); }) {}

Scheduler::~Scheduler() { Shutdown(absl::ZeroDuration()); }

absl::Status Scheduler::Submit(GenerationRequest request,
                               GenerationSink* sink) {
  absl::MutexLock lock(&mu_);
  if (!accepting_) {
    CountOutcome(RequestOutcome::kRejected);
    return absl::UnavailableError(
        "verifysvc is shutting down; retry on another replica");
  }
  if (admitted_ >= options_.max_running + options_.max_queued) {
    CountOutcome(RequestOutcome::kRejected);
    return absl::ResourceExhaustedError(absl::StrCat(
        "server full: ", options_.max_running, " sequences running and ",
        options_.max_queued, " queued (--max_running=", options_.max_running,
        ", --max_queued=", options_.max_queued, "); retry later"));
  }
  ++admitted_;
  ++stats_.requests_admitted;
  queue_.push_back({std::move(request), sink});
  return absl::OkStatus();
}

void Scheduler::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return admitted_ == 0;
    };
    mu_.AwaitWithTimeout(absl::Condition(&idle), grace);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Scheduler::CountRejected() {
  absl::MutexLock lock(&mu_);
  CountOutcome(RequestOutcome::kRejected);
}

void Scheduler::CountOutcome(RequestOutcome outcome) {
  switch (outcome) {
    case RequestOutcome::kFinished:
      ++stats_.requests_finished;
      break;
    case RequestOutcome::kCancelled:
      ++stats_.requests_cancelled;
      break;
    case RequestOutcome::kRejected:
      ++stats_.requests_rejected;
      break;
    case RequestOutcome::kFailed:
      ++stats_.requests_failed;
      break;
  }
  observer_->OnRequestEnded(outcome);
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
    stats.queued_sequences = static_cast<int>(queue_.size());
  }
  if (drafts_ != nullptr) {
    const DraftSourceStats d = drafts_->Stats();
    stats.drafts_available = d.available;
    stats.draft_failures = d.failures;
    stats.draft_sessions_reopened = d.reopened;
  }
  return stats;
}

std::string Scheduler::Describe(const SchedulerStats& stats) {
  return absl::StrCat(
      stats.requests_admitted, " requests (", stats.requests_finished,
      " finished, ", stats.requests_cancelled, " cancelled), ",
      stats.forward_passes, " forward passes, ", stats.output_tokens,
      " output tokens in ", stats.decoding_steps, " steps");
}

void Scheduler::Loop() {
  if (options_.prefix_cache != nullptr) {
    const engine::PrefixCacheStats stats = options_.prefix_cache->Stats();
    observer_->OnPrefixCacheState(stats.bytes, stats.capacity_bytes, 0);
    prefix_evictions_seen_ = stats.evicted_blocks;
  }
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty() || !running_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) break;
    }
    Admit();
    if (!running_.empty()) Step();
  }
  // Shutdown's grace ran out: end everything still here.
  for (auto& seq : running_) {
    End(seq.get(), absl::UnavailableError("verifysvc shut down"));
  }
  running_.clear();
  std::deque<Pending> queued;
  {
    absl::MutexLock lock(&mu_);
    queued.swap(queue_);
  }
  for (Pending& p : queued) {
    p.sink->Finish(absl::UnavailableError("verifysvc shut down"));
    absl::MutexLock lock(&mu_);
    --admitted_;
  }
}

void Scheduler::Admit() {
  // Cancelled sequences leave first, freeing their slots.
  for (auto& seq : running_) {
    // A sequence that ended last step has finished its sink, which may be
    // gone already (a gRPC reactor deletes itself): never touch it again.
    if (!seq->done && seq->sink->Cancelled()) {
      End(seq.get(), absl::CancelledError("cancelled by the client"));
    }
  }
  std::vector<Pending> admitted, gone;
  {
    absl::MutexLock lock(&mu_);
    // Queued requests whose client left free their queue places too.
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (!it->sink->Cancelled()) {
        ++it;
        continue;
      }
      gone.push_back(std::move(*it));
      it = queue_.erase(it);
      --admitted_;
      CountOutcome(RequestOutcome::kCancelled);
    }
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [](const auto& s) { return s->done; }),
                   running_.end());
    while (!queue_.empty() &&
           static_cast<int>(running_.size() + admitted.size()) <
               options_.max_running) {
      admitted.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  for (Pending& p : gone) {
    p.sink->Finish(absl::CancelledError("cancelled by the client"));
  }
  for (Pending& p : admitted) {
    std::unique_ptr<Sequence> seq = Start(std::move(p));
    if (seq != nullptr) running_.push_back(std::move(seq));
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const auto& s) { return s->done; }),
                 running_.end());
  int64_t kv = 0;
  for (const auto& seq : running_) kv += seq->cache->Capacity();
  absl::MutexLock lock(&mu_);
  observer_->OnOccupancy(static_cast<int>(running_.size()),
                         static_cast<int>(queue_.size()), kv);
  stats_.running_sequences = static_cast<int>(running_.size());
  stats_.kv_cache_tokens = kv;
}

std::unique_ptr<Scheduler::Sequence> Scheduler::Start(Pending pending) {
  auto seq =
      std::make_unique<Sequence>(std::move(pending.request), pending.sink,
                                 tokenizer_, options_.pacing, options_.gate);
  seq->admitted = absl::Now();
  if (seq->sink->Cancelled()) {
    End(seq.get(), absl::CancelledError("cancelled by the client"));
    return nullptr;
  }
  const GenerationRequest& request = seq->request;
  // Room for the prompt, the output and one step's tree.
  const int capacity = static_cast<int>(request.prompt.size()) +
                       request.max_new_tokens + request.draft.decoding_length +
                       1 + WindowRowsOf(request.draft);
  absl::StatusOr<std::unique_ptr<engine::KvCache>> cache =
      model_->NewCache(capacity);
  if (!cache.ok()) {
    End(seq.get(), cache.status());
    return nullptr;
  }
  seq->cache = *std::move(cache);
  if (options_.prefix_cache != nullptr) RestorePrefix(seq.get());
  if (drafts_ != nullptr && request.draft.enabled()) {
    seq->draft_handle = drafts_->Open(request.draft, request.prompt);
    if (options_.pace_repeats) seq->repeats.Append(request.prompt);
    seq->assistant_seen =
        (request.draft.sources &
         engine::SourceBit(engine::DraftSourceTag::kAssistant)) != 0;
    auto verdict = gate_verdicts_.find(request.draft.name_space);
    if (verdict != gate_verdicts_.end()) {
      seq->window_gate.Inherit(verdict->second.window);
      seq->assistant_gate.Inherit(verdict->second.assistant);
      for (int k = 0; k < 2; ++k) {
        if (verdict->second.pacers[k].has_value()) {
          seq->pacers[k].Inherit(*verdict->second.pacers[k]);
        }
      }
    }
  }
  return seq;
}

void Scheduler::RestorePrefix(Sequence* seq) {
  const std::vector<int32_t>& prompt = seq->request.prompt;
  engine::PrefixHit hit = options_.prefix_cache->Lookup(prompt);
  absl::Status restored = options_.prefix_cache->Restore(hit, seq->cache.get());
  if (!restored.ok()) {
    // A bug, not bad input; the cache is left empty: prefill it all.
    std::fprintf(stderr, "verifysvc: prefix cache restore failed: %s\n",
                 restored.ToString().c_str());
    hit = engine::PrefixHit();
  }
  seq->prefilled = seq->cached_prompt_tokens = hit.tokens();
  observer_->OnPrefixLookup(static_cast<int>(prompt.size()), hit.tokens());
}

void Scheduler::CachePrompt(const Sequence& seq) {
  absl::Status inserted =
      options_.prefix_cache->Insert(seq.request.prompt, *seq.cache);
  if (!inserted.ok()) {
    std::fprintf(stderr, "verifysvc: prefix cache insert failed: %s\n",
                 inserted.ToString().c_str());
  }
  const engine::PrefixCacheStats stats = options_.prefix_cache->Stats();
  observer_->OnPrefixCacheState(stats.bytes, stats.capacity_bytes,
                                stats.evicted_blocks - prefix_evictions_seen_);
  prefix_evictions_seen_ = stats.evicted_blocks;
}

void Scheduler::Step() {
  StepPlan plan = Plan();
  Draft(&plan);
  // Draft may have ended every sequence (a source failure): nothing to run.
  if (plan.decoding.empty() && plan.prefill_tokens == 0) return;
  absl::StatusOr<std::vector<torch::Tensor>> logits = RunForward(&plan);
  if (!logits.ok()) {
    // A bug, not bad input (requests are validated): fail this batch only.
    std::fprintf(stderr, "verifysvc: forward failed: %s\n",
                 logits.status().ToString().c_str());
    for (auto& seq : running_) {
      End(seq.get(), absl::InternalError(absl::StrCat(
                         "forward pass failed: ", logits.status().message())));
    }
    return;
  }
  StepTally tally;
  AcceptDrafts(&plan, *logits, &tally);
  CommitPrefill(plan, *logits, &tally);
  Record(plan, tally);
}

Scheduler::StepPlan Scheduler::Plan() {
  StepPlan plan;
  plan.start = absl::Now();
  for (auto& seq : running_) {
    (seq->decoding() ? plan.decoding : plan.prefilling).push_back(seq.get());
  }
  // Prefill chunks: small while others decode, large when alone.
  plan.chunk.assign(plan.prefilling.size(), 0);
  int budget = plan.decoding.empty() ? model_->options().prefill_chunk_tokens
                                     : options_.prefill_chunk_tokens;
  for (size_t i = 0; i < plan.prefilling.size() && budget > 0; ++i) {
    const Sequence* seq = plan.prefilling[i];
    plan.chunk[i] = std::min<int>(
        budget, static_cast<int>(seq->request.prompt.size()) - seq->prefilled);
    budget -= plan.chunk[i];
    plan.prefill_tokens += plan.chunk[i];
  }
  plan.trees.resize(plan.decoding.size());
  plan.asked.assign(plan.decoding.size(), 0);
  return plan;
}

void Scheduler::Draft(StepPlan* plan) {
  if (drafts_ == nullptr) return;
  // Draft budgets: what pays for itself in this pass.
  std::vector<DraftCandidate> candidates(plan->decoding.size());
  for (size_t i = 0; i < plan->decoding.size(); ++i) {
    Sequence* seq = plan->decoding[i];
    if (seq->draft_handle == 0) continue;
    const int room = seq->cache->Capacity() - seq->cache->Length() - 1;
    seq->pace = seq->repeats.repeats() ? 1 : 0;
    candidates[i] = seq->pacer().Candidate(
        std::clamp(seq->request.draft.decoding_length, 0, room),
        seq->request.draft.branch_length);
  }
  // Jacobi windows ride in the same pass: their rows are charged to the
  // step before the drafts are sized.
  const int roots =
      static_cast<int>(plan->decoding.size()) + plan->prefill_tokens;
  int window_rows = 0;
  for (Sequence* seq : plan->decoding) {
    window_rows += WindowRows(seq, roots + window_rows);
  }
  const int base = roots + window_rows;
  DraftCost draft_cost = drafts_->cost();
  if (options_.charge_draft_calls) {
    draft_cost.seconds_per_call += draft_call_seconds_;
  }
  const std::vector<int> budget = AllocateDraftTokens(
      cost_, base, candidates, std::max(0, options_.max_step_tokens - base),
      draft_cost);
  // ONE call to the draft sources for every drafted sequence.
  std::vector<DraftAsk> asks;
  std::vector<size_t> which;
  for (size_t i = 0; i < plan->decoding.size(); ++i) {
    const Sequence* seq = plan->decoding[i];
    if (seq->draft_handle == 0) continue;
    // A sequence the budget gives drafts asks for a scored tree of
    // draft_ask_tokens, cut below once its nodes' estimates are known; one
    // it gives none asks for none (no round trip), a probe for its probe.
    const int ask =
        budget[i] == 0 || seq->pacer().probing()
            ? budget[i]
            : std::max(budget[i],
                       std::min(candidates[i].cap, options_.draft_ask_tokens));
    DraftAsk a{seq->draft_handle, ask, seq->request.draft.mode};
    if (!AssistantRuns(plan->decoding[i], ask, candidates[i].cap,
                       draft_cost.assistant_seconds_per_token)) {
      a.withheld = engine::SourceBit(engine::DraftSourceTag::kAssistant);
    }
    asks.push_back(a);
    which.push_back(i);
  }
  if (asks.empty()) return;
  const int64_t failures = drafts_->Stats().failures;
  const absl::Time start = absl::Now();
  bool called = false;
  std::vector<engine::DraftTree> got = drafts_->Propose(asks, &called);
  if (called) {
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    // One slow call (a deadline, a busy host) moves the average by at most
    // 10% of itself, so it cannot switch drafts off on its own.
    const double cap =
        draft_call_seconds_ == 0 ? seconds : 2 * draft_call_seconds_;
    draft_call_seconds_ =
        MovingAverage(draft_call_seconds_, std::min(seconds, cap));
    const DraftSourceStats after = drafts_->Stats();
    observer_->OnDraftCall(seconds, after.failures - failures, after.available);
    for (const DraftAsk& ask : asks) plan->requested_drafts += ask.budget;
  }
  got.resize(asks.size());
  for (size_t k = 0; k < which.size(); ++k) {
    plan->trees[which[k]] = std::move(got[k]);
    plan->asked[which[k]] = asks[k].budget;
  }
  EndUnservable(plan);
  TrimDrafts(plan, window_rows);
}

void Scheduler::EndUnservable(StepPlan* plan) {
  size_t kept = 0;
  for (size_t i = 0; i < plan->decoding.size(); ++i) {
    Sequence* seq = plan->decoding[i];
    if (seq->draft_handle != 0) {
      absl::Status failure = drafts_->Failure(seq->draft_handle);
      if (!failure.ok()) {
        End(seq, std::move(failure));
        continue;
      }
    }
    if (kept != i) {  // never self-move: it may empty the tree
      plan->decoding[kept] = seq;
      plan->trees[kept] = std::move(plan->trees[i]);
      plan->asked[kept] = plan->asked[i];
    }
    ++kept;
  }
  plan->decoding.resize(kept);
  plan->trees.resize(kept);
  plan->asked.resize(kept);
}

void Scheduler::TrimDrafts(StepPlan* plan, int window_rows) {
  if (options_.draft_ask_tokens == 0) return;
  std::vector<ScoredDraft> scored;
  std::vector<size_t> which;
  // Trees without scores keep their size and are charged as rows too.
  int unscored = 0;
  for (size_t i = 0; i < plan->decoding.size(); ++i) {
    const engine::DraftTree& tree = plan->trees[i];
    if (tree.scores.size() != tree.tokens.size()) {
      unscored += tree.size();
      continue;
    }
    if (tree.empty()) continue;
    const Sequence* seq = plan->decoding[i];
    ScoredDraft d;
    d.scores = tree.scores;
    // Half a token of prior on both sides: 1 until the sequence has shown
    // how its drafts fare against their estimates.
    d.scale = std::clamp((seq->actual_hits + 0.5) / (seq->predicted_hits + 0.5),
                         0.05, 2.0);
    d.floor = seq->pacer().probing() ? 1 : 0;
    scored.push_back(d);
    which.push_back(i);
  }
  if (scored.empty()) return;
  const int base = static_cast<int>(plan->decoding.size()) +
                   plan->prefill_tokens + window_rows;
  const std::vector<int> keep =
      TrimByScore(cost_, base + unscored, scored,
                  std::max(0, options_.max_step_tokens - base - unscored));
  for (size_t k = 0; k < which.size(); ++k) {
    engine::TrimDraft(&plan->trees[which[k]], keep[k]);
  }
}

absl::StatusOr<std::vector<torch::Tensor>> Scheduler::RunForward(
    StepPlan* plan) {
  // ONE forward pass: every decoding sequence's [root, tree], then chunks.
  for (size_t i = 0; i < plan->decoding.size(); ++i) {
    Sequence* seq = plan->decoding[i];
    plan->root_position.push_back(seq->cache->Length());
    plan->batch.push_back(engine::MakeVerifyInput(
        seq->cache.get(), seq->last_token(), plan->trees[i]));
    plan->draft_total += plan->trees[i].size();
  }
  for (size_t i = 0; i < plan->prefilling.size(); ++i) {
    if (plan->chunk[i] == 0) continue;
    const Sequence* seq = plan->prefilling[i];
    plan->batch.push_back(engine::ChainInput(
        seq->cache.get(), absl::MakeConstSpan(seq->request.prompt)
                              .subspan(seq->prefilled, plan->chunk[i])));
  }
  std::vector<engine::SequenceRows> rows;
  rows.reserve(plan->batch.size());
  for (size_t k = 0; k < plan->batch.size(); ++k) {
    absl::StatusOr<engine::SequenceRows> r =
        engine::RowsFromTree(plan->batch[k]);
    if (!r.ok()) return r.status();
    if (k < plan->decoding.size() && plan->decoding[k]->window_runs) {
      Sequence* seq = plan->decoding[k];
      absl::Status appended = seq->jacobi->AppendRows(&*r);
      if (!appended.ok()) {
        // A bug, not the client's: this step runs without the window.
        std::fprintf(stderr, "verifysvc: Jacobi window: %s\n",
                     appended.ToString().c_str());
        seq->window_runs = false;
      }
    }
    plan->batch_tokens += r->size();
    rows.push_back(*std::move(r));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<torch::Tensor>> logits = model_->ForwardRows(rows);
  plan->forward_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // Plain decoding's estimated time for this step (one token per decoding
  // sequence, same prefill), before the model learns from this pass.
  plan->plain_step_seconds = cost_.Seconds(
      static_cast<int>(plan->decoding.size()) + plan->prefill_tokens);
  if (options_.follow_step_costs) {
    cost_.Observe(static_cast<int>(plan->batch_tokens), plan->forward_seconds);
  }
  return logits;
}

int Scheduler::WindowRowsOf(const DraftPolicy& policy) {
  if (!policy.enabled() || policy.lookahead_window <= 0 ||
      policy.lookahead_ngram < 2 ||
      !policy.MayUse(engine::DraftSourceTag::kNgram)) {
    return 0;
  }
  return policy.lookahead_window * (policy.lookahead_ngram - 1);
}

double Scheduler::SecondsPerToken() const {
  return seconds_per_token_ > 0 ? seconds_per_token_ : cost_.Seconds(1);
}

int Scheduler::WindowRows(Sequence* seq, int base) {
  seq->window_runs = false;
  const DraftPolicy& policy = seq->request.draft;
  const int rows = WindowRowsOf(policy);
  if (rows == 0 || seq->draft_handle == 0 || seq->window_failed) return 0;
  // Its rows' cost on the cost curve, against the most its n-grams can add
  // (N - 1 tokens a step) and then what they were measured to add.
  const bool runs = seq->window_gate.Decide(
      SecondsPerToken(), cost_.Seconds(base + rows) - cost_.Seconds(base),
      policy.lookahead_ngram - 1);
  observer_->OnCostGate(GatedMechanism::kJacobiWindow, runs);
  if (!runs) return 0;
  if (seq->jacobi == nullptr) {
    std::vector<int32_t> context = seq->request.prompt;
    const std::vector<int32_t>& out = seq->output.tokens();
    context.insert(context.end(), out.begin(), out.end());
    JacobiOptions options;
    options.window = policy.lookahead_window;
    options.ngram = policy.lookahead_ngram;
    options.max_ngrams = policy.lookahead_guess;
    options.vocab_size = model_->config().vocab_size;
    options.seed = seq->request.sampling.seed;
    absl::StatusOr<std::unique_ptr<JacobiWindow>> window =
        JacobiWindow::Create(options, context);
    if (!window.ok()) {
      // The request builder checked W, N and G: a bug, not the client's.
      std::fprintf(stderr, "verifysvc: Jacobi window: %s\n",
                   window.status().ToString().c_str());
      seq->window_failed = true;
      return 0;
    }
    seq->jacobi = *std::move(window);
  }
  // Admit sized the cache for the prompt, the output, a full tree and the
  // window, so the rows always fit.
  seq->window_runs = true;
  return rows;
}

void Scheduler::AdvanceWindow(Sequence* seq, const torch::Tensor& logits,
                              int32_t root, absl::Span<const int32_t> emitted) {
  const bool ran = seq->window_runs;
  seq->window_runs = false;
  if (WindowRowsOf(seq->request.draft) > 0 && !emitted.empty()) {
    seq->window_gate.Record(
        ran,
        NgramCredit(seq->window_ngrams, root,
                    emitted.first(emitted.size() - 1)),
        /*cost=*/0);  // charged by the cost curve in WindowRows
  }
  if (seq->jacobi == nullptr) return;
  if (!ran) {
    absl::Status skipped = seq->jacobi->Skip(emitted);
    if (!skipped.ok()) {
      std::fprintf(stderr, "verifysvc: Jacobi window: %s\n",
                   skipped.ToString().c_str());
    }
    return;
  }
  absl::StatusOr<std::vector<JacobiNgram>> ngrams =
      seq->jacobi->Update(logits, seq->request.sampling, emitted);
  if (!ngrams.ok()) {
    std::fprintf(stderr, "verifysvc: Jacobi window: %s\n",
                 ngrams.status().ToString().c_str());
    return;
  }
  if (ngrams->empty()) return;
  drafts_->ObserveNgrams(seq->draft_handle, *ngrams);
  // The credit looks back over about the pool's reach of recent n-grams.
  constexpr size_t kCreditNgrams = 64;
  seq->window_ngrams.insert(seq->window_ngrams.end(), ngrams->begin(),
                            ngrams->end());
  if (seq->window_ngrams.size() > kCreditNgrams) {
    seq->window_ngrams.erase(
        seq->window_ngrams.begin(),
        seq->window_ngrams.end() - static_cast<ptrdiff_t>(kCreditNgrams));
  }
}

bool Scheduler::AssistantRuns(Sequence* seq, int ask, int cap,
                              double pass_seconds) {
  seq->assistant_runs = false;
  if (!seq->request.draft.MayUse(engine::DraftSourceTag::kAssistant)) {
    return false;
  }
  // Its passes' cost as draftsvc measured them says an assistant runs.
  if (pass_seconds > 0) seq->assistant_seen = true;
  // A step that asks for no draft does not start it either: the first
  // Step entry it may draft for opens its draftsvc session, which prefills
  // the whole context in the background.
  if (ask == 0) {
    if (seq->assistant_seen) {
      observer_->OnCostGate(GatedMechanism::kAssistant, false);
    }
    return false;
  }
  // Only default sources, and no sign of an assistant yet: nothing to gate
  // (draftsvc may run none).
  if (!seq->assistant_seen) return seq->assistant_runs = true;
  // Its cost is measured from what draftsvc reports, and is at least a
  // pass per token it drafts. draftsvc timed that pass at a short context,
  // as this scheduler timed its plain step at start; at the context of now
  // both grow alike. A drafted token accepted saves at most the plain step
  // that would make it otherwise, less the row it adds to the verify pass
  // (the cost curve's average over the sequence's cap; the throughput's
  // price of a token can be higher, after big trees that missed). An
  // assistant whose pass alone costs more than that (the target itself as
  // its own drafter on the verifier's cores) is never asked, so it never
  // prefills a context it cannot pay back.
  const double plain = cost_.Seconds(1);
  const double pass = startup_plain_seconds_ > 0
                          ? pass_seconds * plain / startup_plain_seconds_
                          : pass_seconds;
  const double row = cap > 0 ? (cost_.Seconds(1 + cap) - plain) / cap : 0;
  const double worth = std::max(0.0, std::min(SecondsPerToken(), plain - row));
  seq->assistant_runs = seq->assistant_gate.Decide(
      worth, /*known_cost=*/-1, cap,
      /*min_cost=*/cap * pass * options_.assistant_cost_share);
  observer_->OnCostGate(GatedMechanism::kAssistant, seq->assistant_runs);
  return seq->assistant_runs;
}

void Scheduler::RecordAssistant(Sequence* seq, const engine::DraftTree& tree,
                                absl::Span<const int32_t> path, int hits) {
  if (!seq->request.draft.MayUse(engine::DraftSourceTag::kAssistant)) return;
  const engine::DraftSourceSet alone =
      engine::SourceBit(engine::DraftSourceTag::kAssistant);
  if (!seq->assistant_seen) {
    bool proposed = tree.source_seconds > 0;
    for (int j = 0; j < tree.size() && !proposed; ++j) {
      proposed = (tree.SourcesOf(j) & alone) != 0;
    }
    if (!proposed) return;
    seq->assistant_seen = true;  // its gate decides from the next step on
  }
  // Credit: accepted tokens no other source proposed.
  int credit = 0;
  for (int m = 1; m <= hits && m < static_cast<int>(path.size()); ++m) {
    if (tree.SourcesOf(path[m] - 1) == alone) ++credit;
  }
  seq->assistant_gate.Record(
      seq->assistant_runs, credit,
      tree.source_seconds * options_.assistant_cost_share);
  seq->assistant_runs = false;
}

void Scheduler::RecyclePredictions(Sequence* seq, int asked,
                                   const engine::DraftTree& tree,
                                   const torch::Tensor& logits,
                                   StepPlan* plan) {
  // Only where the budget still finds drafts worth asking for: a text the
  // sources cannot match does not pay a top-k per step either.
  if (options_.prediction_k == 0 || asked == 0 || seq->draft_handle == 0 ||
      !drafts_->WantsPredictions(seq->draft_handle)) {
    return;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<VerifiedPredictions> predictions =
      TopPredictions(tree, logits, options_.prediction_k);
  plan->prediction_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  if (!predictions.ok()) {
    // A bug (the logits were accepted from), never the client's: no
    // predictions this step.
    std::fprintf(stderr, "verifysvc: recycling predictions: %s\n",
                 predictions.status().ToString().c_str());
    return;
  }
  drafts_->ObserveVerified(seq->draft_handle, *predictions);
}

void Scheduler::AcceptDrafts(StepPlan* plan_ptr,
                             const std::vector<torch::Tensor>& logits,
                             StepTally* tally) {
  const StepPlan& plan = *plan_ptr;
  for (size_t i = 0; i < plan.decoding.size(); ++i) {
    Sequence* seq = plan.decoding[i];
    const engine::TreeInput& in = plan.batch[i];
    // The tree's rows; a Jacobi window's rows follow them.
    const torch::Tensor tree_logits =
        logits[i].narrow(0, 0, static_cast<int64_t>(in.tokens.size()));
    absl::StatusOr<engine::AcceptResult> accepted =
        engine::AcceptLongestPath(in.tokens, in.parents, tree_logits,
                                  seq->request.sampling, plan.root_position[i]);
    absl::Status committed = accepted.ok()
                                 ? seq->cache->CommitPath(accepted->path)
                                 : accepted.status();
    if (!committed.ok()) {
      End(seq, absl::InternalError(
                   absl::StrCat("accepting the draft: ", committed.message())));
      continue;
    }
    const engine::DraftTree& tree = plan.trees[i];
    const int verified = tree.size();
    const int hits = static_cast<int>(accepted->tokens.size()) - 1;
    if (verified == 0 && plan.asked[i] > 0) {
      seq->pacer().Missed();
    } else {
      seq->pacer().Update(verified, hits);
    }
    if (verified > 0 && tree.scores.size() == tree.tokens.size()) {
      double predicted = 0;
      for (float p : tree.scores) predicted += std::clamp(p, 0.0f, 1.0f);
      constexpr double kWeight = 0.3;
      seq->predicted_hits += kWeight * (predicted - seq->predicted_hits);
      seq->actual_hits += kWeight * (hits - seq->actual_hits);
    }
    // Before Emit, whose Observe reports the step's tokens after the tree.
    RecyclePredictions(seq, plan.asked[i], tree, tree_logits, plan_ptr);
    AdvanceWindow(seq, logits[i], in.tokens[0], accepted->tokens);
    if (seq->draft_handle != 0) {
      RecordAssistant(seq, tree, accepted->path, hits);
    }
    // Counted before Emit, whose last output carries the usage.
    seq->draft_tokens += verified;
    SourceCounts source_verified{};
    for (int j = 0; j < verified; ++j) CountSources(tree, j, &source_verified);
    for (int t = 0; t < engine::kNumDraftSourceTags; ++t) {
      seq->source_drafts[t] += source_verified[t];
    }
    const std::array<int64_t, engine::kNumDraftSourceTags> accepted_before =
        seq->source_accepted;
    // Token j was chosen at verify row path[j] (the root's, then each
    // accepted node's).
    std::vector<engine::ChoiceLogprobs> logprobs =
        LogprobsOf(seq->request, tree_logits, accepted->path, accepted->tokens);
    const int kept = Emit(seq, accepted->tokens, std::move(logprobs), hits,
                          &tree, accepted->path);
    const int kept_hits = std::min(hits, kept);
    tally->accepted += kept_hits;
    ++tally->steps;
    tally->emitted += kept;
    tally->decode_emitted += kept;
    if (verified > 0) observer_->OnDraftVerified(verified, kept_hits);
    for (int t = 0; t < engine::kNumDraftSourceTags; ++t) {
      if (source_verified[t] == 0) continue;
      observer_->OnDraftSourceVerified(
          static_cast<engine::DraftSourceTag>(t), source_verified[t],
          static_cast<int>(seq->source_accepted[t] - accepted_before[t]));
    }
  }
}

void Scheduler::CommitPrefill(const StepPlan& plan,
                              const std::vector<torch::Tensor>& logits,
                              StepTally* tally) {
  // Commit prefill chunks; a finished prompt yields the first token.
  size_t next = plan.decoding.size();
  for (size_t i = 0; i < plan.prefilling.size(); ++i) {
    if (plan.chunk[i] == 0) continue;
    Sequence* seq = plan.prefilling[i];
    const engine::TreeInput& in = plan.batch[next];
    const torch::Tensor& last = logits[next];
    ++next;
    std::vector<int32_t> path(in.tokens.size());
    for (size_t j = 0; j < path.size(); ++j) path[j] = static_cast<int32_t>(j);
    absl::Status committed = seq->cache->CommitPath(path);
    if (!committed.ok()) {
      End(seq, absl::InternalError(
                   absl::StrCat("prefill commit: ", committed.message())));
      continue;
    }
    seq->prefilled += plan.chunk[i];
    const int prompt = static_cast<int>(seq->request.prompt.size());
    if (seq->prefilled < prompt) continue;
    if (seq->draft_handle != 0) {
      // A request its sources refused at the open (a named source the
      // draft service does not run) ends before its first token. The open
      // runs beside the prefill; a request that named sources waits for
      // its answer, at most the draft client's open deadline after
      // admission (a later refusal ends it at its first draft step).
      constexpr absl::Duration kOpenAnswerWait = absl::Milliseconds(500);
      if (seq->request.draft.sources != 0) {
        drafts_->WaitOpened(seq->draft_handle, seq->admitted + kOpenAnswerWait);
      }
      absl::Status failure = drafts_->Failure(seq->draft_handle);
      if (!failure.ok()) {
        End(seq, std::move(failure));
        continue;
      }
    }
    if (options_.prefix_cache != nullptr) CachePrompt(*seq);
    const int32_t first = SelectToken(last[0], seq->request.sampling, prompt);
    seq->first_token = absl::Now();
    observer_->OnFirstToken(
        prompt, absl::ToDoubleSeconds(seq->first_token - seq->request.arrival));
    ++tally->steps;
    ++tally->emitted;
    // The first token was chosen at the prompt's last row.
    Emit(seq, {first}, LogprobsOf(seq->request, last, {0}, {first}),
         /*draft_hits=*/0);
  }
}

void Scheduler::Record(const StepPlan& plan, const StepTally& tally) {
  StepReport report;
  report.batch_sequences = static_cast<int>(plan.batch.size());
  report.decoding_sequences = static_cast<int>(plan.decoding.size());
  report.batch_tokens = plan.batch_tokens;
  report.forward_seconds = plan.forward_seconds;
  if (!plan.decoding.empty()) {
    report.plain_equivalent_seconds = plan.plain_step_seconds *
                                      double(tally.decode_emitted) /
                                      plan.decoding.size();
  }
  report.step_seconds = absl::ToDoubleSeconds(absl::Now() - plan.start);
  observer_->OnStep(report);
  // The gates' price of a token: decoding steps only (a prefill chunk's
  // time buys no output tokens).
  if (plan.prefill_tokens == 0 && tally.decode_emitted > 0) {
    const double seconds = report.step_seconds / tally.decode_emitted;
    seconds_per_token_ = MovingAverage(seconds_per_token_, seconds);
  }
  ++steps_run_;
  if (options_.log_every_steps > 0 &&
      steps_run_ % options_.log_every_steps == 0) {
    std::printf(
        "verifysvc: step %lld: %zu decoding + %zu prefilling, %lld tokens "
        "(%d prefill), drafts %d requested %lld verified %lld accepted, "
        "forward %.1f ms, predictions %.3f ms\n",
        static_cast<long long>(steps_run_), plan.decoding.size(),
        plan.prefilling.size(), static_cast<long long>(plan.batch_tokens),
        plan.prefill_tokens, plan.requested_drafts,
        static_cast<long long>(plan.draft_total),
        static_cast<long long>(tally.accepted), plan.forward_seconds * 1e3,
        plan.prediction_seconds * 1e3);
    std::fflush(stdout);
  }
  absl::MutexLock lock(&mu_);
  ++stats_.forward_passes;
  stats_.forward_sequences += static_cast<int64_t>(plan.batch.size());
  stats_.max_forward_sequences = std::max(stats_.max_forward_sequences,
                                          static_cast<int>(plan.batch.size()));
  stats_.forward_tokens += plan.batch_tokens;
  stats_.decoding_steps += tally.steps;
  stats_.output_tokens += tally.emitted;
  stats_.draft_tokens += plan.draft_total;
  stats_.accepted_draft_tokens += tally.accepted;
}

int Scheduler::Emit(Sequence* seq, absl::Span<const int32_t> tokens,
                    std::vector<engine::ChoiceLogprobs> logprobs,
                    int draft_hits, const engine::DraftTree* tree,
                    absl::Span<const int32_t> path) {
  GenerationOutput out = seq->output.Append(tokens, std::move(logprobs));
  ++seq->steps;
  if (seq->draft_handle != 0 && options_.pace_repeats) {
    seq->repeats.Append(tokens);
  }
  const int kept = static_cast<int>(out.token_ids.size());
  // Draft tokens count as accepted only if they reached the output.
  const int kept_hits = std::min(draft_hits, kept);
  seq->accepted_draft_tokens += kept_hits;
  if (tree != nullptr) {
    // path[m] is verify row m: draft node path[m] - 1.
    SourceCounts accepted{};
    for (int m = 1; m <= kept_hits && m < static_cast<int>(path.size()); ++m) {
      CountSources(*tree, path[m] - 1, &accepted);
    }
    for (int t = 0; t < engine::kNumDraftSourceTags; ++t) {
      seq->source_accepted[t] += accepted[t];
    }
  }
  if (seq->draft_handle != 0)
    drafts_->Observe(seq->draft_handle, out.token_ids);
  observer_->OnSequenceStep(kept);
  if (out.finish_reason == FinishReason::kNone) {
    seq->sink->Send(std::move(out));
    return kept;
  }
  out.usage = UsageOf(*seq, out.finish_reason);
  observer_->OnRequestFinished(*out.usage);
  seq->sink->Send(std::move(out));
  End(seq, absl::OkStatus());
  return kept;
}

Usage Scheduler::UsageOf(const Sequence& seq, FinishReason finish) const {
  Usage usage;
  const int out = static_cast<int>(seq.output.tokens().size());
  const absl::Time arrival = seq.request.arrival;
  usage.prompt_tokens = static_cast<int>(seq.request.prompt.size());
  usage.output_tokens = out;
  usage.decoding_steps = seq.steps;
  usage.edl = seq.steps == 0 ? 0 : double(out) / seq.steps;
  usage.time_to_first_token_seconds =
      absl::ToDoubleSeconds(seq.first_token - arrival);
  usage.total_seconds = absl::ToDoubleSeconds(absl::Now() - arrival);
  usage.tokens_per_second =
      usage.total_seconds > 0 ? out / usage.total_seconds : 0;
  usage.finish_reason = finish;
  usage.draft_tokens = seq.draft_tokens;
  usage.accepted_draft_tokens = seq.accepted_draft_tokens;
  usage.queue_seconds = absl::ToDoubleSeconds(seq.admitted - arrival);
  usage.cached_prompt_tokens = seq.cached_prompt_tokens;
  for (int t = 0; t < engine::kNumDraftSourceTags; ++t) {
    if (seq.source_drafts[t] == 0) continue;
    usage.sources.push_back({static_cast<engine::DraftSourceTag>(t),
                             seq.source_drafts[t], seq.source_accepted[t]});
  }
  return usage;
}

void Scheduler::KeepGateVerdict(const Sequence& seq) {
  const DraftPolicy& policy = seq.request.draft;
  const bool window = WindowRowsOf(policy) > 0 && seq.window_gate.runs() > 0;
  const bool assistant = policy.MayUse(engine::DraftSourceTag::kAssistant) &&
                         seq.assistant_gate.runs() > 0;
  // Pacing carries over only from a sequence whose drafts never held over
  // a few probes' worth of steps: a namespace of text its sources cannot
  // match (random tokens, a high temperature) stops paying the prior's asks
  // and early probes on every request, while in one whose drafts hold at
  // all each request starts from the prior (a new prompt may be a new
  // document to copy from; measured, inheriting every verdict cost RAG and
  // code EDL).
  // A sequence too short to tell leaves the verdict as it is.
  const bool held = seq.accepted_draft_tokens > 0;
  const bool hopeless =
      !held && seq.steps >= 2 * options_.pacing.probe_interval;
  auto kept = gate_verdicts_.find(policy.name_space);
  const bool pacing =
      options_.inherit_pacing &&
      (hopeless || (held && kept != gate_verdicts_.end() &&
                    kept->second.pacers[0].has_value()));
  if (!window && !assistant && !pacing) return;
  // Bounded: namespaces come from clients.
  constexpr size_t kMaxVerdicts = 1024;
  if (gate_verdicts_.size() >= kMaxVerdicts &&
      gate_verdicts_.count(policy.name_space) == 0) {
    gate_verdicts_.erase(gate_verdicts_.begin());
  }
  GateVerdict& verdict = gate_verdicts_[policy.name_space];
  if (window) verdict.window.Inherit(seq.window_gate);
  if (assistant) verdict.assistant.Inherit(seq.assistant_gate);
  for (int k = 0; pacing && k < 2; ++k) {
    if (hopeless) {
      verdict.pacers[k].emplace(seq.pacers[k]);
    } else {
      verdict.pacers[k].reset();
    }
  }
}

void Scheduler::End(Sequence* seq, absl::Status status) {
  if (seq->done) return;
  seq->done = true;
  if (seq->draft_handle != 0) {
    KeepGateVerdict(*seq);
    drafts_->Close(seq->draft_handle);
    seq->draft_handle = 0;
  }
  seq->cache.reset();
  {
    // Before Finish: a client that has seen its stream end sees it counted.
    absl::MutexLock lock(&mu_);
    --admitted_;
    CountOutcome(status.ok()                 ? RequestOutcome::kFinished
                 : absl::IsCancelled(status) ? RequestOutcome::kCancelled
                                             : RequestOutcome::kFailed);
  }
  seq->sink->Finish(std::move(status));
}

}  // namespace lookahead::verifysvc
