// PrometheusObserver: the SchedulerObserver that exports verifysvc's
// Prometheus series (VerifierMetrics).
//
// VerifierMetrics: verifysvc's Prometheus series, created once in a
// metrics::Registry with the model's name as the `model` label; the
// scheduler updates them through the cached pointers (lock-free).
// Names follow Prometheus conventions and, where vLLM has a peer, its names
// (lookahead_ for vllm:). The speedup estimate is
//   rate(lookahead_plain_equivalent_seconds_total)
//     / rate(lookahead_decode_seconds_total)
// where each step adds its measured forward time (and the passes of the
// verifier's own assistant, which drafted for it) to the second and, to the
// first, the time plain decoding would need for the tokens it emitted: the
// tokens per sequence times the measured cost of a one-token-per-sequence
// step (StepCostModel). That is tokens per step over the cost ratio of the
// step versus a plain step.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_PROMETHEUS_OBSERVER_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_PROMETHEUS_OBSERVER_H_

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "verifysvc/serving/scheduler_observer.h"

namespace lookahead::verifysvc {

struct VerifierMetrics {
  // Registers every series in `registry` (not owned; must outlive this).
  // `max_position`: deepest draft position with its own acceptance series.
  static absl::StatusOr<std::unique_ptr<VerifierMetrics>> Create(
      metrics::Registry* registry, const std::string& model, int max_position);

  // Requests by outcome, and finished ones by reason.
  metrics::Counter* finished = nullptr;
  metrics::Counter* cancelled = nullptr;
  metrics::Counter* rejected = nullptr;
  metrics::Counter* failed = nullptr;
  metrics::Counter* finished_length = nullptr;
  metrics::Counter* finished_eos = nullptr;
  metrics::Counter* finished_stop = nullptr;

  metrics::Counter* prompt_tokens = nullptr;
  metrics::Counter* generation_tokens = nullptr;
  metrics::Counter* decoding_steps = nullptr;
  metrics::Histogram* accepted_per_step = nullptr;  // tokens per step

  metrics::Counter* drafts = nullptr;  // steps verifying a non-empty draft
  metrics::Counter* draft_tokens = nullptr;
  metrics::Counter* accepted_tokens = nullptr;
  // [d - 1]: draft tokens accepted at depth d (the last entry: deeper too).
  std::vector<metrics::Counter*> accepted_per_position;
  // [tag]: draft tokens verified / accepted that engine::DraftSourceTag
  // `tag` proposed (label source="unknown", "trie", "ngram", "assistant").
  std::vector<metrics::Counter*> draft_tokens_per_source;
  std::vector<metrics::Counter*> accepted_tokens_per_source;
  // [mechanism][ran]: lookahead_cost_gate_steps_total.
  std::vector<std::array<metrics::Counter*, 2>> cost_gate_steps;

  metrics::Histogram* step_seconds = nullptr;
  metrics::Histogram* forward_seconds = nullptr;
  metrics::Histogram* draft_rpc_seconds = nullptr;
  metrics::Counter* draft_rpc_failures = nullptr;
  metrics::Histogram* batch_sequences = nullptr;
  metrics::Histogram* time_to_first_token_seconds = nullptr;
  metrics::Histogram* request_tokens_per_second = nullptr;
  metrics::Counter* plain_equivalent_seconds = nullptr;
  metrics::Counter* decode_seconds = nullptr;
  // The verifier's own assistant model: its passes and their seconds.
  metrics::Counter* assistant_seconds = nullptr;
  metrics::Counter* assistant_passes = nullptr;
  // lookahead_step_cost_seconds{tokens}: the cost model's points.
  metrics::GaugeFamily* step_cost_seconds = nullptr;
  std::string model;

  metrics::Gauge* running = nullptr;
  metrics::Gauge* waiting = nullptr;
  metrics::Gauge* kv_cache_tokens = nullptr;
  metrics::Gauge* kv_cache_capacity_tokens = nullptr;
  metrics::Gauge* draftsvc_up = nullptr;

  // Prefix cache: prompt tokens looked up and found; bytes held, the cap,
  // and blocks evicted.
  metrics::Counter* prefix_lookup_tokens = nullptr;
  metrics::Counter* prefix_hit_tokens = nullptr;
  metrics::Gauge* prefix_cache_bytes = nullptr;
  metrics::Gauge* prefix_cache_capacity_bytes = nullptr;
  metrics::Counter* prefix_evictions = nullptr;
};

class PrometheusObserver : public SchedulerObserver {
 public:
  // `metrics` is not owned and must outlive the observer.
  explicit PrometheusObserver(VerifierMetrics* metrics) : m_(metrics) {}

  void OnRequestEnded(RequestOutcome outcome) override;
  void OnRequestFinished(const Usage& usage) override;
  void OnFirstToken(int prompt_tokens, double seconds) override;
  void OnSequenceStep(int tokens) override;
  void OnDraftVerified(int verified, int accepted) override;
  void OnDraftSourceVerified(engine::DraftSourceTag source, int verified,
                             int accepted) override;
  void OnCostGate(GatedMechanism mechanism, bool ran) override;
  void OnDraftCall(double seconds, int64_t new_failures,
                   bool available) override;
  void OnAssistantPasses(double seconds, int64_t passes) override;
  void OnStep(const StepReport& step) override;
  void OnOccupancy(int running, int queued, int64_t kv_tokens) override;
  void OnPrefixLookup(int prompt_tokens, int hit_tokens) override;
  void OnPrefixCacheState(int64_t bytes, int64_t capacity_bytes,
                          int64_t new_evictions) override;

 private:
  VerifierMetrics* const m_;
  // step_cost_seconds by the points' token counts, made at the first step.
  std::vector<std::pair<int, metrics::Gauge*>> step_cost_;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_PROMETHEUS_OBSERVER_H_
