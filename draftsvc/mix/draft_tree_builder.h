// MixedDraft (draftsvc's draft tree), CandidateSource (which source a node
// came from) and BuildTrieDraft: multi-stage prefix matching over counted
// token tries (Ant Group's Lookahead retrieval).
//
// Names: CandidateSource is draftsvc's own set (prompt, output, n-gram,
// assistant), not engine::DraftSourceTag (unknown, trie, n-gram, assistant,
// a different bit layout) nor the wire enum v1.DraftSource (proto_conversion
// maps between them); verifysvc's DraftSource is the verifier's interface to
// a source of drafts. MixedDraft holds nodes of every source, not only tries.
//
// BuildTrieDraft is a pure function of const tries: safe to call from many
// threads at once as long as no thread mutates the tries it reads (DraftIndex
// holds the namespace's reader lock around it).
#ifndef LOOKAHEAD_DRAFTSVC_MIX_DRAFT_TREE_BUILDER_H_
#define LOOKAHEAD_DRAFTSVC_MIX_DRAFT_TREE_BUILDER_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "draftsvc/sources/token_trie.h"

namespace lookahead::draftsvc {

// Where a draft node's evidence came from (maps to v1.DraftSource). Values
// index arrays (kNumCandidateSources) and bit sets (CandidateSourceBit):
// DO NOT CHANGE them (calibration and source sets are indexed by them).
enum class CandidateSource : uint8_t {
  kPrompt,     // The session's private prompt trie.
  kOutput,     // The namespace's global trie of accepted outputs.
  kNgram,      // The n-gram pools (namespace + the session's private one).
  kAssistant,  // A model-based drafter (draftsvc's assistant model).
};
inline constexpr int kNumCandidateSources = 4;
inline constexpr uint32_t CandidateSourceBit(CandidateSource s) {
  return uint32_t{1} << static_cast<int>(s);
}
// A node's rank among its siblings in a source that did not propose it.
inline constexpr uint8_t kNoRank = 0xFF;

// How the selected nodes are arranged (maps to v1.DraftMode).
enum class DraftMode : uint8_t {
  kOff,           // Empty tree.
  kHierarchical,  // One tree; shared prefixes merged; no duplicate siblings.
  kParallel,      // Independent root-to-leaf chains; prefixes repeated.
};

struct DraftNode {
  int32_t token = 0;
  int32_t parent = -1;  // Index of the parent node; -1 = child of the root.
  int32_t depth = 1;    // 1 for root children, parent's depth + 1 otherwise.
  CandidateSource source = CandidateSource::kOutput;
  // BuildTrieDraft: trie count, times prompt_boost for prompt evidence.
  // MixDrafts: the estimated probability that the node is accepted.
  float score = 0;
  // Every source that proposed the node (CandidateSourceBit); 0 = just
  // `source`.
  uint32_t source_set = 0;
  // Per source (indexed by CandidateSource): the node's rank among its siblings
  // in that source's proposal (0 = its best), kNoRank if it did not
  // propose it. Set by MixDrafts only (for calibration).
  std::array<uint8_t, kNumCandidateSources> ranks{kNoRank, kNoRank, kNoRank,
                                                  kNoRank};
  // Per source: context tokens its trie matched above the node's branch
  // (BuildTrieDraft: the matching stage's suffix length, capped at 255;
  // 0 = the source has no such evidence). A long match is strong evidence:
  // the calibration keeps a rate per match length (source_calibration.h).
  std::array<uint8_t, kNumCandidateSources> matches{0, 0, 0, 0};
};

// A draft tree below the root (the last accepted token, not included), with
// nodes from any candidate source: BuildTrieDraft's trie nodes, or MixDrafts'
// mix of tries, n-gram pools and the assistant.
// Invariants: nodes[i].parent < i (topological order); depths as above;
// in hierarchical mode no two children of one parent share a token.
struct MixedDraft {
  std::vector<DraftNode> nodes;
};

// One trie to retrieve from.
struct TrieSource {
  const TokenTrie* trie = nullptr;  // Not owned; may be null (skipped).
  CandidateSource source = CandidateSource::kOutput;
  float boost = 1.0f;  // Node score = count * boost.
};

struct DraftRequest {
  // The session's context tail: the last tokens before the draft position,
  // oldest first. Only the last `max_match_length` are used.
  absl::Span<const int32_t> context;
  // Longest context suffix tried first (>= 1).
  int32_t max_match_length = 8;
  // Node budget: the tree holds at most this many nodes (>= 0).
  int32_t decoding_length = 0;
  // Deepest node returned (>= 1).
  int32_t branch_length = 8;
  DraftMode mode = DraftMode::kHierarchical;
};

// Multi-stage prefix matching. For k = min(|context|, max_match_length) down
// to 1: finds the node of the last k context tokens in every source trie and
// expands best-first (by score, a priority queue over count-sorted children)
// below those match points, merging equal token paths, until the tree holds
// decoding_length nodes. A stage whose subtrees are exhausted before the
// budget is filled backs off to k - 1; the earlier (longer-context) stages'
// nodes are all kept. Every selected node's ancestors are selected.
// kParallel lays the hierarchical selection out as root-to-leaf chains (best
// leaves first, the last chain truncated to fit the budget).
MixedDraft BuildTrieDraft(absl::Span<const TrieSource> sources,
                          const DraftRequest& request);

// Lays a hierarchical tree (topological order, scores set) out as
// independent root-to-leaf chains: leaves by score (then their order in
// `tree`), each chain its full path, the last one cut to fit `budget`.
std::vector<DraftNode> LayOutAsChains(const std::vector<DraftNode>& tree,
                                      int32_t budget);

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_MIX_DRAFT_TREE_BUILDER_H_
