// The seam between the in-memory draft index and its persistent store.
//
// DraftIndex applies every change to a namespace's global trie in memory and
// describes it as a TrieMutationBatch handed to a MutationSink (TrieStore in
// production). The sink must not block: it queues the batch and writes it off
// the request path. Batches of one namespace are submitted in the order they
// were applied in memory (the index holds the namespace's write lock while
// submitting), so replaying them in order rebuilds the same trie.
//
// A mutation addresses one of two tables of the namespace: its token trie
// (Table::kTrie) or its n-gram pool (Table::kNgramPool, ngram_pool.h). Both
// go through the same batches, so a batch's pool rows are durable exactly
// when its trie rows are (one WriteBatch, one WAL write, one fsync).
#ifndef LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_MUTATION_H_
#define LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_MUTATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace lookahead::draftsvc {

struct TrieMutation {
  // Which of the namespace's tables `path` addresses.
  enum class Table : uint8_t {
    // The token trie: `path` = token ids from the root, 1..max depth.
    kTrie,
    // The n-gram pool: `path` = [key_length, key tokens..., continuation
    // tokens...], key_length in [1, 255] and at least one continuation
    // token (NgramMutationPath). An entry is one (key, continuation) pair;
    // entries are independent rows (no subtrees).
    kNgramPool,
  };
  enum class Kind {
    // kTrie: count(path) += value; creates the node (and nothing else) if
    // absent. The index always adds to every prefix of a path too, so
    // parents exist. kNgramPool: count(entry) += value; creates the entry.
    kAdd,
    // count(path) = value. kTrie: the node exists. kNgramPool: creates the
    // entry if absent.
    kSetCount,
    // kTrie: removes the node at `path` and its whole subtree. kNgramPool:
    // removes exactly that entry (not the entries whose continuation it
    // prefixes); with an empty `path` (the only kNgramPool mutation that
    // may have one), every entry of the namespace's pool (one range delete:
    // a halving prune drops most entries, and rewrites the rest anyway).
    kDeleteSubtree,
  };
  Kind kind = Kind::kAdd;
  std::vector<int32_t> path;  // See Table.
  int64_t value = 0;
  Table table = Table::kTrie;
};

// The kNgramPool path of the entry (key, continuation).
// REQUIRES: 1 <= key.size() <= 255.
inline std::vector<int32_t> NgramMutationPath(
    absl::Span<const int32_t> key, absl::Span<const int32_t> continuation) {
  std::vector<int32_t> path;
  path.reserve(1 + key.size() + continuation.size());
  path.push_back(static_cast<int32_t>(key.size()));
  path.insert(path.end(), key.begin(), key.end());
  path.insert(path.end(), continuation.begin(), continuation.end());
  return path;
}

struct TrieMutationBatch {
  std::string name_space;  // Namespace the paths belong to.
  int32_t vocab_size = 0;  // The namespace's vocab bound (persisted once).
  std::vector<TrieMutation> mutations;
};

class MutationSink {
 public:
  virtual ~MutationSink() = default;

  // Queues `batch`; returns without waiting for disk. `done` runs exactly
  // once, from a store thread, when the batch is durable (sync mode: fsynced;
  // otherwise: written to the WAL), or with the error that lost it.
  // Thread-safe.
  virtual void Submit(TrieMutationBatch batch,
                      std::function<void(absl::Status)> done) = 0;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_MUTATION_H_
