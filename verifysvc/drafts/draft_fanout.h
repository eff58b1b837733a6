// DraftFanout: the one draft interface the drafting layer (DraftPlanner,
// SequenceDrafter) sees. Opens every configured DraftSource for a sequence,
// passes emitted tokens on, fans each step's asks out to every source in one
// Propose, and unions their trees by priority within each budget
// (MergeDraftTrees), or best first when every tree is scored
// (MergeScoredDraftTrees). With one source it is a
// pass-through.
//
// Not a mixer, hence the name: the one place drafts are mixed (ranked by
// calibrated acceptance across tries, n-gram pools and the assistant) is
// draftsvc's MixDrafts (draftsvc/mix/draft_mix.h); this only fans out to the
// verifier's sources and keeps a priority union for more than one.
//
// Thread-safety: as DraftSource (scheduler thread; Stats from any thread).
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_FANOUT_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_FANOUT_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "verifysvc/drafts/draft_source.h"

namespace lookahead::verifysvc {

// Merges `trees` (in priority order) into one tree of at most `budget`
// nodes: a node whose path from the root equals a node already taken is
// shared (its primary source is the first tree's; its source set the union
// of every tree's that proposed it), others are appended in each
// tree's order, so a higher-priority tree keeps all its nodes that fit.
// The result is topologically ordered, with no two siblings of one token
// (so parallel chains from several sources become one tree; with a single
// source the fanout does not merge, and a parallel draft stays parallel).
engine::DraftTree MergeDraftTrees(absl::Span<const engine::DraftTree> trees,
                                  int budget);

// The same union for trees that all carry scores (empty trees aside): a
// node several trees proposed keeps the highest score, and the result lists
// every node best first (ties: the shallower first), so its prefix of
// `budget` nodes is the best tree of that size from all of them and the
// planner's cut by score applies to the merged tree.
engine::DraftTree MergeScoredDraftTrees(
    absl::Span<const engine::DraftTree> trees, int budget);

class DraftFanout {
 public:
  // `sources` (not owned; must outlive the fanout) in priority order. No
  // sources: a fanout that never drafts. Trees are cut to their valid prefix
  // (ids in [0, vocab_size), parents in [-1, i)), so a faulty source costs
  // its own drafts, never the batch's forward pass.
  //
  // `cascade`: a source sends a new request (DraftAsk::refresh) only for
  // the sequences every source before it left without a tree this step,
  // and every kCascadeRefresh-th step of the others; what it already has
  // is used every step. On cores the verifier shares, a draftsvc round
  // trip costs the pass CPU time even when nothing waits for it, so the
  // free in-process source goes first and draftsvc fills the steps where
  // the sequence's own text has nothing, while what its namespace knows
  // (an earlier answer to the same question) still reaches the sequence.
  DraftFanout(std::vector<DraftSource*> sources, int32_t vocab_size,
              bool cascade = false)
      : sources_(std::move(sources)),
        vocab_size_(vocab_size),
        cascade_(cascade) {}

  DraftFanout(const DraftFanout&) = delete;
  DraftFanout& operator=(const DraftFanout&) = delete;

  bool empty() const { return sources_.empty(); }

  // Opens every source for the sequence; returns its handle, or 0 if no
  // source drafts it.
  int64_t Open(const DraftPolicy& policy, absl::Span<const int32_t> prompt);
  void Observe(int64_t handle, absl::Span<const int32_t> tokens);
  // True iff some source of the sequence wants its verify predictions.
  bool WantsPredictions(int64_t handle) const;
  // Passes `predictions` to every source of the sequence that wants them.
  void ObserveVerified(int64_t handle, const VerifiedPredictions& predictions);
  // Passes `ngrams` to every source of the sequence.
  void ObserveNgrams(int64_t handle,
                     absl::Span<const std::vector<int32_t>> ngrams);
  // The first source failure of the sequence (DraftSource::Failure), or OK.
  absl::Status Failure(int64_t handle) const;
  // True iff every source of the sequence answered its open
  // (DraftSource::OpenAnswered); true for unknown handles.
  bool OpenAnswered(int64_t handle) const;
  // DraftSource::WaitOpened of every source of the sequence, one deadline.
  void WaitOpened(int64_t handle, absl::Time deadline) const;
  // One valid tree per ask within ask.budget. Sets *called iff some source
  // did work worth timing.
  std::vector<engine::DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                         bool* called);
  void Close(int64_t handle);

  // The sources' costs summed: what drafting one step costs.
  DraftCost cost() const;
  // Health summed over sources (available iff all are).
  DraftSourceStats Stats() const;
  // Every source's DraftSource::TakeCallSeconds, in source order.
  std::vector<double> TakeCallSeconds();

 private:
  static constexpr int kCascadeRefresh = 4;

  const std::vector<DraftSource*> sources_;
  const int32_t vocab_size_;
  const bool cascade_;
  // Per sequence: Propose calls that asked it for tokens (cascade).
  std::map<int64_t, int64_t> asked_steps_;
  // Per sequence: each source's handle (0: that source does not draft it).
  std::map<int64_t, std::vector<int64_t>> handles_;
  int64_t next_handle_ = 1;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_FANOUT_H_
