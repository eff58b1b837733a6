// DraftObserver: what drafting reports as it runs, for metrics: draft
// tokens verified and accepted (in total and per source), the cost gates'
// decisions and the draft calls. SequenceDrafter and DraftPlanner call it;
// the scheduler's SchedulerObserver extends it.
//
// Thread-safety: called from the scheduler thread only.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_OBSERVER_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_OBSERVER_H_

#include <cstdint>

#include "engine/model/draft_tree.h"

namespace lookahead::verifysvc {

// The draft mechanisms that cost time of their own, each behind a per
// sequence CostGate (verifysvc/drafts/cost_gate.h).
enum class GatedMechanism { kJacobiWindow = 0, kAssistant = 1 };
constexpr int kNumGatedMechanisms = 2;
// "jacobi_window" or "assistant": the metrics label.
inline const char* GatedMechanismName(GatedMechanism m) {
  return m == GatedMechanism::kJacobiWindow ? "jacobi_window" : "assistant";
}

class DraftObserver {
 public:
  virtual ~DraftObserver() = default;
  // A step verified `verified` (>= 1) draft tokens of one sequence; the
  // first `accepted` reached its output.
  virtual void OnDraftVerified(int verified, int accepted) {}
  // Of those, `source` proposed `verified` (>= 1) and `accepted` of its
  // tokens reached the output (once per source per sequence step; a node of
  // several sources counts for each).
  virtual void OnDraftSourceVerified(engine::DraftSourceTag source,
                                     int verified, int accepted) {}
  // One sequence step's gate decision: the mechanism ran, or was skipped
  // because it did not pay (or waits for its next probe).
  virtual void OnCostGate(GatedMechanism mechanism, bool ran) {}
  // A draft call that did work: its duration, failures it added, health.
  virtual void OnDraftCall(double seconds, int64_t new_failures,
                           bool available) {}
  // The verifier's own assistant model (--assistant_model) ran `passes`
  // forward passes taking `seconds` in all during one step's drafting.
  virtual void OnAssistantPasses(double seconds, int64_t passes) {}
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_OBSERVER_H_
