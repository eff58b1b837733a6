// TrieStore: the RocksDB-backed persistent copy of every namespace's global
// token trie (layout in trie_format.h).
//
// It is the MutationSink of DraftIndex: Submit() only queues; one writer
// thread drains the queue into a single WriteBatch per round (group commit),
// so no request thread ever waits on disk. Counts are updated by a RocksDB
// merge operator (int64 add), so inserts never read-modify-write.
//
// Thread-safety: every method is safe to call concurrently, except that
// Close() / the destructor must not race with other calls.
#ifndef LOOKAHEAD_DRAFTSVC_TRIE_STORE_H_
#define LOOKAHEAD_DRAFTSVC_TRIE_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "draftsvc/trie_mutation.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace lookahead::draftsvc {

struct TrieStoreOptions {
  // true: every group commit is written with WriteOptions.sync (fsync) and
  // `done` callbacks run only after that; survives power loss, costs one
  // fsync per round. false (default): `done` runs once the batch is in the
  // WAL (survives kill -9, not power loss) and the WAL is fsynced every
  // sync_interval_ms.
  bool sync = false;
  // Period of the WAL fsync when !sync. 0 disables it (Flush() still syncs).
  // Default 100 ms: at most that much acknowledged work is exposed to a
  // power loss.
  int sync_interval_ms = 100;
  // Most mutations one group commit takes from the queue (at least one batch
  // is always taken). Bigger rounds amortise the write/fsync; smaller ones
  // bound the latency of the first batch in the round. Default 65536.
  int max_group_mutations = 65536;
  // Create the database if the directory holds none. Default true.
  bool create_if_missing = true;
};

// Receives a full scan (TrieStore::Scan) in key order: every namespace
// first, then every node with parents before their children.
class TrieScanVisitor {
 public:
  virtual ~TrieScanVisitor() = default;
  virtual absl::Status OnNamespace(absl::string_view name_space,
                                   int32_t vocab_size) = 0;
  // `path` is valid only during the call.
  virtual absl::Status OnNode(absl::string_view name_space,
                              absl::Span<const int32_t> path,
                              int64_t count) = 0;
};

class TrieStore : public MutationSink {
 public:
  // Opens (or creates) the database in directory `path` and starts the
  // writer thread. Errors name the path: UNAVAILABLE if another process (or
  // another TrieStore in this one) holds the directory's lock;
  // FAILED_PRECONDITION if the database is corrupt, has another format
  // version, or is not a lookahead trie store; NOT_FOUND if it is missing
  // and !create_if_missing; INVALID_ARGUMENT on bad options.
  static absl::StatusOr<std::unique_ptr<TrieStore>> Open(
      const std::string& path, const TrieStoreOptions& options);

  TrieStore(const TrieStore&) = delete;
  TrieStore& operator=(const TrieStore&) = delete;
  // Close()s, ignoring its status.
  ~TrieStore() override;

  // MutationSink. Queues `batch`; `done` runs exactly once on the writer
  // thread: OK once the batch is durable (see TrieStoreOptions::sync), or
  // INVALID_ARGUMENT (bad namespace, empty/negative/too deep path, token
  // outside [0, vocab_size); nothing of the batch is written), or the write
  // error. If the store is closed, `done` runs on the calling thread with
  // FAILED_PRECONDITION. A batch is written atomically (one WriteBatch) and
  // after every batch submitted before it.
  void Submit(TrieMutationBatch batch,
              std::function<void(absl::Status)> done) override;

  // Runs `done` on the writer thread once every batch submitted before this
  // call is written and fsynced (in sync mode that is just a barrier; else
  // it syncs the WAL). The status is the first write error since Open, if
  // any. Never blocks. If the store is closed: as in Submit.
  void Flush(std::function<void(absl::Status)> done);
  // Blocking Flush. Must not be called from a `done` callback.
  absl::Status Flush();

  // Streams every namespace and node to `visitor` from a consistent
  // snapshot; stops at the first non-OK status the visitor returns.
  // DATA_LOSS on malformed keys or values.
  absl::Status Scan(TrieScanVisitor& visitor) const;

  // The count stored for `path`, or NOT_FOUND. For tests and tools.
  absl::StatusOr<int64_t> GetCount(absl::string_view name_space,
                                   absl::Span<const int32_t> path) const;

  // Batches queued or being written, not yet acknowledged.
  int64_t PendingBatches() const;
  // Live SST bytes plus live WAL bytes on disk.
  int64_t DiskBytes() const;
  const std::string& path() const { return path_; }
  const TrieStoreOptions& options() const { return options_; }

  // Drains the queue, syncs the WAL, stops the writer, flushes the memtable
  // to a table file (so the next Open replays no WAL) and closes RocksDB.
  // Later Submit/Flush calls fail with FAILED_PRECONDITION. Idempotent.
  absl::Status Close();

 private:
  struct Pending {
    TrieMutationBatch batch;
    std::function<void(absl::Status)> done;
    absl::Status rejected;  // Non-OK: do not write; report this.
    bool is_flush = false;  // A Flush() barrier rather than a batch.
  };

  TrieStore(std::string path, TrieStoreOptions options,
            std::unique_ptr<rocksdb::DB> db,
            absl::flat_hash_set<std::string> known_namespaces);

  void WriterLoop();
  // Writes one round; runs the callbacks. Called only by the writer thread.
  void WriteRound(std::deque<Pending> round);
  // Syncs the WAL if anything was written since the last sync.
  absl::Status SyncWalIfDirty();

  // Constant after construction.
  const std::string path_;
  const TrieStoreOptions options_;
  std::unique_ptr<rocksdb::DB> db_;  // Closed and reset only by Close().

  // Owned by the writer thread.
  absl::flat_hash_set<std::string> known_namespaces_;  // Meta key written.
  bool wal_dirty_ = false;

  mutable absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_batches_ ABSL_GUARDED_BY(mu_) = 0;  // Not flush barriers.
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;       // Batches being written.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status write_error_ ABSL_GUARDED_BY(mu_);  // First write failure.

  std::thread writer_;    // Started by Open, joined by Close.
  absl::Mutex close_mu_;  // Serializes Close().
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_TRIE_STORE_H_
