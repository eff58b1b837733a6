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
#include "verifysvc/serving/output_processor.h"

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

}  // namespace

struct Scheduler::Sequence {
  Sequence(GenerationRequest r, GenerationSink* k,
           const engine::Tokenizer* tokenizer)
      : request(std::move(r)),
        sink(k),
        output(tokenizer, request.stop, request.max_new_tokens) {}

  // A prefilled prompt's first token, held until its draft sources
  // answered its open (SequenceDrafter::AwaitingOpen).
  struct HeldToken {
    int32_t token = 0;
    std::vector<engine::ChoiceLogprobs> logprobs;
  };

  GenerationRequest request;
  GenerationSink* sink;
  std::unique_ptr<engine::KvCache> cache;
  int prefilled = 0;             // Prompt tokens in the cache.
  int cached_prompt_tokens = 0;  // Of them, restored from the prefix cache.
  OutputProcessor output;
  // Its drafting (null: not drafted); closed by End.
  std::unique_ptr<SequenceDrafter> drafter;
  std::optional<HeldToken> held_first;
  bool done = false;

  // Usage.
  int steps = 0;
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
    DraftFanout* drafts, StepCostModel cost, SchedulerOptions options) {
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
                     const engine::Tokenizer* tokenizer, DraftFanout* drafts,
                     StepCostModel cost, SchedulerOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      observer_(options.observer != nullptr ? options.observer
                                            : new SchedulerObserver()),
      own_observer_(options.observer != nullptr ? nullptr : observer_),
      cost_(std::move(cost)),
      drafting_(drafts != nullptr && !drafts->empty()
                    ? std::make_unique<DraftPlanner>(drafts, &cost_,
                                                     model->config().vocab_size,
                                                     options_, observer_)
                    : nullptr),
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
  if (drafting_ != nullptr) {
    const DraftSourceStats d = drafting_->Stats();
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
  auto seq = std::make_unique<Sequence>(std::move(pending.request),
                                        pending.sink, tokenizer_);
  seq->admitted = absl::Now();
  if (seq->sink->Cancelled()) {
    End(seq.get(), absl::CancelledError("cancelled by the client"));
    return nullptr;
  }
  const GenerationRequest& request = seq->request;
  // Room for the prompt, the output and one step's tree.
  const int capacity = static_cast<int>(request.prompt.size()) +
                       request.max_new_tokens + request.draft.decoding_length +
                       1 + SequenceDrafter::ScratchRowsOf(request.draft);
  absl::StatusOr<std::unique_ptr<engine::KvCache>> cache =
      model_->NewCache(capacity);
  if (!cache.ok()) {
    End(seq.get(), cache.status());
    return nullptr;
  }
  seq->cache = *std::move(cache);
  if (options_.prefix_cache != nullptr) RestorePrefix(seq.get());
  if (drafting_ != nullptr && request.draft.enabled()) {
    seq->drafter =
        drafting_->Open(request.draft, request.sampling, request.prompt);
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
  const bool held = ReleaseFirstTokens();
  StepPlan plan = Plan();
  Draft(&plan);
  if (plan.decoding.empty() && plan.prefill_tokens == 0) {
    // Nothing to run: Draft ended every sequence (a source failure), or
    // every prompt's first token waits for its draft sources' answer. Then
    // look again shortly, at once for a new request.
    if (held) {
      absl::MutexLock lock(&mu_);
      auto arrived = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Milliseconds(1));
    }
    return;
  }
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
    if (seq->done) continue;  // a first token's sources refused it
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
  return plan;
}

void Scheduler::Draft(StepPlan* plan) {
  if (drafting_ == nullptr) return;
  std::vector<SequenceDrafter*> drafters;
  std::vector<int> rooms;
  for (const Sequence* seq : plan->decoding) {
    drafters.push_back(seq->drafter.get());
    rooms.push_back(seq->cache->Capacity() - seq->cache->Length() - 1);
  }
  StepDrafts drafts =
      drafting_->Draft(drafters, rooms, plan->prefill_tokens,
                       options_.max_step_tokens, SecondsPerToken());
  plan->requested_drafts = drafts.requested;
  EndUnservable(plan, &drafts.drafts);
}

void Scheduler::EndUnservable(StepPlan* plan,
                              std::vector<SequenceDraft>* drafts) {
  size_t kept = 0;
  for (size_t i = 0; i < plan->decoding.size(); ++i) {
    Sequence* seq = plan->decoding[i];
    SequenceDraft& draft = (*drafts)[i];
    // A request its sources can never serve as asked (a named source that
    // is not served): a client configuration error, not something to hide
    // behind no drafts.
    if (!draft.failure.ok()) {
      End(seq, std::move(draft.failure));
      continue;
    }
    plan->decoding[kept] = seq;
    plan->trees[kept] = std::move(draft.tree);
    ++kept;
  }
  plan->decoding.resize(kept);
  plan->trees.resize(kept);
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
    // A sequence's drafting may add scratch rows after its tree.
    if (k < plan->decoding.size() && plan->decoding[k]->drafter != nullptr) {
      plan->decoding[k]->drafter->AppendScratchRows(&*r);
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

double Scheduler::SecondsPerToken() const {
  return seconds_per_token_ > 0 ? seconds_per_token_ : cost_.Seconds(1);
}

void Scheduler::AcceptDrafts(StepPlan* plan_ptr,
                             const std::vector<torch::Tensor>& logits,
                             StepTally* tally) {
  const StepPlan& plan = *plan_ptr;
  for (size_t i = 0; i < plan.decoding.size(); ++i) {
    Sequence* seq = plan.decoding[i];
    const engine::TreeInput& in = plan.batch[i];
    // The tree's rows; any scratch rows of its drafting follow them.
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
    const int hits = static_cast<int>(accepted->tokens.size()) - 1;
    if (seq->drafter != nullptr) {
      seq->drafter->Verified(tree, in.tokens[0], logits[i], accepted->path,
                             accepted->tokens, &plan_ptr->prediction_seconds);
    }
    // Token j was chosen at verify row path[j] (the root's, then each
    // accepted node's).
    std::vector<engine::ChoiceLogprobs> logprobs =
        LogprobsOf(seq->request, tree_logits, accepted->path, accepted->tokens);
    const int kept = Emit(seq, accepted->tokens, std::move(logprobs), hits,
                          &tree, accepted->path);
    tally->accepted += std::min(hits, kept);
    ++tally->steps;
    tally->emitted += kept;
    tally->decode_emitted += kept;
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
    // The first token, chosen at the prompt's last row.
    const int32_t first = SelectToken(last[0], seq->request.sampling, prompt);
    std::vector<engine::ChoiceLogprobs> logprobs =
        LogprobsOf(seq->request, last, {0}, {first});
    if (seq->drafter != nullptr && seq->drafter->AwaitingOpen(absl::Now())) {
      // Its draft sources have not yet said whether they serve it: the
      // token waits for their answer (ReleaseFirstTokens); the others go on.
      seq->held_first = Sequence::HeldToken{first, std::move(logprobs)};
      continue;
    }
    EmitFirst(seq, first, std::move(logprobs), tally);
  }
}

void Scheduler::EmitFirst(Sequence* seq, int32_t first,
                          std::vector<engine::ChoiceLogprobs> logprobs,
                          StepTally* tally) {
  if (seq->drafter != nullptr) {
    // A request its sources refused at the open (a named source that is
    // not served) ends before its first token; a later refusal ends it at
    // its first draft step (EndUnservable).
    absl::Status failure = seq->drafter->Failure();
    if (!failure.ok()) {
      End(seq, std::move(failure));
      return;
    }
  }
  if (options_.prefix_cache != nullptr) CachePrompt(*seq);
  const int prompt = static_cast<int>(seq->request.prompt.size());
  seq->first_token = absl::Now();
  observer_->OnFirstToken(
      prompt, absl::ToDoubleSeconds(seq->first_token - seq->request.arrival));
  ++tally->steps;
  ++tally->emitted;
  Emit(seq, {first}, std::move(logprobs), /*draft_hits=*/0);
}

bool Scheduler::ReleaseFirstTokens() {
  const absl::Time now = absl::Now();
  StepTally tally;
  bool waiting = false;
  for (auto& seq : running_) {
    if (seq->done || !seq->held_first.has_value()) continue;
    if (seq->drafter->AwaitingOpen(now)) {
      waiting = true;
      continue;
    }
    Sequence::HeldToken held = std::move(*seq->held_first);
    seq->held_first.reset();
    EmitFirst(seq.get(), held.token, std::move(held.logprobs), &tally);
  }
  if (tally.steps > 0) {
    absl::MutexLock lock(&mu_);
    stats_.decoding_steps += tally.steps;
    stats_.output_tokens += tally.emitted;
  }
  return waiting;
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
  report.step_cost = cost_.points();
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
        "forward %.1f ms, predictions %.3f ms, step %.1f ms\n",
        static_cast<long long>(steps_run_), plan.decoding.size(),
        plan.prefilling.size(), static_cast<long long>(plan.batch_tokens),
        plan.prefill_tokens, plan.requested_drafts,
        static_cast<long long>(plan.draft_total),
        static_cast<long long>(tally.accepted), plan.forward_seconds * 1e3,
        plan.prediction_seconds * 1e3, report.step_seconds * 1e3);
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
  // Its drafting counts the step's draft tokens and tells the sources.
  if (seq->drafter != nullptr) {
    seq->drafter->Emitted(tokens, out.token_ids, draft_hits, tree, path);
  }
  const int kept = static_cast<int>(out.token_ids.size());
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
  usage.queue_seconds = absl::ToDoubleSeconds(seq.admitted - arrival);
  usage.cached_prompt_tokens = seq.cached_prompt_tokens;
  if (seq.drafter == nullptr) return usage;
  const SequenceDrafter& drafts = *seq.drafter;
  usage.draft_tokens = drafts.draft_tokens();
  usage.accepted_draft_tokens = drafts.accepted_draft_tokens();
  for (int t = 0; t < engine::kNumDraftSourceTags; ++t) {
    if (drafts.source_drafts()[t] == 0) continue;
    usage.sources.push_back({static_cast<engine::DraftSourceTag>(t),
                             drafts.source_drafts()[t],
                             drafts.source_accepted()[t]});
  }
  return usage;
}

void Scheduler::End(Sequence* seq, absl::Status status) {
  if (seq->done) return;
  seq->done = true;
  if (seq->drafter != nullptr) drafting_->Close(seq->drafter.get());
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
