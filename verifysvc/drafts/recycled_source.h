// RecycledSource: Token Recycling in the verifier's process. Every verify
// pass computes the model's top-k next tokens at each row it verified (the
// root and every draft node, accepted or not); this source keeps, for each
// token, the top-k last predicted after it (one table for the whole
// process: what the model predicts after a token carries across requests),
// and drafts after a sequence's last token the chain of top-1 successors,
// with the second-best successor beside its first node. It is a fallback:
// it drafts only for the asks the cascade marks `refresh` (DraftFanout: the
// sources before it left the sequence without a tree this step, or the
// periodic refresh), so listed last its nodes never displace theirs.
//
// Unlike draftsvc's n-gram pool, which holds the same predictions but
// answers a step late (its tree is for the context before the last pass's
// tokens), this one drafts for the token the last pass just emitted: the
// table lookup is fresh at every step and costs no round trip.
//
// Scores are calibrated online per depth (and per rank at depth 1), as
// LocalSource's: the fraction of steps where, the parent having matched
// what the model emitted, the node did too, judged from the emitted tokens
// (trimmed nodes count as well). A node's score is its parent's times its
// rate, so the scored union with the other sources and the planner's cut
// keep it only where it pays.
//
// It drafts for sequences whose policy may use the n-gram source (its
// content is recycled predictions, as the pool's); its nodes are tagged
// kNgram.
//
// Thread-compatible: used by the scheduler thread, as every DraftSource.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_RECYCLED_SOURCE_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_RECYCLED_SOURCE_H_

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "verifysvc/drafts/draft_source.h"

namespace lookahead::verifysvc {

class RecycledSource : public DraftSource {
 public:
  // Successors kept per token (of the predictions' k), and the longest
  // chain drafted.
  static constexpr int kKeep = 2;
  static constexpr int kMaxDepth = 8;
  // The prior every rate starts from (kPriorHits in kPriorTries).
  static constexpr double kPriorHits = 1;
  static constexpr double kPriorTries = 4;

  std::string name() const override { return "recycled"; }
  int64_t Open(const DraftPolicy& policy,
               absl::Span<const int32_t> prompt) override;
  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override;
  bool WantsPredictions(int64_t handle) const override;
  void ObserveVerified(int64_t handle,
                       const VerifiedPredictions& predictions) override;
  std::vector<engine::DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                         bool* called) override;
  void Close(int64_t handle) override;
  DraftCost cost() const override { return {}; }
  DraftSourceStats Stats() const override;

  // The calibrated rate of the chain's node at `depth` (>= 1; rank 0), or
  // of the second-best first node (depth 1, rank 1).
  double Rate(int depth, int rank = 0) const;
  // The successors recorded for `token` (kNone where none).
  static constexpr int32_t kNone = -1;
  std::array<int32_t, kKeep> Successors(int32_t token) const;

 private:
  struct Sequence {
    int depth = kMaxDepth;
    int32_t last = kNone;  // the sequence's last token
    // The last tree proposed (before any trim), judged by the tokens
    // Observe brings next: chain[d] at depth d + 1, and the second-best
    // first node.
    std::vector<int32_t> chain;
    int32_t second = kNone;
  };

  void Record(int32_t token, const int32_t* top, int k);
  void Judge(const Sequence& sequence, absl::Span<const int32_t> emitted);

  std::unordered_map<int64_t, Sequence> sequences_;
  int64_t next_handle_ = 1;
  // successors_[kKeep * token + r]: token's rank-r successor, or kNone.
  std::vector<int32_t> successors_;
  // Per depth d - 1 (rank 0), and [kMaxDepth] for depth 1 rank 1.
  std::array<double, kMaxDepth + 1> hits_{};
  std::array<double, kMaxDepth + 1> tries_{};
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_RECYCLED_SOURCE_H_
