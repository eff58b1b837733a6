// The seam between the in-memory draft index and its persistent store.
//
// DraftIndex applies every change to a namespace's global trie in memory and
// describes it as a TrieMutationBatch handed to a MutationSink (TrieStore in
// production). The sink must not block: it queues the batch and writes it off
// the request path. Batches of one namespace are submitted in the order they
// were applied in memory (the index holds the namespace's write lock while
// submitting), so replaying them in order rebuilds the same trie.
#ifndef LOOKAHEAD_DRAFTSVC_TRIE_MUTATION_H_
#define LOOKAHEAD_DRAFTSVC_TRIE_MUTATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lookahead::draftsvc {

struct TrieMutation {
  enum class Kind {
    // count(path) += value; creates the node (and nothing else) if absent.
    // The index always adds to every prefix of a path too, so parents exist.
    kAdd,
    // count(path) = value. The node exists.
    kSetCount,
    // Removes the node at `path` and its whole subtree.
    kDeleteSubtree,
  };
  Kind kind = Kind::kAdd;
  std::vector<int32_t> path;  // Token ids from the root, 1..max depth.
  int64_t value = 0;
};

struct TrieMutationBatch {
  std::string name_space;   // Namespace the paths belong to.
  int32_t vocab_size = 0;   // The namespace's vocab bound (persisted once).
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

#endif  // LOOKAHEAD_DRAFTSVC_TRIE_MUTATION_H_
