// The forward pass's input: per sequence, rows of tokens at explicit
// positions with a packed attention mask among them (SequenceRows), and the
// producers of it. A token tree (TreeInput: a verify step, a prefill chunk)
// is one producer; Jacobi lookahead rows, whose mask is not a tree, are
// another. Plain values and pure functions; thread-compatible.
#ifndef LOOKAHEAD_ENGINE_MODEL_BATCH_H_
#define LOOKAHEAD_ENGINE_MODEL_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "engine/model/kv_cache.h"
#include "engine/model/tree_mask.h"

namespace lookahead::engine {

// One sequence's rows in a batched forward pass, evaluated after its
// committed KV cache. Row i is token tokens[i] at position positions[i]; it
// attends to the whole committed cache plus the rows j with mask.Get(i, j)
// (always itself). The first kept_rows() rows form the tree `parents`
// (parents[i] in [-1, i)): their positions are cache length + depth and each
// sees exactly its ancestors and itself among the rows, so one root-to-node
// path of them can be committed afterwards (KvCache::CommitPath). Rows past
// them are scratch (e.g. Jacobi lookahead rows): any mask over kept and
// scratch rows, and their K/V are discarded after the pass.
struct SequenceRows {
  KvCache* cache = nullptr;        // not owned; distinct for each sequence
  std::vector<int32_t> tokens;     // (n) ids < vocab_size, n >= 1
  std::vector<int32_t> positions;  // (n) absolute positions >= cache length
  PackedTreeMask mask;             // (n, n)
  std::vector<int32_t> parents;    // (kept rows) the kept rows' tree
  bool last_logits_only = false;   // true: logits for the last row only

  int size() const { return static_cast<int>(tokens.size()); }
  int kept_rows() const { return static_cast<int>(parents.size()); }
};

// A token tree evaluated after the sequence's committed cache: node i has
// position cache->Length() + depth(i), attends to the cache, its ancestors
// and itself, and may be committed afterwards. A prefill chunk is a chain:
// parents = {-1, 0, 1, ...}.
struct TreeInput {
  KvCache* cache = nullptr;       // not owned; distinct for each input
  std::vector<int32_t> tokens;    // n >= 1 token ids < vocab_size
  std::vector<int32_t> parents;   // n entries, parents[i] in [-1, i)
  bool last_logits_only = false;  // true: logits for the last node only
};

// The rows of `tree` (positions from the cache's current length). Returns
// INVALID_ARGUMENT iff the tree is malformed (empty, sizes differ, a parent
// outside [-1, i)) or its cache is null.
absl::StatusOr<SequenceRows> RowsFromTree(const TreeInput& tree);

// Checks the SequenceRows invariants above for a cache of `cache_length`
// committed tokens: sizes agree, every row sees itself, positions are at or
// past the cache, and the kept rows are exactly a tree. INVALID_ARGUMENT
// naming the row otherwise.
absl::Status ValidateRows(const SequenceRows& rows, int cache_length);

// The tree [root, draft...]: node 0 = root (parent -1), draft node j = node
// j + 1 with parent draft.parents[j] + 1.
TreeInput MakeVerifyInput(KvCache* cache, int32_t root_token,
                          const DraftTree& draft);

// A chain of `tokens` after the cache (a prefill chunk), logits of the last
// token only.
TreeInput ChainInput(KvCache* cache, absl::Span<const int32_t> tokens);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_BATCH_H_
