#include "verifysvc/serving/prometheus_observer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lookahead::verifysvc {

namespace {

// Registers series labelled {model} in one registry.
struct Series {
  absl::StatusOr<metrics::Counter*> Counter(const std::string& name,
                                            const std::string& help) const {
    ASSIGN_OR_RETURN(metrics::CounterFamily * family,
                     registry->AddCounter(name, help, {"model"}));
    return family->WithLabels({model});
  }
  absl::StatusOr<metrics::Gauge*> Gauge(const std::string& name,
                                        const std::string& help) const {
    ASSIGN_OR_RETURN(metrics::GaugeFamily * family,
                     registry->AddGauge(name, help, {"model"}));
    return family->WithLabels({model});
  }
  absl::StatusOr<metrics::Histogram*> Histogram(
      const std::string& name, const std::string& help,
      std::vector<double> bounds) const {
    ASSIGN_OR_RETURN(
        metrics::HistogramFamily * family,
        registry->AddHistogram(name, help, {"model"}, std::move(bounds)));
    return family->WithLabels({model});
  }

  metrics::Registry* registry;  // not owned
  std::string model;
};

// Requests by outcome and finish reason.
absl::Status AddRequestSeries(const Series& s, VerifierMetrics* m) {
  ASSIGN_OR_RETURN(metrics::CounterFamily * requests,
                   s.registry->AddCounter("lookahead_requests_total",
                                          "Generate requests by outcome.",
                                          {"model", "outcome"}));
  m->finished = requests->WithLabels({s.model, "finished"});
  m->cancelled = requests->WithLabels({s.model, "cancelled"});
  m->rejected = requests->WithLabels({s.model, "rejected"});
  m->failed = requests->WithLabels({s.model, "failed"});
  ASSIGN_OR_RETURN(metrics::CounterFamily * success,
                   s.registry->AddCounter("lookahead_request_success_total",
                                          "Finished requests by finish reason.",
                                          {"model", "finished_reason"}));
  m->finished_length = success->WithLabels({s.model, "length"});
  m->finished_eos = success->WithLabels({s.model, "eos"});
  m->finished_stop = success->WithLabels({s.model, "stop"});

  return absl::OkStatus();
}

// Tokens, steps, drafts and acceptance by depth.
absl::Status AddTokenSeries(const Series& s, int max_position,
                            VerifierMetrics* m) {
  ASSIGN_OR_RETURN(m->prompt_tokens, s.Counter("lookahead_prompt_tokens_total",
                                               "Prompt tokens prefilled."));
  ASSIGN_OR_RETURN(m->generation_tokens,
                   s.Counter("lookahead_generation_tokens_total",
                             "Tokens generated (streamed to clients)."));
  ASSIGN_OR_RETURN(m->decoding_steps,
                   s.Counter("lookahead_decoding_steps_total",
                             "Per-sequence forward passes that emitted tokens; "
                             "EDL = generation tokens / decoding steps."));
  ASSIGN_OR_RETURN(m->accepted_per_step,
                   s.Histogram("lookahead_accepted_tokens_per_step",
                               "Tokens emitted per decoding step (EDL).",
                               {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 33}));
  ASSIGN_OR_RETURN(
      m->drafts, s.Counter("lookahead_spec_decode_num_drafts_total",
                           "Decoding steps that verified a non-empty draft."));
  ASSIGN_OR_RETURN(m->draft_tokens,
                   s.Counter("lookahead_spec_decode_num_draft_tokens_total",
                             "Draft tokens verified."));
  ASSIGN_OR_RETURN(m->accepted_tokens,
                   s.Counter("lookahead_spec_decode_num_accepted_tokens_total",
                             "Draft tokens accepted (emitted)."));
  ASSIGN_OR_RETURN(
      metrics::CounterFamily * per_position,
      s.registry->AddCounter(
          "lookahead_spec_decode_num_accepted_tokens_per_pos_total",
          "Draft tokens accepted at each depth of the draft tree.",
          {"model", "position"}));
  for (int d = 1; d <= max_position; ++d) {
    m->accepted_per_position.push_back(
        per_position->WithLabels({s.model, absl::StrCat(d)}));
  }
  ASSIGN_OR_RETURN(
      metrics::CounterFamily * drafts_per_source,
      s.registry->AddCounter(
          "lookahead_spec_decode_num_draft_tokens_per_source_total",
          "Draft tokens verified, by the source that proposed them (a node "
          "several sources proposed counts for each).",
          {"model", "source"}));
  ASSIGN_OR_RETURN(
      metrics::CounterFamily * accepted_per_source,
      s.registry->AddCounter(
          "lookahead_spec_decode_num_accepted_tokens_per_source_total",
          "Draft tokens accepted (emitted), by the source that proposed "
          "them (a node several sources proposed counts for each).",
          {"model", "source"}));
  for (int t = 0; t < engine::kNumDraftSourceTags; ++t) {
    const char* label =
        engine::DraftSourceName(static_cast<engine::DraftSourceTag>(t));
    m->draft_tokens_per_source.push_back(
        drafts_per_source->WithLabels({s.model, label}));
    m->accepted_tokens_per_source.push_back(
        accepted_per_source->WithLabels({s.model, label}));
  }
  ASSIGN_OR_RETURN(
      metrics::CounterFamily * gate_steps,
      s.registry->AddCounter(
          "lookahead_cost_gate_steps_total",
          "Sequence steps in which a draft mechanism that costs time of its "
          "own (the Jacobi window's rows, the assistant's passes) ran or was "
          "skipped by its cost gate.",
          {"model", "mechanism", "decision"}));
  for (int g = 0; g < kNumGatedMechanisms; ++g) {
    const char* label = GatedMechanismName(static_cast<GatedMechanism>(g));
    m->cost_gate_steps.push_back(
        {gate_steps->WithLabels({s.model, label, "skip"}),
         gate_steps->WithLabels({s.model, label, "run"})});
  }

  return absl::OkStatus();
}

// Latency, batch size and the speedup estimate's counters.
absl::Status AddStepSeries(const Series& s, VerifierMetrics* m) {
  const std::vector<double> latency =
      metrics::ExponentialBuckets(0.001, 2, 14);  // 1 ms .. 8 s
  ASSIGN_OR_RETURN(
      m->step_seconds,
      s.Histogram("lookahead_step_duration_seconds",
                  "One scheduler step: drafts, forward, accept.", latency));
  ASSIGN_OR_RETURN(m->forward_seconds,
                   s.Histogram("lookahead_forward_duration_seconds",
                               "One batched forward pass.", latency));
  ASSIGN_OR_RETURN(m->draft_rpc_seconds,
                   s.Histogram("lookahead_draft_rpc_duration_seconds",
                               "One batched draftsvc Step call (a round "
                               "trip; asynchronous ones no step waits for "
                               "included).",
                               metrics::ExponentialBuckets(0.0001, 2, 12)));
  ASSIGN_OR_RETURN(m->draft_rpc_failures,
                   s.Counter("lookahead_draft_rpc_failures_total",
                             "draftsvc Step calls that failed or timed out "
                             "(those steps ran without drafts)."));
  ASSIGN_OR_RETURN(
      m->batch_sequences,
      s.Histogram("lookahead_batch_sequences", "Sequences in one forward pass.",
                  {1, 2, 4, 8, 16, 32, 64}));
  ASSIGN_OR_RETURN(
      m->time_to_first_token_seconds,
      s.Histogram("lookahead_time_to_first_token_seconds",
                  "From a request's arrival to its first token.", latency));
  ASSIGN_OR_RETURN(m->request_tokens_per_second,
                   s.Histogram("lookahead_request_tokens_per_second",
                               "Output tokens per second of each finished "
                               "request (arrival to last token).",
                               metrics::ExponentialBuckets(1, 2, 12)));
  ASSIGN_OR_RETURN(m->plain_equivalent_seconds,
                   s.Counter("lookahead_plain_equivalent_seconds_total",
                             "Estimated time plain decoding would have needed "
                             "for the emitted tokens (speedup numerator)."));
  ASSIGN_OR_RETURN(m->decode_seconds,
                   s.Counter("lookahead_decode_seconds_total",
                             "Forward time of decoding steps, the verifier's "
                             "assistant's passes included (speedup "
                             "denominator)."));
  ASSIGN_OR_RETURN(m->assistant_seconds,
                   s.Counter("lookahead_assistant_seconds_total",
                             "Seconds the verifier's own assistant model "
                             "(--assistant_model) ran its passes, in series "
                             "with the verify passes."));
  ASSIGN_OR_RETURN(m->assistant_passes,
                   s.Counter("lookahead_assistant_passes_total",
                             "Forward passes of the verifier's assistant "
                             "model (a catch-up over several tokens is one)."));
  return absl::OkStatus();
}

absl::Status AddGaugeSeries(const Series& s, VerifierMetrics* m) {
  ASSIGN_OR_RETURN(m->running, s.Gauge("lookahead_num_requests_running",
                                       "Sequences in the batch."));
  ASSIGN_OR_RETURN(m->waiting, s.Gauge("lookahead_num_requests_waiting",
                                       "Requests queued for a batch slot."));
  ASSIGN_OR_RETURN(m->kv_cache_tokens,
                   s.Gauge("lookahead_kv_cache_tokens",
                           "KV cache slots allocated to running sequences."));
  ASSIGN_OR_RETURN(m->kv_cache_capacity_tokens,
                   s.Gauge("lookahead_kv_cache_capacity_tokens",
                           "KV cache slots the batch may use at most "
                           "(max_running x max_context_tokens)."));
  ASSIGN_OR_RETURN(m->draftsvc_up,
                   s.Gauge("lookahead_draftsvc_up",
                           "1 if the last draftsvc call succeeded, else 0."));
  ASSIGN_OR_RETURN(
      m->step_cost_seconds,
      s.registry->AddGauge(
          "lookahead_step_cost_seconds",
          "The verifier's cost model: seconds of a forward pass over "
          "`tokens` tokens, measured at start and kept current from the "
          "passes served. The draft budget and the cut charge draft rows "
          "by it.",
          {"model", "tokens"}));
  m->model = s.model;
  return absl::OkStatus();
}

absl::Status AddPrefixCacheSeries(const Series& s, VerifierMetrics* m) {
  ASSIGN_OR_RETURN(m->prefix_lookup_tokens,
                   s.Counter("lookahead_prefix_cache_lookup_tokens_total",
                             "Prompt tokens looked up in the prefix cache."));
  ASSIGN_OR_RETURN(m->prefix_hit_tokens,
                   s.Counter("lookahead_prefix_cache_hit_tokens_total",
                             "Prompt tokens whose K/V came from the prefix "
                             "cache (not prefilled)."));
  ASSIGN_OR_RETURN(m->prefix_cache_bytes,
                   s.Gauge("lookahead_prefix_cache_bytes",
                           "Bytes of K/V the prefix cache holds."));
  ASSIGN_OR_RETURN(m->prefix_cache_capacity_bytes,
                   s.Gauge("lookahead_prefix_cache_capacity_bytes",
                           "Most bytes the prefix cache may hold "
                           "(--prefix_cache_mib)."));
  ASSIGN_OR_RETURN(m->prefix_evictions,
                   s.Counter("lookahead_prefix_cache_evictions_total",
                             "Prefix cache blocks evicted (least recently "
                             "used) to make room."));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<VerifierMetrics>> VerifierMetrics::Create(
    metrics::Registry* registry, const std::string& model, int max_position) {
  auto m = std::make_unique<VerifierMetrics>();
  Series s{registry, model};
  RETURN_IF_ERROR(AddRequestSeries(s, m.get()));
  RETURN_IF_ERROR(AddTokenSeries(s, max_position, m.get()));
  RETURN_IF_ERROR(AddStepSeries(s, m.get()));
  RETURN_IF_ERROR(AddGaugeSeries(s, m.get()));
  RETURN_IF_ERROR(AddPrefixCacheSeries(s, m.get()));
  return m;
}

void PrometheusObserver::OnRequestEnded(RequestOutcome outcome) {
  switch (outcome) {
    case RequestOutcome::kFinished:
      m_->finished->Increment();
      break;
    case RequestOutcome::kCancelled:
      m_->cancelled->Increment();
      break;
    case RequestOutcome::kRejected:
      m_->rejected->Increment();
      break;
    case RequestOutcome::kFailed:
      m_->failed->Increment();
      break;
  }
}

void PrometheusObserver::OnRequestFinished(const Usage& usage) {
  m_->request_tokens_per_second->Observe(usage.tokens_per_second);
  (usage.finish_reason == FinishReason::kLength ? m_->finished_length
   : usage.finish_reason == FinishReason::kEos  ? m_->finished_eos
                                                : m_->finished_stop)
      ->Increment();
}

void PrometheusObserver::OnFirstToken(int prompt_tokens, double seconds) {
  m_->prompt_tokens->Increment(static_cast<double>(prompt_tokens));
  m_->time_to_first_token_seconds->Observe(seconds);
}

void PrometheusObserver::OnSequenceStep(int tokens) {
  m_->generation_tokens->Increment(tokens);
  m_->decoding_steps->Increment();
  m_->accepted_per_step->Observe(tokens);
}

void PrometheusObserver::OnDraftVerified(int verified, int accepted) {
  m_->drafts->Increment();
  m_->draft_tokens->Increment(verified);
  m_->accepted_tokens->Increment(accepted);
  const size_t positions = m_->accepted_per_position.size();
  for (int d = 1; d <= accepted; ++d) {
    m_->accepted_per_position[std::min<size_t>(d, positions) - 1]->Increment();
  }
}

void PrometheusObserver::OnDraftSourceVerified(engine::DraftSourceTag source,
                                               int verified, int accepted) {
  const size_t t = static_cast<size_t>(source);
  if (t >= m_->draft_tokens_per_source.size()) return;
  m_->draft_tokens_per_source[t]->Increment(verified);
  m_->accepted_tokens_per_source[t]->Increment(accepted);
}

void PrometheusObserver::OnCostGate(GatedMechanism mechanism, bool ran) {
  m_->cost_gate_steps[static_cast<size_t>(mechanism)][ran ? 1 : 0]->Increment();
}

void PrometheusObserver::OnDraftCall(double seconds, int64_t new_failures,
                                     bool available) {
  m_->draft_rpc_seconds->Observe(seconds);
  m_->draft_rpc_failures->Increment(static_cast<double>(new_failures));
  m_->draftsvc_up->Set(available ? 1 : 0);
}

void PrometheusObserver::OnAssistantPasses(double seconds, int64_t passes) {
  m_->assistant_seconds->Increment(seconds);
  m_->assistant_passes->Increment(static_cast<double>(passes));
  // Time decoding paid for its drafts, like the forward pass it precedes.
  m_->decode_seconds->Increment(seconds);
}

void PrometheusObserver::OnStep(const StepReport& step) {
  m_->forward_seconds->Observe(step.forward_seconds);
  m_->batch_sequences->Observe(static_cast<double>(step.batch_sequences));
  if (step.decoding_sequences > 0) {
    m_->plain_equivalent_seconds->Increment(step.plain_equivalent_seconds);
    m_->decode_seconds->Increment(step.forward_seconds);
  }
  m_->step_seconds->Observe(step.step_seconds);
  if (step_cost_.size() != step.step_cost.size()) {
    step_cost_.clear();
    for (const auto& [tokens, seconds] : step.step_cost) {
      step_cost_.emplace_back(tokens, m_->step_cost_seconds->WithLabels(
                                          {m_->model, absl::StrCat(tokens)}));
    }
  }
  for (size_t i = 0; i < step_cost_.size(); ++i) {
    step_cost_[i].second->Set(step.step_cost[i].second);
  }
}

void PrometheusObserver::OnOccupancy(int running, int queued,
                                     int64_t kv_tokens) {
  m_->running->Set(static_cast<double>(running));
  m_->waiting->Set(static_cast<double>(queued));
  m_->kv_cache_tokens->Set(static_cast<double>(kv_tokens));
}

void PrometheusObserver::OnPrefixLookup(int prompt_tokens, int hit_tokens) {
  m_->prefix_lookup_tokens->Increment(prompt_tokens);
  m_->prefix_hit_tokens->Increment(hit_tokens);
}

void PrometheusObserver::OnPrefixCacheState(int64_t bytes,
                                            int64_t capacity_bytes,
                                            int64_t new_evictions) {
  m_->prefix_cache_bytes->Set(static_cast<double>(bytes));
  m_->prefix_cache_capacity_bytes->Set(static_cast<double>(capacity_bytes));
  m_->prefix_evictions->Increment(static_cast<double>(new_evictions));
}

}  // namespace lookahead::verifysvc
