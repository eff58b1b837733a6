// DraftPacer: one sequence's draft quality and probing, the state behind
// its DraftCandidate each step (draft_budget.h). Quality is an exponential
// moving average over drafted steps of QualityOf(accepted, verified); a
// sequence that got no drafts for `probe_interval` steps gets a probe of
// `probe_tokens`, and each probe accepting nothing doubles the interval up
// to `max_probe_interval`, so failing drafts cost ~1% over 128 steps and a
// changed text can win drafts back. A new sequence may start from the state
// an earlier one of its namespace ended in (Inherit) instead of the prior.
// Thread-compatible.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_PACER_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_PACER_H_

#include "verifysvc/drafts/draft_budget.h"

namespace lookahead::verifysvc {

struct DraftPacerOptions {
  // Prior draft quality of a new sequence. The first draft's size follows
  // from it and the measured step costs: on the 2-core CPU with the packed
  // matmul kernel 0.9 buys a 15-token draft (16 tokens cost 1.8x one); on a
  // GPU a full one. A hit then raises it (RAG answers quoting their prompt
  // draft fully within a step or two), misses lower it (a request whose
  // drafts all fail pays ~2 steps' worth before its drafts stop).
  double prior_quality = 0.9;
  // Weight of the latest drafted step in the moving average.
  double ema_weight = 0.3;
  // A 1-token probe costs a CPU ~0.6 of a step (a 2-row pass).
  int probe_interval = 8;
  int max_probe_interval = 128;
  int probe_tokens = 1;
};

class DraftPacer {
 public:
  explicit DraftPacer(const DraftPacerOptions& options)
      : options_(options),
        quality_(options.prior_quality),
        probe_interval_(options.probe_interval) {}

  // This step's candidate: at most `cap` tokens (the request's decoding
  // length, the room in its cache), branches at most `depth` deep; a probe
  // floor when it is due. Marks the step as a probe.
  DraftCandidate Candidate(int cap, int depth);

  // The step verified `verified` draft tokens (0: it got none) and
  // accepted `accepted` of them.
  void Update(int verified, int accepted);
  // The step asked for drafts and got none worth verifying (the source had
  // nothing, or nothing scored high enough): as a drafted step that
  // accepted nothing for the quality (so a text the sources cannot match
  // stops costing a round trip per step), as an undrafted one for probing.
  void Missed();

  // Starts from where `from` (a sequence of the same namespace that ended)
  // left off: its quality and probe interval. The first probe still comes
  // after options.probe_interval undrafted steps, however long the interval
  // grew, so a new text that drafts well is found early; after that the
  // inherited interval applies. Call before the first Candidate.
  void Inherit(const DraftPacer& from);

  double quality() const { return quality_; }
  int probe_interval() const { return probe_interval_; }
  bool probing() const { return probing_; }

 private:
  const DraftPacerOptions options_;
  double quality_;
  int steps_without_draft_ = 0;
  int probe_interval_;
  bool probing_ = false;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_PACER_H_
