// TrimByScore: how much of each sequence's scored draft tree to verify, so
// that the step's expected emitted tokens per second is highest.
//
// draftsvc returns each tree best first: node i's score is its estimated
// probability of being accepted (the product of its path's calibrated
// acceptance rates), nodes in the order a best-first expansion took them,
// so scores never increase along the list and every prefix is a tree. A
// prefix of d nodes is then expected to add the sum of its scores in
// accepted tokens. Where AllocateDraftTokens (draft_budget.h) sizes drafts
// before retrieval from one quality number per sequence, this sizes them
// after, from every node's own estimate: a tree whose fourth node is a long
// shot stops at three. Pure function; thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_TRIM_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_TRIM_H_

#include <vector>

#include "absl/types/span.h"
#include "verifysvc/drafts/draft_budget.h"

namespace lookahead::verifysvc {

// One sequence's retrieved tree, as the trimmer sees it.
struct ScoredDraft {
  // Per node, in tree order: the estimated probability that it is accepted.
  // Values outside [0, 1] (and NaN) are clamped; a score above an earlier
  // one is lowered to it (a node is never likelier than the nodes before
  // it in best-first order).
  absl::Span<const float> scores;
  // Multiplies every score: the sequence's own correction for a calibration
  // made over its whole namespace (its accepted tokens over its predicted
  // ones, recently). 1 = trust the scores.
  double scale = 1.0;
  // Nodes it must keep (a probe), <= scores.size().
  int floor = 0;
};

// Per draft, how many leading nodes to verify (floor <= k <= size), with
// the total at most max_draft_tokens beyond the floors, maximizing
//   (drafts.size() + expected accepted) / cost.Seconds(base_tokens + kept).
// base_tokens: the rows the pass holds anyway (a root per decoding sequence
// plus prefill chunks). Greedy over all nodes by scaled score, which is
// optimal because each draft's gains are non-increasing.
std::vector<int> TrimByScore(const StepCostModel& cost, int base_tokens,
                             absl::Span<const ScoredDraft> drafts,
                             int max_draft_tokens);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_TRIM_H_
