#include "verifysvc/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "verifysvc/acceptance.h"
#include "verifysvc/kv_cache.h"
#include "verifysvc/stop_strings.h"
#include "verifysvc/text_stream.h"

namespace lookahead::verifysvc {

namespace v1 = lookahead::v1;

namespace {

// Accepted tokens a sequence holds back from draftsvc while it wants no
// drafts; then they go in a report-only Step. Keeps the global trie fresh
// for other sequences and notices a restarted draftsvc (its sessions gone)
// within this many tokens, for one round trip per 64 steps at most.
constexpr int kMaxUnreportedTokens = 64;

// Draft depths with their own acceptance series (draftsvc allows <= 32).
constexpr int kMetricPositions = 32;

// Exponential moving average weight of the latest drafted step.
constexpr double kAcceptanceEma = 0.3;
// Prior draft quality of a new sequence. The first draft's size follows
// from it and the measured step costs: on the 2-core CPU with the packed
// matmul kernel 0.9 buys a 15-token draft (16 tokens cost 1.8x one); with
// OpenBLAS's steeper curve (3.5x) it bought 1 token; on a GPU a full one. A
// hit then raises it (RAG answers quoting their prompt draft fully within a
// step or two), misses lower it (a request whose drafts all fail pays ~2
// steps' worth before its drafts stop).
constexpr double kPriorQuality = 0.9;

DecodeOptions VisibleText() {
  DecodeOptions options;
  options.render_special = false;  // No "<|im_end|>" in the answer.
  return options;
}

SequenceInput ChainInput(KvCache* cache, absl::Span<const int32_t> tokens) {
  SequenceInput in;
  in.cache = cache;
  in.tokens.assign(tokens.begin(), tokens.end());
  for (size_t i = 0; i < tokens.size(); ++i) {
    in.parents.push_back(static_cast<int32_t>(i) - 1);
  }
  in.last_logits_only = true;
  return in;
}

int32_t SelectToken(const torch::Tensor& logits_row,
                    const SamplingParams& params, int64_t position) {
  torch::Tensor row = logits_row.to(torch::kCPU).contiguous();
  absl::Span<const float> values(row.data_ptr<float>(),
                                 static_cast<size_t>(row.numel()));
  return params.greedy() ? ArgMax(values)
                         : SampleToken(values, params, position);
}

}  // namespace

struct Scheduler::Sequence {
  Sequence(SequenceSpec s, GenerationSink* k, const Tokenizer* tokenizer)
      : spec(std::move(s)),
        sink(k),
        text(tokenizer, VisibleText()),
        stop(spec.stop) {}

  SequenceSpec spec;
  GenerationSink* sink;
  std::unique_ptr<KvCache> cache;
  int prefilled = 0;  // Prompt tokens in the cache.
  std::vector<int32_t> output;
  std::vector<int32_t> fresh;  // Emitted since the last draft report.
  int64_t draft_handle = 0;    // 0: no draft session.
  bool done = false;

  // Acceptance of recent drafts (exponential moving averages), and probing.
  double quality = kPriorQuality;
  int steps_without_draft = 0;
  int probe_interval = 0;
  bool probing = false;

  TextStream text;
  StopStringMatcher stop;

  // Usage.
  int steps = 0;
  int64_t draft_tokens = 0;
  int64_t accepted_draft_tokens = 0;
  absl::Time admitted;
  absl::Time first_token;

