// DraftPlanner: each step's drafts for every decoding sequence, in one go.
// It opens a SequenceDrafter per sequence (starting from the verdict the
// last sequence of its namespace left: its cost gates, and its pacers if
// its drafts never held), and per step: lets every drafter decide its
// scratch rows, splits the step's draft budget among the sequences
// (AllocateDraftTokens over their pacers' candidates), asks the sources for
// every tree in ONE DraftFanout::Propose, and cuts the scored trees to what
// pays for its rows (TrimByScore). The scheduler sees only this and
// SequenceDrafter, never a source.
//
// Thread-safety: used by the scheduler thread; Stats() from any thread.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_PLANNER_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_PLANNER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "engine/model/sampler.h"
#include "verifysvc/drafts/cost_gate.h"
#include "verifysvc/drafts/draft_budget.h"
#include "verifysvc/drafts/draft_fanout.h"
#include "verifysvc/drafts/draft_observer.h"
#include "verifysvc/drafts/draft_pacer.h"
#include "verifysvc/drafts/sequence_drafter.h"

namespace lookahead::verifysvc {

// One decoding sequence's part of a step.
struct SequenceDraft {
  engine::DraftTree tree;  // to verify after its last token (may be empty)
  int asked = 0;           // the draft tokens asked of its sources
  // Not OK: its sources can never serve it as asked (SequenceDrafter::
  // Failure); the request ends with this status and its tree is not run.
  absl::Status failure;
};

// What drafting adds to one step's pass.
struct StepDrafts {
  std::vector<SequenceDraft> drafts;  // per decoding sequence
  int scratch_rows = 0;               // over all sequences
  int requested = 0;  // draft tokens asked in a call that did work
};

class DraftPlanner {
 public:
  // `fanout` (the sources), `cost` (the pass's cost by rows, which the
  // scheduler keeps current) and `observer` are not owned and must outlive
  // the planner. REQUIRES: fanout and cost not null.
  DraftPlanner(DraftFanout* fanout, const StepCostModel* cost,
               int32_t vocab_size, DrafterOptions options,
               DraftObserver* observer);

  DraftPlanner(const DraftPlanner&) = delete;
  DraftPlanner& operator=(const DraftPlanner&) = delete;

  // Opens the sources for a sequence drafted under `policy` (REQUIRES:
  // policy.enabled()) with this prompt, admitted now; null iff no source
  // drafts it. The drafter must be closed (Close) before the planner goes.
  std::unique_ptr<SequenceDrafter> Open(const DraftPolicy& policy,
                                        const engine::SamplingParams& sampling,
                                        absl::Span<const int32_t> prompt);
  // The sequence ended: keeps what its drafter measured as its namespace's
  // verdict and closes its sources. Idempotent.
  void Close(SequenceDrafter* drafter);

  // Drafts one step. `drafters`: per decoding sequence, its drafter (null:
  // not drafted); `rooms`: the draft rows its cache has room for.
  // `prefill_tokens`: prompt rows the pass holds; `max_step_tokens`: the
  // most rows it may hold; `seconds_per_token`: what a token costs at the
  // current throughput (> 0).
  StepDrafts Draft(absl::Span<SequenceDrafter* const> drafters,
                   absl::Span<const int> rooms, int prefill_tokens,
                   int max_step_tokens, double seconds_per_token);

  // The sources' health.
  DraftSourceStats Stats() const { return context_.fanout->Stats(); }

 private:
  // Per namespace, what a new sequence starts from (CostGate::Inherit,
  // DraftPacer::Inherit).
  struct Verdict {
    CostGate window;
    CostGate assistant;
    std::optional<DraftPacer> pacers[2];  // as SequenceDrafter::pacers_
  };

  // Calls the sources for `asks` (ONE Propose), timing the call.
  std::vector<engine::DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                         int* requested);
  // Cuts each scored tree of the drafts that did not fail to what pays for
  // its rows (TrimByScore). `base`: the rows the pass holds besides them.
  void Trim(absl::Span<SequenceDrafter* const> drafters, int base,
            int max_step_tokens, std::vector<SequenceDraft>* drafts) const;
  void KeepVerdict(const SequenceDrafter& drafter);

  // A new namespace's first assistant probe comes after at most this many
  // base probe intervals (CostGateOptions::probe_interval).
  static constexpr int kPriorProbeIntervals = 4;

  DraftingContext context_;  // const after construction
  // Moving average of the draft calls that asked for tokens; 0 until one.
  double draft_call_seconds_ = 0;
  // The sources' failures already reported to the observer.
  // What the observer has been told of the sources' Stats(): their
  // failures up to the last draft call, the in-process model's counters up
  // to the last step (it runs only inside Propose).
  DraftSourceStats reported_;
  std::map<std::string, Verdict> verdicts_;
  // The assistant's gate of the last sequence that ran it, in any
  // namespace: where a sequence's namespace has no verdict yet, it starts
  // from this one (its probe interval capped at kPriorProbeIntervals)
  // instead of running the assistant to find out. Every such run opens an
  // assistant session, which prefills the whole prompt on shared cores.
  CostGate assistant_prior_;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_PLANNER_H_
