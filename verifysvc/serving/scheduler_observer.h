// SchedulerObserver: what the scheduler reports as it runs, for metrics,
// including what its drafting reports (DraftObserver). The scheduler calls
// it; PrometheusObserver (prometheus_observer.h) exports Prometheus series;
// tests record the calls.
//
// Thread-safety: OnRequestEnded may be called from any thread (rejections
// happen on RPC threads); everything else from the scheduler thread.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_SCHEDULER_OBSERVER_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_SCHEDULER_OBSERVER_H_

#include <cstdint>
#include <utility>

#include "absl/types/span.h"
#include "verifysvc/drafts/draft_observer.h"
#include "verifysvc/serving/output.h"

namespace lookahead::verifysvc {

enum class RequestOutcome { kFinished, kCancelled, kRejected, kFailed };

// One step of the scheduler: a forward pass and what it did.
struct StepReport {
  int batch_sequences = 0;     // sequences in the forward pass
  int decoding_sequences = 0;  // of them, decoding (not prefilling)
  int64_t batch_tokens = 0;    // rows in the pass
  double forward_seconds = 0;
  double step_seconds = 0;  // plan + drafts + forward + accept + emit
  // Plain decoding's estimated time for the tokens this step's decoding
  // sequences emitted (each token at the cost of a one-token-per-sequence
  // step): the speedup estimate's numerator. 0 without decoding sequences.
  double plain_equivalent_seconds = 0;
  // The cost model after this pass: (tokens in a pass, seconds), what the
  // draft budget and the cut charge a step (StepCostModel::points()).
  absl::Span<const std::pair<int, double>> step_cost;
};

class SchedulerObserver : public DraftObserver {
 public:
  virtual void OnRequestEnded(RequestOutcome outcome) {}
  // A finished request (length, EOS or stop string) and its usage.
  virtual void OnRequestFinished(const Usage& usage) {}
  // A prompt is prefilled: its tokens, and arrival to first token.
  virtual void OnFirstToken(int prompt_tokens, double seconds) {}
  // One decoding step of one sequence kept `tokens` tokens.
  virtual void OnSequenceStep(int tokens) {}
  virtual void OnStep(const StepReport& step) {}
  // A new sequence's prompt of `prompt_tokens` found its first
  // `hit_tokens` in the prefix cache.
  virtual void OnPrefixLookup(int prompt_tokens, int hit_tokens) {}
  // After a prompt's blocks went into the prefix cache: bytes held, the
  // cap, and blocks evicted since the last report.
  virtual void OnPrefixCacheState(int64_t bytes, int64_t capacity_bytes,
                                  int64_t new_evictions) {}
  // After admission: running and queued sequences, KV cache slots held.
  virtual void OnOccupancy(int running, int queued, int64_t kv_tokens) {}
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_SCHEDULER_OBSERVER_H_