  bool decoding() const { return !output.empty(); }
};

absl::StatusOr<StepCostModel> MeasureStepCost(const LlamaModel& model,
                                              const std::vector<int>& sizes,
                                              int context, int repeats) {
  const int largest = sizes.empty() ? 1 : sizes.back();
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                   model.NewCache(context + largest + 1));
  std::vector<int32_t> tokens(context + largest);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] =
        static_cast<int32_t>((i * 7919 + 13) % model.config().vocab_size);
  }
  RETURN_IF_ERROR(
      model.Prefill(cache.get(), absl::MakeConstSpan(tokens).first(context))
          .status());
  std::vector<std::pair<int, double>> points;
  for (int n : sizes) {
    SequenceInput in = ChainInput(
        cache.get(), absl::MakeConstSpan(tokens).subspan(context, n));
    in.last_logits_only = false;  // A verify pass needs every node's logits.
    double best = 0;
    for (int r = 0; r <= repeats; ++r) {  // r = 0 warms up.
      const absl::Time start = absl::Now();
      RETURN_IF_ERROR(model.Forward(absl::MakeConstSpan(&in, 1)).status());
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      if (r == 1 || (r > 1 && seconds < best)) best = seconds;
    }
    cache->DiscardPending();
    points.emplace_back(n, std::max(best, 1e-6));
  }
  return StepCostModel::Create(std::move(points));
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const LlamaModel* model, const Tokenizer* tokenizer, DraftSessions* drafts,
    StepCostModel cost, SchedulerOptions options) {
  if (options.max_running < 1 || options.max_queued < 0 ||
      options.max_step_tokens < 1 || options.prefill_chunk_tokens < 1 ||
      options.probe_interval < 1 ||
      options.max_probe_interval < options.probe_interval ||
      options.probe_tokens < 0) {
    return absl::InvalidArgumentError(
        "scheduler options: max_running, max_step_tokens, "
        "prefill_chunk_tokens and probe_interval must be >= 1, max_queued "
        "and probe_tokens >= 0, max_probe_interval >= probe_interval");
  }
  // Without a registry the series still exist, in one nobody scrapes, so
  // the step code needs no null checks.
  std::unique_ptr<metrics::Registry> own_registry;
  std::unique_ptr<VerifierMetrics> own_metrics;
  if (options.metrics == nullptr) {
    own_registry = std::make_unique<metrics::Registry>();
    ASSIGN_OR_RETURN(
        own_metrics,
        VerifierMetrics::Create(own_registry.get(), "model", kMetricPositions));
    options.metrics = own_metrics.get();
  }
  auto scheduler = std::unique_ptr<Scheduler>(
      new Scheduler(model, tokenizer, drafts, std::move(cost), options));
  scheduler->own_registry_ = std::move(own_registry);
  scheduler->own_metrics_ = std::move(own_metrics);
  return scheduler;
}

Scheduler::Scheduler(const LlamaModel* model, const Tokenizer* tokenizer,
                     DraftSessions* drafts, StepCostModel cost,
                     SchedulerOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      drafts_(drafts),
      options_(options),
      m_(options.metrics),
      cost_(std::move(cost)),
      thread_([this] { Loop(); }) {}

Scheduler::~Scheduler() { Shutdown(absl::ZeroDuration()); }

absl::Status Scheduler::Submit(SequenceSpec spec, GenerationSink* sink) {
  absl::MutexLock lock(&mu_);
  if (!accepting_) {
    stats_.set_requests_rejected(stats_.requests_rejected() + 1);
    m_->rejected->Increment();
    return absl::UnavailableError(
        "verifysvc is shutting down; retry on "
        "another replica");
  }
  if (admitted_ >= options_.max_running + options_.max_queued) {
    stats_.set_requests_rejected(stats_.requests_rejected() + 1);
    m_->rejected->Increment();
    return absl::ResourceExhaustedError(absl::StrCat(
        "server full: ", options_.max_running, " sequences running and ",
        options_.max_queued, " queued (--max_running=", options_.max_running,
        ", --max_queued=", options_.max_queued, "); retry later"));
  }
  ++admitted_;
  stats_.set_requests_admitted(stats_.requests_admitted() + 1);
  queue_.push_back({std::move(spec), sink});
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
  m_->rejected->Increment();
  absl::MutexLock lock(&mu_);
  stats_.set_requests_rejected(stats_.requests_rejected() + 1);
}

v1::GenerationStatsResponse Scheduler::Stats() const {
  v1::GenerationStatsResponse stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
    stats.set_queued_sequences(static_cast<int32_t>(queue_.size()));
  }
  if (drafts_ != nullptr) {
    const DraftSessionsStats d = drafts_->Stats();
    stats.set_draftsvc_available(d.available);
    stats.set_draft_step_failures(d.step_failures);
    stats.set_draft_sessions_reopened(d.reopened);
  }
  return stats;
}

