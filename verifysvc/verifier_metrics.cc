#include "verifysvc/verifier_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lookahead::verifysvc {

absl::StatusOr<std::unique_ptr<VerifierMetrics>> VerifierMetrics::Create(
    metrics::Registry* registry, const std::string& model, int max_position) {
  auto m = std::make_unique<VerifierMetrics>();
  const std::vector<std::string> by_model = {model};
  auto counter =
      [&](const std::string& name,
          const std::string& help) -> absl::StatusOr<metrics::Counter*> {
    ASSIGN_OR_RETURN(metrics::CounterFamily * family,
                     registry->AddCounter(name, help, {"model"}));
    return family->WithLabels(by_model);
  };
  auto gauge = [&](const std::string& name,
                   const std::string& help) -> absl::StatusOr<metrics::Gauge*> {
    ASSIGN_OR_RETURN(metrics::GaugeFamily * family,
                     registry->AddGauge(name, help, {"model"}));
    return family->WithLabels(by_model);
  };
  auto histogram =
      [&](const std::string& name, const std::string& help,
          std::vector<double> bounds) -> absl::StatusOr<metrics::Histogram*> {
    ASSIGN_OR_RETURN(
        metrics::HistogramFamily * family,
        registry->AddHistogram(name, help, {"model"}, std::move(bounds)));
    return family->WithLabels(by_model);
  };

  ASSIGN_OR_RETURN(metrics::CounterFamily * requests,
                   registry->AddCounter("lookahead_requests_total",
                                        "Generate requests by outcome.",
                                        {"model", "outcome"}));
  m->finished = requests->WithLabels({model, "finished"});
  m->cancelled = requests->WithLabels({model, "cancelled"});
  m->rejected = requests->WithLabels({model, "rejected"});
  m->failed = requests->WithLabels({model, "failed"});
  ASSIGN_OR_RETURN(metrics::CounterFamily * success,
                   registry->AddCounter("lookahead_request_success_total",
                                        "Finished requests by finish reason.",
                                        {"model", "finished_reason"}));
  m->finished_length = success->WithLabels({model, "length"});
  m->finished_eos = success->WithLabels({model, "eos"});
  m->finished_stop = success->WithLabels({model, "stop"});

  ASSIGN_OR_RETURN(m->prompt_tokens, counter("lookahead_prompt_tokens_total",
                                             "Prompt tokens prefilled."));
  ASSIGN_OR_RETURN(m->generation_tokens,
                   counter("lookahead_generation_tokens_total",
                           "Tokens generated (streamed to clients)."));
  ASSIGN_OR_RETURN(m->decoding_steps,
                   counter("lookahead_decoding_steps_total",
                           "Per-sequence forward passes that emitted tokens; "
                           "EDL = generation tokens / decoding steps."));
  ASSIGN_OR_RETURN(m->accepted_per_step,
                   histogram("lookahead_accepted_tokens_per_step",
                             "Tokens emitted per decoding step (EDL).",
                             {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 33}));
  ASSIGN_OR_RETURN(m->drafts,
                   counter("lookahead_spec_decode_num_drafts_total",
                           "Decoding steps that verified a non-empty draft."));
  ASSIGN_OR_RETURN(m->draft_tokens,
                   counter("lookahead_spec_decode_num_draft_tokens_total",
                           "Draft tokens verified."));
  ASSIGN_OR_RETURN(m->accepted_tokens,
                   counter("lookahead_spec_decode_num_accepted_tokens_total",
                           "Draft tokens accepted (emitted)."));
  ASSIGN_OR_RETURN(
      metrics::CounterFamily * per_position,
      registry->AddCounter(
          "lookahead_spec_decode_num_accepted_tokens_per_pos_total",
          "Draft tokens accepted at each depth of the draft tree.",
          {"model", "position"}));
  for (int d = 1; d <= max_position; ++d) {
    m->accepted_per_position.push_back(
        per_position->WithLabels({model, absl::StrCat(d)}));
  }

  const std::vector<double> latency =
      metrics::ExponentialBuckets(0.001, 2, 14);  // 1 ms .. 8 s
  ASSIGN_OR_RETURN(
      m->step_seconds,
      histogram("lookahead_step_duration_seconds",
                "One scheduler step: drafts, forward, accept.", latency));
  ASSIGN_OR_RETURN(m->forward_seconds,
                   histogram("lookahead_forward_duration_seconds",
                             "One batched forward pass.", latency));
  ASSIGN_OR_RETURN(m->draft_rpc_seconds,
                   histogram("lookahead_draft_rpc_duration_seconds",
                             "One batched draftsvc Step call.",
                             metrics::ExponentialBuckets(0.0001, 2, 12)));
  ASSIGN_OR_RETURN(m->draft_rpc_failures,
                   counter("lookahead_draft_rpc_failures_total",
                           "draftsvc Step calls that failed or timed out "
                           "(those steps ran without drafts)."));
  ASSIGN_OR_RETURN(
      m->batch_sequences,
      histogram("lookahead_batch_sequences", "Sequences in one forward pass.",
                {1, 2, 4, 8, 16, 32, 64}));
  ASSIGN_OR_RETURN(
      m->time_to_first_token_seconds,
      histogram("lookahead_time_to_first_token_seconds",
                "From a request's arrival to its first token.", latency));
  ASSIGN_OR_RETURN(m->request_tokens_per_second,
                   histogram("lookahead_request_tokens_per_second",
                             "Output tokens per second of each finished "
                             "request (arrival to last token).",
                             metrics::ExponentialBuckets(1, 2, 12)));
  ASSIGN_OR_RETURN(m->plain_equivalent_seconds,
                   counter("lookahead_plain_equivalent_seconds_total",
                           "Estimated time plain decoding would have needed "
                           "for the emitted tokens (speedup numerator)."));
  ASSIGN_OR_RETURN(m->decode_seconds,
                   counter("lookahead_decode_seconds_total",
                           "Forward time of decoding steps (speedup "
                           "denominator)."));
  ASSIGN_OR_RETURN(m->running, gauge("lookahead_num_requests_running",
                                     "Sequences in the batch."));
  ASSIGN_OR_RETURN(m->waiting, gauge("lookahead_num_requests_waiting",
                                     "Requests queued for a batch slot."));
  ASSIGN_OR_RETURN(m->kv_cache_tokens,
                   gauge("lookahead_kv_cache_tokens",
                         "KV cache slots allocated to running sequences."));
  ASSIGN_OR_RETURN(m->kv_cache_capacity_tokens,
                   gauge("lookahead_kv_cache_capacity_tokens",
                         "KV cache slots the batch may use at most "
                         "(max_running x max_context_tokens)."));
  ASSIGN_OR_RETURN(m->draftsvc_up,
                   gauge("lookahead_draftsvc_up",
                         "1 if the last draftsvc call succeeded, else 0."));
  return m;
}

}  // namespace lookahead::verifysvc
