// The mixed draft tree: every draft source proposes a candidate tree below
// the session's root, and MixDrafts merges them into one tree of at most
// decoding_length nodes, best first by the estimated probability that a
// node is accepted (per-source, per-depth, per-rank rates from
// SourceCalibration). A new source (the assistant model) plugs in by
// producing a CandidateTree; the mixer does not know where it came from.
// This is the system's one mixer: it sees every source's candidates and the
// calibration. The verifier's DraftFanout (verifysvc/drafts/draft_fanout.h)
// only fans a step out to its configured sources and unions their trees.
//
// Thread-safety: pure functions of their arguments. NgramCandidates reads
// the pools through their own (thread-safe) Lookup.
#ifndef LOOKAHEAD_DRAFTSVC_MIX_DRAFT_MIX_H_
#define LOOKAHEAD_DRAFTSVC_MIX_DRAFT_MIX_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "draftsvc/mix/draft_tree_builder.h"
#include "draftsvc/mix/source_calibration.h"
#include "draftsvc/sources/ngram_pool.h"

namespace lookahead::draftsvc {

// One node a source proposes.
struct CandidateNode {
  int32_t token = 0;
  int32_t parent = -1;  // Index in the same CandidateTree; -1: the root.
  // Rank among its siblings in this source's preference, 0 = best.
  int32_t rank = 0;
  // Context tokens the source matched above the branch (DraftNode.matches;
  // 0: no such evidence).
  int32_t match = 0;
};

// One source's proposal. Invariant: nodes[i].parent < i. A source may
// propose more nodes than the budget (the mixer chooses); duplicate
// siblings are merged.
struct CandidateTree {
  CandidateSource source = CandidateSource::kOutput;
  std::vector<CandidateNode> nodes;
};

// A tree given as parallel lists (tokens[i] below parents[i], parents[i] in
// [-1, i)) as `source`'s candidates, sibling ranks by `scores` (descending,
// ties by position): e.g. the assistant's draft with its probabilities.
// Nodes with a parent outside [-1, i), and their descendants, are dropped;
// REQUIRES: the three lists have the same length.
CandidateTree RankedCandidates(CandidateSource source,
                               absl::Span<const int32_t> tokens,
                               absl::Span<const int32_t> parents,
                               absl::Span<const float> scores);

// A BuildTrieDraft result as `source`'s candidates: sibling ranks by score
// (descending, ties by position in `draft`), each node's match length.
CandidateTree TrieCandidates(const MixedDraft& draft, CandidateSource source);

// The n-gram pools' candidates below `context`'s end (oldest first), best
// first by calibrated probability (CandidateSource::kNgram rates of `rates`),
// at most `budget` nodes no deeper than `branch_length`. A node's children
// are the rest of the continuation that proposed it, then what the pools
// hold for the context extended by the node's path (so 1-token recycled
// predictions chain into deep branches), each pool's Lookup merged in pool
// order (`pools` best first; null pools skipped), `per_node` results each.
// A node's match is the longest pool key behind it (the rest of a
// continuation keeps its key's length), and its rate is that match's.
CandidateTree NgramCandidates(absl::Span<const NgramPool* const> pools,
                              absl::Span<const int32_t> context,
                              const CalibrationTable& rates, int32_t budget,
                              int32_t branch_length, int32_t per_node);

struct MixRequest {
  int32_t decoding_length = 0;  // Most nodes returned (>= 0).
  int32_t branch_length = 8;    // Deepest node returned (>= 1).
  DraftMode mode = DraftMode::kHierarchical;
};

// Merges the candidate trees into one: a node for every distinct token path
// any source proposed (within branch_length), with
//   c(node) = 1 - prod over its sources s of
//             (1 - rate(s, depth, rank_s, match_s)),
//   p(node) = p(parent) x c(node), p(root) = 1,
// and keeps the decoding_length nodes of highest p (ancestors before
// descendants: p never grows with depth; ties: shallower, then smaller
// token, then first proposed). Each returned node carries score = p, its
// source_set, its per-source ranks, and source = the one of its sources
// with the highest rate (ties: lower CandidateSource). kParallel lays the
// selection out as chains (LayOutAsChains); kOff returns nothing.
MixedDraft MixDrafts(absl::Span<const CandidateTree> candidates,
                     const CalibrationTable& rates, const MixRequest& request);

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_MIX_DRAFT_MIX_H_
