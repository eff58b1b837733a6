// TrieStore's internals shared by its source files (not a public header:
// only they include it). trie_store.cc opens and closes the store,
// trie_store_writer.cc runs the writer thread and group commit,
// trie_store_degraded.cc keeps the degraded state and resumes,
// trie_store_reads.cc scans and reads. Here: how a batch's mutations fold
// into RocksDB rows, RocksDB's background-error listener and the backlog
// kept while degraded.
//
// Thread-safety: ErrorListener is safe for concurrent use; Backlog and the
// functions are used by the writer thread (and Open) only.
#ifndef LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_STORE_INTERNAL_H_
#define LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_STORE_INTERNAL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "draftsvc/storage/trie_format.h"
#include "draftsvc/storage/trie_mutation.h"
#include "draftsvc/storage/trie_store.h"
#include "rocksdb/listener.h"
#include "rocksdb/slice.h"
#include "rocksdb/write_batch.h"

namespace lookahead::draftsvc {
namespace trie_store_internal {

inline absl::string_view View(const rocksdb::Slice& s) {
  return absl::string_view(s.data(), s.size());
}

// Whether `m` deletes every entry of its namespace's pool.
bool IsNgramPoolWipe(const TrieMutation& m);

// Removes from `rows` every pool row of `name_space` (a wipe supersedes
// them). O(rows): wipes are rare (a halving prune).
template <typename Rows>
void EraseNamespaceRows(absl::string_view name_space, Rows* rows) {
  const std::string prefix = trie_format::NgramPrefix(name_space);
  for (auto it = rows->begin(); it != rows->end();) {
    if (absl::StartsWith(it->first, prefix)) {
      rows->erase(it++);
    } else {
      ++it;
    }
  }
}

// Returns OK iff `batch` may be written (the format's own limits).
absl::Status ValidateBatch(const TrieMutationBatch& batch);

// The RocksDB key of a kNgramPool mutation. REQUIRES: ValidateBatch passed.
std::string NgramRowKey(absl::string_view name_space,
                        const std::vector<int32_t>& path);

// What a run of pool mutations of one entry amounts to. Pool entries are
// single rows (no ranges), so only the order of one entry's own mutations
// matters, and any run folds into one write: a merge of the summed adds, a
// put (a set-count, or a delete followed by adds), or a delete.
struct NgramRowWrite {
  enum Kind { kMerge, kPut, kDelete } kind = kMerge;
  uint64_t value = 0;

  void Apply(const TrieMutation& m);
};

// Appends `rows` to `wb` in key order (cheap memtable inserts, as the adds).
void WriteNgramRows(const absl::flat_hash_map<std::string, NgramRowWrite>& rows,
                    rocksdb::WriteBatch* wb);

}  // namespace trie_store_internal

// Remembers RocksDB's background errors (a failed flush or compaction stops
// writes; the next write would fail, a SyncWAL might assert) until taken.
class TrieStore::ErrorListener : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/,
                         rocksdb::Status* bg_error) override {
    absl::MutexLock lock(&mu_);
    if (error_.ok() && bg_error != nullptr && !bg_error->ok()) {
      error_ = absl::UnavailableError(
          absl::StrCat("RocksDB background error: ", bg_error->ToString()));
    }
  }
  absl::Status Take() {
    absl::MutexLock lock(&mu_);
    absl::Status out = std::move(error_);
    error_ = absl::OkStatus();
    return out;
  }

 private:
  absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// The mutations accepted while degraded, in order. Adds to one key are
// summed until a set or delete ends the run, as in a write round; pool
// entries fold per entry, as in a write round. (trie_store_degraded.cc)
class TrieStore::Backlog {
 public:
  void AddPut(std::string key, std::string value);
  void Add(const TrieMutationBatch& b);
  // Appends everything in order.
  void WriteTo(rocksdb::WriteBatch* wb) const;
  bool empty() const { return segments_.empty() && ngram_rows_.empty(); }
  int64_t bytes() const { return bytes_; }
  int64_t mutations() const { return mutations_; }
  // Namespaces whose metadata key the backlog writes.
  absl::flat_hash_set<std::string> namespaces;

 private:
  struct Segment {
    enum Kind { kAdds, kPut, kDeleteRange } kind;
    absl::flat_hash_map<std::string, uint64_t> adds;  // kAdds.
    std::string key, value;  // kPut: key, value; kDeleteRange: begin, end.
  };
  std::vector<Segment> segments_;
  // Pool rows, folded per entry (NgramRowWrite): kept apart from the
  // segments since no trie mutation orders against them.
  absl::flat_hash_map<std::string, trie_store_internal::NgramRowWrite>
      ngram_rows_;
  int64_t bytes_ = 0;
  int64_t mutations_ = 0;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_STORE_INTERNAL_H_
