// DrafterOptions: how sequences are drafted, the knobs of DraftPlanner and
// SequenceDrafter (pacing, cost gates, asks, recycled predictions, the
// wait for a named source's answer). The scheduler's options extend them.
// Plain values.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFTER_OPTIONS_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFTER_OPTIONS_H_

#include "absl/time/time.h"
#include "verifysvc/drafts/cost_gate.h"
#include "verifysvc/drafts/draft_pacer.h"

namespace lookahead::verifysvc {

// How sequences are drafted: the knobs of DraftPlanner and SequenceDrafter.
struct DrafterOptions {
  // Draft quality prior, moving average and probing (DraftPacerOptions).
  DraftPacerOptions pacing;
  // Pace a sequence's steps whose last tokens repeat its context apart from
  // the others (SuffixRepeat): one DraftPacer for each kind of step.
  bool pace_repeats = true;
  // Charge the measured time of a call to the draft sources (a draftsvc
  // round trip: ~1 ms on the 2-core VM, a quarter of a one-token step) when
  // deciding whether a step asks for drafts at all, so a sequence whose
  // drafts stopped paying stops asking instead of asking for ever smaller
  // gains. Trees are still cut by what their rows cost once they arrive.
  bool charge_draft_calls = true;
  // A new sequence's pacers start from where the last sequence of its
  // namespace left them (DraftPacer::Inherit) if that sequence's drafts
  // never held (none accepted in at least 2 * pacing.probe_interval steps):
  // a namespace whose drafts do not hold (random text, sampling at a high
  // temperature) stops paying the prior's first asks and the early probes
  // on every request. After a sequence whose drafts held at all, the next
  // starts from pacing.prior_quality again (a shorter sequence with none
  // accepted changes nothing); false: every sequence starts from it.
  bool inherit_pacing = true;
  // Token Recycling: the model's top-k predictions at every verified row
  // (root and draft nodes) are handed to the draft sources that want them
  // (DraftSource::ObserveVerified); 0 = off. One top-k over the sequence's
  // verify logits per step.
  int prediction_k = 4;
  // Draft tokens asked of the sources for a sequence the budget gives any
  // (at most its decoding length): the tree then comes back scored and best
  // first, and TrimByScore (verifysvc/drafts/draft_trim.h) keeps the prefix
  // whose nodes' own estimates pay for their rows. 0 = ask exactly the
  // budget and keep the whole tree.
  int draft_ask_tokens = 8;
  // A sequence its pacer gives no draft this step still asks for
  // draft_ask_tokens (its own text's sources and draftsvc; never the
  // assistant) while a one-token pass takes at least this long, and its
  // tree is cut by score as any other. An ask costs about half a
  // millisecond of the shared cores (the sources, the top-k, draftsvc's
  // round trip): under 2% of such a pass, while on a model whose pass is a
  // few milliseconds it cost the adversarial workload 11%
  // (bench/results/free_asks). 0 = never: the pacer alone decides.
  double free_ask_min_pass_seconds = 0.020;
  // The gates of the mechanisms that cost time of their own (the Jacobi
  // window's rows, the assistant's passes): each runs for a sequence only
  // while what it adds pays for what it costs (verifysvc/drafts/cost_gate.h).
  CostGateOptions gate;
  // Share of the assistant's pass seconds (reported by draftsvc per
  // session) charged to the verifier: 1 when draftsvc runs on the
  // verifier's cores (its passes take them from the verify pass), 0 when it
  // has cores of its own (then only its Step latency counts, through the
  // throughput).
  double assistant_cost_share = 1.0;
  // The assistant source is the verifier's own (--assistant_model:
  // AssistantSource, which gates itself and reports its decisions): the
  // per-sequence gate for draftsvc's assistant then neither decides nor
  // counts, so each step's decision is counted once.
  bool assistant_in_process = false;
  // How long a sequence that named its sources holds its first token for
  // the sources' answer to its open (AwaitingOpen), from its admission: a
  // refusal (a named source that is not served) then ends it before any
  // token; a later refusal ends it at its first draft step.
  absl::Duration open_answer_wait = absl::Milliseconds(500);
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFTER_OPTIONS_H_