void Scheduler::Loop() {
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
      stats_.set_requests_cancelled(stats_.requests_cancelled() + 1);
      m_->cancelled->Increment();
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
    auto seq =
        std::make_unique<Sequence>(std::move(p.spec), p.sink, tokenizer_);
    seq->admitted = absl::Now();
    seq->probe_interval = options_.probe_interval;
    if (seq->sink->Cancelled()) {
      End(seq.get(), absl::CancelledError("cancelled by the client"));
      continue;
    }
    const SequenceSpec& spec = seq->spec;
    // Room for the prompt, the output and one step's tree.
    const int capacity = static_cast<int>(spec.prompt.size()) +
                         spec.max_new_tokens + spec.decoding_length + 1;
    absl::StatusOr<std::unique_ptr<KvCache>> cache = model_->NewCache(capacity);
    if (!cache.ok()) {
      End(seq.get(), cache.status());
      continue;
    }
    seq->cache = *std::move(cache);
    if (drafts_ != nullptr && spec.draft_mode != v1::DRAFT_MODE_OFF &&
        spec.decoding_length > 0) {
      seq->draft_handle =
          drafts_->Open(spec.name_space, spec.prompt, spec.branch_length);
    }
    running_.push_back(std::move(seq));
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const auto& s) { return s->done; }),
                 running_.end());
  int64_t kv = 0;
  for (const auto& seq : running_) kv += seq->cache->Capacity();
  m_->running->Set(static_cast<double>(running_.size()));
  m_->kv_cache_tokens->Set(static_cast<double>(kv));
  absl::MutexLock lock(&mu_);
  m_->waiting->Set(static_cast<double>(queue_.size()));
  stats_.set_running_sequences(static_cast<int32_t>(running_.size()));
  stats_.set_kv_cache_tokens(kv);
}

