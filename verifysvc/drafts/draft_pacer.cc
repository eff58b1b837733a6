#include "verifysvc/drafts/draft_pacer.h"

#include <algorithm>

namespace lookahead::verifysvc {

DraftCandidate DraftPacer::Candidate(int cap, int depth) {
  DraftCandidate c;
  c.cap = std::max(cap, 0);
  probing_ = steps_without_draft_ >= probe_interval_;
  if (probing_) c.floor = std::min(options_.probe_tokens, c.cap);
  c.quality = quality_;
  c.depth = depth;
  return c;
}

void DraftPacer::Update(int verified, int accepted) {
  if (verified == 0) {
    ++steps_without_draft_;
    return;
  }
  quality_ += options_.ema_weight * (QualityOf(accepted, verified) - quality_);
  steps_without_draft_ = 0;
  if (probing_) {
    probe_interval_ = accepted > 0 ? options_.probe_interval
                                   : std::min(2 * probe_interval_,
                                              options_.max_probe_interval);
  }
}

void DraftPacer::Missed() {
  quality_ -= options_.ema_weight * quality_;
  if (probing_) {
    // The next probe comes a whole (doubled) interval later, as after a
    // probe that was verified and missed; counting on from here would probe
    // every step once the interval stops growing.
    probe_interval_ =
        std::min(2 * probe_interval_, options_.max_probe_interval);
    steps_without_draft_ = 0;
  } else {
    ++steps_without_draft_;
  }
}

void DraftPacer::Inherit(const DraftPacer& from) {
  quality_ = from.quality_;
  probe_interval_ = from.probe_interval_;
  steps_without_draft_ =
      std::max(0, probe_interval_ - options_.probe_interval);
  probing_ = false;
}

}  // namespace lookahead::verifysvc
