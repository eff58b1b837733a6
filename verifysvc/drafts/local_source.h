// LocalSource: drafts from what a sequence has itself seen, its prompt and
// its own output, in the verifier's process: no RPC, so it is fresh at
// every step and costs microseconds. It is prompt-lookup decoding made a
// scored tree: the context's longest suffix (up to kMaxKey tokens) that
// occurred before is looked up, and the continuations of its latest
// kMaxOccurrences occurrences, up to the draft's depth, are merged into a
// token tree whose nodes carry how many occurrences went through them.
//
// Scores are calibrated online, as draftsvc's are: for each key length and
// depth, the fraction of steps where, the parent having matched what the
// model emitted, some child did too (judged from the tokens the sequence
// emits after each draft, so trimmed nodes count as well). A node's score
// is its parent's times that rate times the node's share of its siblings'
// occurrences: best first, so any prefix is the best tree of its size.
//
// It drafts for sequences whose policy may use the tries (its content is
// theirs: the prompt and the output); its nodes are tagged kTrie. draftsvc
// still holds what no single sequence has seen: the namespace's outputs,
// the n-gram pools and the assistant.
//
// Thread-compatible: used by the scheduler thread, as every DraftSource.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_LOCAL_SOURCE_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_LOCAL_SOURCE_H_

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "verifysvc/drafts/draft_source.h"

namespace lookahead::verifysvc {

class LocalSource : public DraftSource {
 public:
  // Longest suffix looked up, and how many of its latest occurrences feed
  // a tree.
  static constexpr int kMaxKey = 4;
  static constexpr int kMaxOccurrences = 8;
  // Deepest branch, without a policy's branch_length.
  static constexpr int kDefaultDepth = 16;
  // Calibration: depths tracked (deeper ones share the last), and the prior
  // (a rate of kPriorHits in kPriorTries) every rate starts from.
  static constexpr int kMaxDepth = 16;
  static constexpr double kPriorHits = 1;
  static constexpr double kPriorTries = 2;

  std::string name() const override { return "local"; }
  int64_t Open(const DraftPolicy& policy,
               absl::Span<const int32_t> prompt) override;
  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override;
  std::vector<engine::DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                         bool* called) override;
  void Close(int64_t handle) override;
  DraftCost cost() const override { return {}; }
  DraftSourceStats Stats() const override;

  // The calibrated rate at key length `key` (1..kMaxKey) and depth `depth`
  // (>= 1): P(a child matches | its parent matched).
  double Rate(int key, int depth) const;

 private:
  struct Sequence {
    int depth = kDefaultDepth;
    std::vector<int32_t> context;
    // Per key length k - 1: the k-gram ending at position i - 1 (packed)
    // -> every i (the position its continuation starts at), in order.
    std::array<std::unordered_map<uint64_t, std::vector<int32_t>>, kMaxKey>
        index;
    // The last tree proposed (before any trim) and its key length, judged
    // by the tokens Observe brings next.
    engine::DraftTree last;
    int last_key = 0;
  };

  // Appends `tokens` to the sequence's context and index.
  static void Append(Sequence* sequence, absl::Span<const int32_t> tokens);
  // The tree for the sequence's context now, at most `budget` nodes.
  engine::DraftTree Draft(const Sequence& sequence, int budget,
                          int* key) const;
  // Counts what `emitted` (the tokens after the last tree's root) says of
  // the last tree, into the calibration.
  void Judge(const Sequence& sequence, absl::Span<const int32_t> emitted);

  std::unordered_map<int64_t, Sequence> sequences_;
  int64_t next_handle_ = 1;
  // hits_[k - 1][d - 1] / tries_[k - 1][d - 1], over every sequence.
  std::array<std::array<double, kMaxDepth>, kMaxKey> hits_{};
  std::array<std::array<double, kMaxDepth>, kMaxKey> tries_{};
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_LOCAL_SOURCE_H_