void Scheduler::Step() {
  const absl::Time step_start = absl::Now();
  std::vector<Sequence*> decoding, prefilling;
  for (auto& seq : running_) {
    (seq->decoding() ? decoding : prefilling).push_back(seq.get());
  }

  // Prefill chunks: small while others decode, large when alone.
  std::vector<int> chunk(prefilling.size(), 0);
  int prefill_tokens = 0;
  {
    int budget = decoding.empty() ? model_->options().prefill_chunk_tokens
                                  : options_.prefill_chunk_tokens;
    for (size_t i = 0; i < prefilling.size() && budget > 0; ++i) {
      const Sequence* seq = prefilling[i];
      chunk[i] = std::min<int>(
          budget, static_cast<int>(seq->spec.prompt.size()) - seq->prefilled);
      budget -= chunk[i];
      prefill_tokens += chunk[i];
    }
  }

  // Draft budgets, then ONE draftsvc call for every sequence with a session.
  std::vector<DraftTree> trees(decoding.size());
  int requested_total = 0;
  if (drafts_ != nullptr) {
    std::vector<DraftCandidate> candidates(decoding.size());
    for (size_t i = 0; i < decoding.size(); ++i) {
      Sequence* seq = decoding[i];
      if (seq->draft_handle == 0) continue;
      DraftCandidate& c = candidates[i];
      const int room = seq->cache->Capacity() - seq->cache->Length() - 1;
      c.cap = std::clamp(seq->spec.decoding_length, 0, room);
      seq->probing = seq->steps_without_draft >= seq->probe_interval;
      if (seq->probing) c.floor = std::min(options_.probe_tokens, c.cap);
      c.quality = seq->quality;
      c.depth = seq->spec.branch_length;
    }
    const int base = static_cast<int>(decoding.size()) + prefill_tokens;
    const std::vector<int> budget = AllocateDraftTokens(
        cost_, base, candidates, std::max(0, options_.max_step_tokens - base));
    // No draft wanted this step: skip the RPC (a loopback round trip is a
    // few % of a one-token step) and keep the tokens for a later one.
    bool call = false;
    for (size_t i = 0; i < decoding.size(); ++i) {
      const Sequence* seq = decoding[i];
      if (seq->draft_handle == 0) continue;
      call = call || budget[i] > 0 ||
             static_cast<int>(seq->fresh.size()) >= kMaxUnreportedTokens;
    }
    std::vector<DraftSessions::StepEntry> entries;
    std::vector<size_t> which;
    for (size_t i = 0; call && i < decoding.size(); ++i) {
      Sequence* seq = decoding[i];
      if (seq->draft_handle == 0) continue;
      DraftSessions::StepEntry entry;
      entry.handle = seq->draft_handle;
      entry.accepted = std::move(seq->fresh);
      seq->fresh.clear();
      entry.decoding_length = budget[i];
      requested_total += budget[i];
      entry.mode = seq->spec.draft_mode;
      entries.push_back(std::move(entry));
      which.push_back(i);
    }
    std::vector<DraftTree> got;
    if (!entries.empty()) {
      const int64_t failures = drafts_->Stats().step_failures;
      const absl::Time rpc_start = absl::Now();
      got = drafts_->Step(entries);
      m_->draft_rpc_seconds->Observe(
          absl::ToDoubleSeconds(absl::Now() - rpc_start));
      const DraftSessionsStats after = drafts_->Stats();
      m_->draft_rpc_failures->Increment(
          static_cast<double>(after.step_failures - failures));
      m_->draftsvc_up->Set(after.available ? 1 : 0);
    }
    got.resize(entries.size());
    for (size_t k = 0; k < which.size(); ++k) {
      trees[which[k]] = std::move(got[k]);
      TrimDraft(&trees[which[k]], budget[which[k]]);
    }
  }

  // ONE forward pass: every decoding sequence's [root, tree], then chunks.
  std::vector<SequenceInput> batch;
  std::vector<int64_t> root_position(decoding.size());
  int64_t draft_total = 0;
  for (size_t i = 0; i < decoding.size(); ++i) {
    Sequence* seq = decoding[i];
    root_position[i] = seq->cache->Length();
    batch.push_back(
        MakeVerifyInput(seq->cache.get(), seq->output.back(), trees[i]));
    draft_total += static_cast<int64_t>(trees[i].tokens.size());
  }
  for (size_t i = 0; i < prefilling.size(); ++i) {
    if (chunk[i] == 0) continue;
    const Sequence* seq = prefilling[i];
    batch.push_back(
        ChainInput(seq->cache.get(), absl::MakeConstSpan(seq->spec.prompt)
                                         .subspan(seq->prefilled, chunk[i])));
  }
  int64_t batch_tokens = 0;
  for (const SequenceInput& in : batch) batch_tokens += in.tokens.size();
  const absl::Time forward_start = absl::Now();
  absl::StatusOr<std::vector<torch::Tensor>> logits = model_->Forward(batch);
  const double forward_seconds =
      absl::ToDoubleSeconds(absl::Now() - forward_start);
  m_->forward_seconds->Observe(forward_seconds);
  m_->batch_sequences->Observe(static_cast<double>(batch.size()));
  // Plain decoding's estimated time for this step (one token per decoding
  // sequence, same prefill), before the model learns from this pass.
  const double plain_step_seconds =
      cost_.Seconds(static_cast<int>(decoding.size()) + prefill_tokens);
  cost_.Observe(static_cast<int>(batch_tokens), forward_seconds);
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

  int64_t emitted_total = 0, accepted_total = 0, steps_total = 0;
  int64_t decode_emitted = 0;  // By decoding sequences (not first tokens).
  // Accept per decoding sequence.
  for (size_t i = 0; i < decoding.size(); ++i) {
    Sequence* seq = decoding[i];
    const SequenceInput& in = batch[i];
    absl::StatusOr<AcceptResult> accepted =
        AcceptLongestPath(in.tokens, in.parents, (*logits)[i],
                          seq->spec.sampling, root_position[i]);
    absl::Status committed = accepted.ok()
                                 ? seq->cache->CommitPath(accepted->path)
                                 : accepted.status();
    if (!committed.ok()) {
      End(seq, absl::InternalError(
                   absl::StrCat("accepting the draft: ", committed.message())));
      continue;
    }
    const int verified = static_cast<int>(trees[i].tokens.size());
    const int hits = static_cast<int>(accepted->tokens.size()) - 1;
    if (verified > 0) {
      seq->quality +=
          kAcceptanceEma * (QualityOf(hits, verified) - seq->quality);
      seq->steps_without_draft = 0;
      if (seq->probing) {
        seq->probe_interval = hits > 0 ? options_.probe_interval
                                       : std::min(2 * seq->probe_interval,
                                                  options_.max_probe_interval);
      }
    } else {
      ++seq->steps_without_draft;
    }
    const int kept = Emit(seq, accepted->tokens);
    // Draft tokens count as accepted only if they reached the output.
    const int kept_hits = std::min(hits, kept);
    seq->draft_tokens += verified;
    seq->accepted_draft_tokens += kept_hits;
    accepted_total += kept_hits;
    ++steps_total;
    emitted_total += kept;
    decode_emitted += kept;
    if (verified > 0) {
      m_->drafts->Increment();
      m_->draft_tokens->Increment(verified);
      m_->accepted_tokens->Increment(kept_hits);
      for (int d = 1; d <= kept_hits; ++d) {
        m_->accepted_per_position[std::min<size_t>(
                                      d, m_->accepted_per_position.size()) -
                                  1]
            ->Increment();
      }
    }
  }
  // Commit prefill chunks; a finished prompt yields the first token.
  size_t next = decoding.size();
  for (size_t i = 0; i < prefilling.size(); ++i) {
    if (chunk[i] == 0) continue;
    Sequence* seq = prefilling[i];
    const SequenceInput& in = batch[next];
    const torch::Tensor& last = (*logits)[next];
    ++next;
    std::vector<int32_t> path(in.tokens.size());
    for (size_t j = 0; j < path.size(); ++j) path[j] = static_cast<int32_t>(j);
    absl::Status committed = seq->cache->CommitPath(path);
    if (!committed.ok()) {
      End(seq, absl::InternalError(
                   absl::StrCat("prefill commit: ", committed.message())));
      continue;
    }
    seq->prefilled += chunk[i];
    if (seq->prefilled < static_cast<int>(seq->spec.prompt.size())) continue;
    m_->prompt_tokens->Increment(static_cast<double>(seq->spec.prompt.size()));
    const int32_t first =
        SelectToken(last[0], seq->spec.sampling,
                    static_cast<int64_t>(seq->spec.prompt.size()));
    seq->first_token = absl::Now();
    m_->time_to_first_token_seconds->Observe(
        absl::ToDoubleSeconds(seq->first_token - seq->spec.arrival));
    ++steps_total;
    ++emitted_total;
    Emit(seq, {first});
  }

  if (!decoding.empty()) {
    m_->plain_equivalent_seconds->Increment(
        plain_step_seconds * double(decode_emitted) / decoding.size());
    m_->decode_seconds->Increment(forward_seconds);
  }
  m_->step_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - step_start));
  ++steps_run_;
  if (options_.log_every_steps > 0 &&
      steps_run_ % options_.log_every_steps == 0) {
    std::printf(
        "verifysvc: step %lld: %zu decoding + %zu prefilling, %lld tokens "
        "(%d prefill), drafts %d requested %lld verified %lld accepted, "
        "forward %.1f ms\n",
        static_cast<long long>(steps_run_), decoding.size(), prefilling.size(),
        static_cast<long long>(batch_tokens), prefill_tokens, requested_total,
        static_cast<long long>(draft_total),
        static_cast<long long>(accepted_total), forward_seconds * 1e3);
    std::fflush(stdout);
  }
  absl::MutexLock lock(&mu_);
  stats_.set_forward_passes(stats_.forward_passes() + 1);
  stats_.set_forward_sequences(stats_.forward_sequences() +
                               static_cast<int64_t>(batch.size()));
  stats_.set_max_forward_sequences(std::max<int32_t>(
      stats_.max_forward_sequences(), static_cast<int32_t>(batch.size())));
  stats_.set_forward_tokens(stats_.forward_tokens() + batch_tokens);
  stats_.set_decoding_steps(stats_.decoding_steps() + steps_total);
  stats_.set_output_tokens(stats_.output_tokens() + emitted_total);
  stats_.set_draft_tokens(stats_.draft_tokens() + draft_total);
  stats_.set_accepted_draft_tokens(stats_.accepted_draft_tokens() +
                                   accepted_total);
}

