// SourceCalibration: one namespace's estimate, per draft source, depth,
// sibling rank and match length, of the probability that a draft node is
// accepted given that its parent was (a root child: given nothing). The
// match length (DraftNode.matches: context tokens a trie matched above the
// branch) separates a continuation backed by a long quote of the prompt, a
// RAG answer copying its passage, from one that only follows the last
// token: measured on the bench's RAG, chat and code outputs, the first
// kind is accepted several times as often, and without it every node of a
// source and depth looked alike to the verifier's trimming. draftsvc learns it
// from the verifiers' accepted tokens, walked down the tree it sent them
// (DraftIndex does the walk), so sources are weighed by what they achieve here,
// not by their raw counts: the mixer scores a node p(parent) x rate.
//
// Each cell keeps exponentially decayed (proposed, accepted) counts over a
// Beta prior: rate = (accepted + s * prior) / (proposed + s), s =
// prior_strength. A cell forgets with every observation of its own
// (decay), so a namespace whose traffic changes re-learns within ~1/(1 -
// decay) observations of a cell.
//
// Thread-safety: all methods are safe to call concurrently (one mutex;
// Observe takes it once per batch, Snapshot once per retrieval).
#ifndef LOOKAHEAD_DRAFTSVC_MIX_SOURCE_CALIBRATION_H_
#define LOOKAHEAD_DRAFTSVC_MIX_SOURCE_CALIBRATION_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "draftsvc/mix/draft_tree_builder.h"

namespace lookahead::draftsvc {

struct CalibrationOptions {
  // Weight of the prior in pseudo-observations. Higher: steadier early
  // estimates, slower to leave the prior. >= 0 (0: no prior once observed).
  double prior_strength = 8.0;
  // Per observation of a cell, its counts are multiplied by this first. 1:
  // never forget. 0.999 is a half-life of ~700 observations of the cell. In
  // (0, 1].
  double decay = 0.999;
};

// The rates of every (source, depth bucket, rank bucket, match bucket) at
// one moment.
class CalibrationTable {
 public:
  // Depths 1..kDepthBuckets have their own cell; deeper ones share the last.
  static constexpr int kDepthBuckets = 16;
  // Ranks 0..kRankBuckets-2 have their own cell; the rest share the last.
  static constexpr int kRankBuckets = 4;
  // Match lengths 0-1 (no evidence beyond the last token), 2, 3-4, 5-8 and
  // longer.
  static constexpr int kMatchBuckets = 5;

  static int DepthBucket(int32_t depth);  // REQUIRES: depth >= 1.
  static int RankBucket(int32_t rank);    // REQUIRES: rank >= 0.
  static int MatchBucket(int32_t match);  // Any value.

  // The rate of a node of `source` at `depth` (>= 1) with sibling `rank`
  // and `match` context tokens matched above its branch.
  float rate(CandidateSource source, int32_t depth, int32_t rank,
             int32_t match = 0) const {
    return rates_[static_cast<int>(source)][DepthBucket(depth)]
                 [RankBucket(rank)][MatchBucket(match)];
  }
  void set_rate(CandidateSource source, int depth_bucket, int rank_bucket,
                int match_bucket, float rate) {
    rates_[static_cast<int>(source)][depth_bucket][rank_bucket]
          [match_bucket] = rate;
  }

  // The documented prior, before any observation:
  //   base(source) / (1 + rank), base: prompt 0.6, output 0.5, assistant
  //   0.5, n-gram 0.35.
  // A continuation copied from the session's own prompt is the strongest
  // evidence (RAG); the namespace's outputs are next; recycled top-k
  // predictions and Jacobi n-grams are the model's guesses (their top-1 is
  // accepted roughly a third of the time in Token Recycling / Lookahead
  // Decoding). Lower-ranked siblings are less likely. Depth and match
  // length start flat: the observations shape them.
  static CalibrationTable Prior();

 private:
  std::array<std::array<std::array<std::array<float, kMatchBuckets>,
                                    kRankBuckets>,
                         kDepthBuckets>,
             kNumCandidateSources>
      rates_{};
};

struct SourceTotals {
  int64_t proposed = 0;  // Nodes of this source sent (CountProposed).
  int64_t judged = 0;    // Nodes of this source judged (Observe).
  int64_t accepted = 0;  // Of those, accepted by the verifier.
};

class SourceCalibration {
 public:
  // One judged node of one source: its parent was accepted (or it is a root
  // child), and it was accepted or not.
  struct Observation {
    CandidateSource source = CandidateSource::kOutput;
    int32_t depth = 1;  // >= 1
    int32_t rank = 0;   // >= 0
    bool accepted = false;
    int32_t match = 0;  // DraftNode.matches of the source
  };

  // REQUIRES: options valid (ValidateOptions in DraftIndex checks them).
  explicit SourceCalibration(CalibrationOptions options = {});

  void Observe(absl::Span<const Observation> observations);
  // Counts the nodes of each source (indexed by CandidateSource) in a tree
  // sent.
  void CountProposed(const std::array<int64_t, kNumCandidateSources>& nodes);
  CalibrationTable Snapshot() const;
  SourceTotals totals(CandidateSource source) const;
  // The current rate of a rank-0 node at depths 1..kDepthBuckets, over
  // every match length (pooled counts).
  std::vector<float> DepthAcceptance(CandidateSource source) const;

 private:
  struct Cell {
    double proposed = 0;
    double accepted = 0;
  };
  const CalibrationOptions options_;
  const CalibrationTable prior_;

  mutable absl::Mutex mu_;
  std::array<
      std::array<std::array<std::array<Cell, CalibrationTable::kMatchBuckets>,
                            CalibrationTable::kRankBuckets>,
                 CalibrationTable::kDepthBuckets>,
      kNumCandidateSources>
      cells_ ABSL_GUARDED_BY(mu_){};
  std::array<SourceTotals, kNumCandidateSources> totals_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_MIX_SOURCE_CALIBRATION_H_
