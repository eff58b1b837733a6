// DraftTree: the verifier's draft, a token tree proposed to follow a root
// token, with the source of each node. Torch-free and independent of the
// model, so draft sources and the scheduler can build and merge trees
// without linking LibTorch. Plain values; thread-compatible.
#ifndef LOOKAHEAD_ENGINE_MODEL_DRAFT_TREE_H_
#define LOOKAHEAD_ENGINE_MODEL_DRAFT_TREE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lookahead::engine {

// Where a draft node came from. Only a tag for statistics: the verifier
// treats every node alike.
// Not draftsvc's CandidateSource (prompt, output, n-gram, assistant: another
// set and another bit layout) nor the wire enum v1.DraftSource; verifysvc's
// proto edges (api/, draftsvc_client/) map v1.DraftSource to these tags.
enum class DraftSourceTag : uint8_t {
  kUnknown = 0,
  kTrie = 1,       // draftsvc's token tries (prompt and global outputs)
  kNgram = 2,      // n-gram pool (Jacobi lookahead, recycled predictions)
  kAssistant = 3,  // an assistant model
};
constexpr int kNumDraftSourceTags = 4;

// "trie", "ngram", "assistant" or "unknown": the tag's name in metrics
// labels and API responses.
const char* DraftSourceName(DraftSourceTag tag);

// A set of DraftSourceTags: bit (1 << tag) for each member.
using DraftSourceSet = uint32_t;
constexpr DraftSourceSet SourceBit(DraftSourceTag tag) {
  return DraftSourceSet{1} << static_cast<int>(tag);
}

// A draft to verify after a root token. parents[i] is in [-1, i) and indexes
// `tokens`; -1 means a child of the root. sources is empty (all kUnknown) or
// has one tag per node: the node's primary source. source_sets is empty
// (each node's set is SourceBit(sources[i])) or has one set per node: every
// source that proposed the node (identical nodes from several sources are
// merged into one), for per-source statistics. scores is empty or has one
// estimate per node of the probability that it is accepted, from a source
// that lists its nodes best first (draftsvc's mixed tree): then scores never
// increase along the list, and any prefix is the best tree of its size.
struct DraftTree {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;
  std::vector<DraftSourceTag> sources;
  std::vector<DraftSourceSet> source_sets;
  std::vector<float> scores;
  // Seconds of model passes the sources ran for this sequence since its
  // previous tree (an assistant's drafting, catch-up and pre-drafting): the
  // draft's cost beyond the verify pass, which the verifier charges against
  // the source's accepted tokens. 0 for sources that do no model work.
  double source_seconds = 0;
  // An empty tree only because the source's answer for this step has not
  // arrived yet (an asynchronous source: its first answer is on its way,
  // or it is slow or stopped): not a miss, so the pacer learns nothing
  // from it.
  bool pending = false;

  // The sources of node i (REQUIRES: 0 <= i < size()): source_sets[i] if
  // set, else the bit of sources[i], else kUnknown's.
  DraftSourceSet SourcesOf(int i) const {
    if (static_cast<size_t>(i) < source_sets.size()) return source_sets[i];
    if (static_cast<size_t>(i) < sources.size()) return SourceBit(sources[i]);
    return SourceBit(DraftSourceTag::kUnknown);
  }

  int size() const { return static_cast<int>(tokens.size()); }
  bool empty() const { return tokens.empty(); }
};

// Keeps the first `max_nodes` (>= 0) nodes of `tree`: nodes are in
// topological order, so any prefix is still a tree.
void TrimDraft(DraftTree* tree, int max_nodes);

// Cuts `tree` to its longest valid prefix: nodes up to the first whose token
// is outside [0, vocab_size), whose parent is outside [-1, i), or (with
// sources or source_sets) whose tag count disagrees. Returns how many nodes it
// dropped.
int TrimToValidPrefix(DraftTree* tree, int32_t vocab_size);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_DRAFT_TREE_H_