int Scheduler::Emit(Sequence* seq, absl::Span<const int32_t> tokens) {
  v1::GenerateResponse response;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  for (int32_t token : tokens) {
    seq->output.push_back(token);
    seq->fresh.push_back(token);
    response.add_token_ids(token);
    // Ids come from the model's own logits, so Feed cannot fail on them.
    absl::StatusOr<std::string> piece = seq->text.Feed(token);
    if (piece.ok()) response.mutable_text()->append(seq->stop.Push(*piece));
    if (seq->stop.stopped()) {
      finish = v1::FINISH_REASON_STOP_STRING;
    } else if (tokenizer_->IsEndOfGeneration(token)) {
      finish = v1::FINISH_REASON_EOS;
    } else if (static_cast<int>(seq->output.size()) >=
               seq->spec.max_new_tokens) {
      finish = v1::FINISH_REASON_LENGTH;
    }
    if (finish != v1::FINISH_REASON_UNSPECIFIED) break;
  }
  ++seq->steps;
  response.set_accepted(response.token_ids_size());
  const int kept = response.token_ids_size();
  m_->generation_tokens->Increment(kept);
  m_->decoding_steps->Increment();
  m_->accepted_per_step->Observe(kept);
  if (finish == v1::FINISH_REASON_UNSPECIFIED) {
    seq->sink->Send(std::move(response));
    return kept;
  }
  if (finish != v1::FINISH_REASON_STOP_STRING) {
    response.mutable_text()->append(seq->stop.Push(seq->text.Finish()));
    response.mutable_text()->append(seq->stop.Flush());
  }
  const absl::Time now = absl::Now();
  v1::Usage* usage = response.mutable_usage();
  const int out = static_cast<int>(seq->output.size());
  const double total = absl::ToDoubleSeconds(now - seq->spec.arrival);
  usage->set_prompt_tokens(static_cast<int32_t>(seq->spec.prompt.size()));
  usage->set_output_tokens(out);
  usage->set_decoding_steps(seq->steps);
  usage->set_edl(seq->steps == 0 ? 0 : double(out) / seq->steps);
  usage->set_time_to_first_token_seconds(
      absl::ToDoubleSeconds(seq->first_token - seq->spec.arrival));
  usage->set_total_seconds(total);
  usage->set_tokens_per_second(total > 0 ? out / total : 0);
  usage->set_finish_reason(finish);
  usage->set_draft_tokens(seq->draft_tokens);
  usage->set_accepted_draft_tokens(seq->accepted_draft_tokens);
  usage->set_queue_seconds(
      absl::ToDoubleSeconds(seq->admitted - seq->spec.arrival));
  m_->request_tokens_per_second->Observe(usage->tokens_per_second());
  (finish == v1::FINISH_REASON_LENGTH ? m_->finished_length
   : finish == v1::FINISH_REASON_EOS  ? m_->finished_eos
                                      : m_->finished_stop)
      ->Increment();
  seq->sink->Send(std::move(response));
  End(seq, absl::OkStatus());
  return kept;
}

void Scheduler::End(Sequence* seq, absl::Status status) {
  if (seq->done) return;
  seq->done = true;
  if (seq->draft_handle != 0) {
    drafts_->Close(seq->draft_handle, std::move(seq->fresh));
    seq->draft_handle = 0;
  }
  seq->cache.reset();
  {
    // Before Finish: a client that has seen its stream end sees it counted.
    absl::MutexLock lock(&mu_);
    --admitted_;
    if (status.ok()) {
      stats_.set_requests_finished(stats_.requests_finished() + 1);
      m_->finished->Increment();
    } else if (absl::IsCancelled(status)) {
      stats_.set_requests_cancelled(stats_.requests_cancelled() + 1);
      m_->cancelled->Increment();
    } else {
      stats_.set_requests_failed(stats_.requests_failed() + 1);
      m_->failed->Increment();
    }
  }
  seq->sink->Finish(std::move(status));
}

}  // namespace lookahead::verifysvc
