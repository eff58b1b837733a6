// RecycledSource: Token Recycling in the verifier's process. Every verify
// pass computes the model's top-k next tokens at each row it verified (the
// root and every draft node, accepted or not); this source keeps the top-k
// last predicted after each token, and after each pair of tokens (one table
// for the whole process: what the model predicts after a token carries
// across requests), and drafts after a sequence's last token the chain of
// top-1 successors, each looked up by the two tokens before it where that
// pair was seen (a sharper context: on HumanEval outputs the pair's
// successor is right 56% of the time where it exists, the token's 26%), by
// the last token otherwise; the second-best successor goes beside the first
// node. It drafts where the sources before it left the sequence without a
// tree this step, or without a first node it rates higher (DraftAsk::
// covered_score), and on the cascade's periodic refresh; listed last, its
// nodes join theirs in the scored merge.
//
// Unlike draftsvc's n-gram pool, which holds the same predictions but
// answers a step late (its tree is for the context before the last pass's
// tokens), this one drafts for the token the last pass just emitted: the
// table lookup is fresh at every step and costs no round trip.
//
// Scores are calibrated online per sequence, per depth, per kind of lookup
// (pair or token) and per rank at depth 1, as LocalSource's: the fraction of
// steps where, the parent having matched what the model emitted, the node did
// too, judged from the emitted tokens (trimmed nodes count as well). A node's
// score is its parent's times its rate, so the scored union with the other
// sources and the planner's cut keep it only where it pays.
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
  // The prior every process-wide rate starts from (kPriorHits in
  // kPriorTries), and the weight, in tries, of the process-wide rate as a
  // sequence's prior.
  static constexpr double kPriorHits = 1;
  static constexpr double kPriorTries = 4;
  static constexpr double kSequencePriorTries = 4;

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

  // Slots of the pair table (direct-mapped: a pair evicts the one it
  // collides with): 4 MiB.
  static constexpr int kPairBits = 18;

  // How a node's token was looked up: by the pair of tokens before it, or
  // by the last one alone.
  enum Lookup { kByToken = 0, kByPair = 1 };

  // The calibrated rate of the chain's node at `depth` (>= 1; rank 0), or
  // of the second-best first node (depth 1, rank 1).
  double Rate(int depth, int rank = 0, Lookup lookup = kByToken) const;
  // The successors recorded for `token` (kNone where none), and for the
  // pair (`before`, `token`).
  static constexpr int32_t kNone = -1;
  std::array<int32_t, kKeep> Successors(int32_t token) const;
  std::array<int32_t, kKeep> Successors(int32_t before, int32_t token) const;

 private:
  struct Sequence {
    int depth = kMaxDepth;
    int32_t before = kNone;  // the token before `last`
    int32_t last = kNone;    // the sequence's last token
    // The last tree proposed (before any trim), judged by the tokens
    // Observe brings next: chain[d] at depth d + 1 (looked up as
    // lookups[d]), and the second-best first node.
    std::vector<int32_t> chain;
    std::vector<Lookup> lookups;
    int32_t second = kNone;
    // The sequence's own tally, by RateIndex.
    std::array<double, 2 * (kMaxDepth + 1)> hits{}, tries{};
  };
  struct PairSlot {
    uint64_t key = ~uint64_t{0};
    std::array<int32_t, kKeep> next;
  };

  static uint64_t PairKey(int32_t before, int32_t token);
  static size_t PairSlotOf(uint64_t key);
  // The best successors of (`before`, `token`): the pair's where recorded,
  // else the token's.
  std::array<int32_t, kKeep> Next(int32_t before, int32_t token,
                                  Lookup* lookup) const;
  void Record(int32_t before, int32_t token, const int32_t* top, int k);
  void Judge(Sequence& sequence, absl::Span<const int32_t> emitted);
  void Tally(Sequence& sequence, int index, bool hit);
  static int RateIndex(int depth, int rank, Lookup lookup);
  // The process-wide rate at RateIndex `index`.
  double RateAt(int index) const;
  // The sequence's rate: its own tally, with the process-wide rate as the
  // prior (so a sequence nothing predicts stops drafting within a few
  // steps, whatever the workloads before it taught the table).
  double SequenceRate(const Sequence& sequence, int depth, int rank,
                      Lookup lookup) const;

  std::unordered_map<int64_t, Sequence> sequences_;
  int64_t next_handle_ = 1;
  // successors_[kKeep * token + r]: token's rank-r successor, or kNone.
  std::vector<int32_t> successors_;
  std::vector<PairSlot> pairs_;  // 1 << kPairBits, allocated on first use
  // Per lookup, per depth d - 1 (rank 0), and [kMaxDepth] for depth 1
  // rank 1.
  std::array<double, 2 * (kMaxDepth + 1)> hits_{};
  std::array<double, 2 * (kMaxDepth + 1)> tries_{};
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_RECYCLED_SOURCE_H_
