// TrieStore: the RocksDB-backed persistent copy of every namespace's global
// token trie (layout in trie_format.h).
//
// It is the MutationSink of DraftIndex: Submit() only queues; one writer
// thread drains the queue into a single WriteBatch per round (group commit),
// so no request thread ever waits on disk. Counts are updated by a RocksDB
// merge operator (int64 add), so inserts never read-modify-write.
//
// Pool entries (TrieMutation::Table::kNgramPool) ride in the same batches:
// a batch's trie and pool rows are one WriteBatch, so they are durable (and
// acknowledged, kept in the degraded backlog, re-persisted) together.
//
// Storage faults are a state, not a crash. When a write fails (ENOSPC, EIO, a
// read-only remount, a RocksDB background error) the store turns *degraded*:
// it stops calling RocksDB's write path (which asserts when used again after
// a failed WAL write), answers every later batch "not persisted" at once,
// keeps the batches' mutations in memory (up to max_backlog_bytes), and
// tries to resume: every resume_interval_ms (doubling after each failure, up
// to max_resume_interval_ms) it checks that the volume has
// resume_min_free_bytes free, probes the directory with a small fsynced
// file and only if both work reopens the database read-write, with
// no lock held that readers (DiskBytes, Health, Submit) wait on. When that
// works it writes the kept mutations as one fsynced batch and, once the ACK
// marker is written too, is healthy again. If the
// backlog overflowed it stays degraded until restart: the disk then holds an
// older, consistent prefix of the trie. Nothing is ever reported durable that
// is not. Open on a disk that cannot be written opens the database read-only
// and starts degraded (or fails with one error line if there is no database).
// Open also reports what WAL recovery dropped (wal_recovery.h).
//
// Thread-safety: every method is safe to call concurrently, except that
// Close() / the destructor must not race with other calls.
#ifndef LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_STORE_H_
#define LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_STORE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "draftsvc/storage/trie_mutation.h"
#include "draftsvc/storage/wal_recovery.h"

namespace rocksdb {
class DB;
class Status;
class WriteBatch;
class Env;
class FileSystem;
class FSRandomRWFile;
}  // namespace rocksdb

namespace lookahead::draftsvc {

class StoreInfoLog;

// The store's storage state (TrieStore::Health()).
struct StoreHealth {
  // True while writes are off: updates are applied in memory only.
  bool degraded = false;
  // The error that degraded the store, or the last reopen failure; empty
  // when healthy.
  std::string error;
  // Failed writes (and failed reopen attempts) since Open.
  int64_t write_errors = 0;
  // Mutations accepted while degraded and kept to be written on recovery.
  int64_t unpersisted_mutations = 0;
  // Mutations accepted while degraded that were dropped because the backlog
  // overflowed: in memory only, lost at the next restart. While > 0 the
  // store stays degraded until restart.
  int64_t lost_mutations = 0;
  // Times the store came back from degraded, and mutations re-persisted then.
  int64_t recoveries = 0;
  int64_t repersisted_mutations = 0;
  // Attempts to resume since Open (each starts with a probe file), and of
  // them the ones whose probe worked, so the database was reopened.
  int64_t resume_attempts = 0;
  int64_t reopen_attempts = 0;
};

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
  // Whether Open refuses a WAL that lost acknowledged writes (kStrict) or
  // opens what survived and reports the loss (kTolerate, default).
  WalRecoveryMode wal_recovery = WalRecoveryMode::kTolerate;
  // While degraded, the period of the attempts to reopen the database
  // read-write. Shorter: faster recovery, more failed opens logged by
  // RocksDB. Default 2000 ms; >= 1. After each failed attempt the period
  // doubles, up to max_resume_interval_ms; it restarts from here on success.
  int resume_interval_ms = 2000;
  // Longest period between resume attempts (at least resume_interval_ms is
  // used). Longer: fewer probes of a disk that stays full, a later recovery
  // once it is freed. Default 30000 ms; >= 1.
  int max_resume_interval_ms = 30000;
  // Free space the store's volume must have before a resume is tried (read
  // with statvfs): a disk that was full often has a few KiB again right
  // after a failed write (a partial file removed), enough for the probe but
  // not for the next flush, and resuming there would flap between degraded
  // and healthy (and keep the DraftStoreDegraded alert from ever firing).
  // Default 64 MiB; 0 turns the check off.
  int64_t resume_min_free_bytes = int64_t{64} << 20;
  // Most bytes (keys plus ~48 bytes per entry) of mutations kept in memory
  // while degraded. Adds to one key are summed, so this bounds distinct
  // nodes touched rather than tokens. Past it the backlog is dropped and the
  // store stays degraded until restart. Default 256 MiB.
  int64_t max_backlog_bytes = int64_t{256} << 20;
  // Called (on the writer thread, or in Open) with the new health whenever
  // the store becomes degraded or healthy. Must not block on the store
  // (Flush()/Close()). May be empty.
  std::function<void(const StoreHealth&)> on_health_change;
  // The file system under RocksDB and the ACK marker. Null (default): the
  // POSIX one; tests pass a FaultFileSystem (draftsvc/testing/).
  std::shared_ptr<rocksdb::FileSystem> file_system;
  // Tests only (leveldb's TEST_ habit): called on the writer thread during
  // a resume, after the old database is closed and before the new one is
  // opened, with no lock of the store held. May be empty.
  std::function<void()> TEST_before_reopen;
};

// Receives a full scan (TrieStore::Scan) in key order: every namespace
// first, then every node with parents before their children, then every
// n-gram pool entry (by namespace, then key length, key, continuation: a
// key's entries are consecutive, a continuation before its extensions).
class TrieScanVisitor {
 public:
  virtual ~TrieScanVisitor() = default;
  virtual absl::Status OnNamespace(absl::string_view name_space,
                                   int32_t vocab_size) = 0;
  // `path` is valid only during the call.
  virtual absl::Status OnNode(absl::string_view name_space,
                              absl::Span<const int32_t> path,
                              int64_t count) = 0;
  // One pool entry (TrieMutation::Table::kNgramPool). `key` and
  // `continuation` are valid only during the call; `count` is what the
  // mutations left (any int64: the store does not check it). Default:
  // ignores the entry (a visitor that only rebuilds tries).
  virtual absl::Status OnNgram(absl::string_view name_space,
                               absl::Span<const int32_t> key,
                               absl::Span<const int32_t> continuation,
                               int64_t count) {
    return absl::OkStatus();
  }
};

class TrieStore : public MutationSink {
 public:
  // Opens (or creates) the database in directory `path` and starts the
  // writer thread. Errors name the path: UNAVAILABLE if another process (or
  // another TrieStore in this one) holds the directory's lock;
  // FAILED_PRECONDITION if the database is corrupt, has another format
  // version, or is not a lookahead trie store, if WAL recovery lost
  // acknowledged writes under WalRecoveryMode::kStrict (or, under kStrict,
  // could not be checked: the directory is then unchanged), or if there is no
  // database and none can be created (a full or read-only disk); NOT_FOUND
  // if it is missing and !create_if_missing; INVALID_ARGUMENT on bad
  // options. An existing database that cannot be written opens read-only:
  // the store starts degraded (Health()).
  static absl::StatusOr<std::unique_ptr<TrieStore>> Open(
      const std::string& path, const TrieStoreOptions& options);

  TrieStore(const TrieStore&) = delete;
  TrieStore& operator=(const TrieStore&) = delete;
  // Close()s, ignoring its status.
  ~TrieStore() override;

  // MutationSink. Queues `batch`; `done` runs exactly once on the writer
  // thread: OK once the batch is durable (see TrieStoreOptions::sync), or
  // INVALID_ARGUMENT (bad namespace, empty/negative/too deep path, token
  // outside [0, vocab_size), a pool path that is not [key_length in
  // [1, 255], key, non-empty continuation]; nothing of the batch is
  // written), or
  // UNAVAILABLE "not persisted" when the store is (or just became) degraded:
  // the batch is then kept for the recovery, see above. If the store is
  // closed, `done` runs on the calling thread with FAILED_PRECONDITION. A
  // batch is written atomically (one WriteBatch) and after every batch
  // submitted before it.
  void Submit(TrieMutationBatch batch,
              std::function<void(absl::Status)> done) override;

  // Runs `done` on the writer thread once every batch submitted before this
  // call is written and fsynced (in sync mode that is just a barrier; else
  // it syncs the WAL): OK iff everything accepted so far is durable;
  // UNAVAILABLE while degraded. Never blocks. If the store is closed: as in
  // Submit.
  void Flush(std::function<void(absl::Status)> done);
  // Blocking Flush. Must not be called from a `done` callback.
  absl::Status Flush();

  // Streams every namespace, node and n-gram pool entry to `visitor` from a
  // consistent snapshot (in TrieScanVisitor's order); stops at the first
  // non-OK status the visitor returns. DATA_LOSS on malformed keys or
  // values (the error names the store and what is malformed).
  absl::Status Scan(TrieScanVisitor& visitor) const;

  // The count stored for `path`, or NOT_FOUND. For tests and tools.
  absl::StatusOr<int64_t> GetCount(absl::string_view name_space,
                                   absl::Span<const int32_t> path) const;
  // The count stored for the pool entry (key, continuation), or NOT_FOUND.
  // For tests and tools. REQUIRES: the arguments satisfy
  // trie_format::NgramKey's requirements.
  absl::StatusOr<int64_t> GetNgramCount(
      absl::string_view name_space, absl::Span<const int32_t> key,
      absl::Span<const int32_t> continuation) const;

  // Batches queued or being written, not yet acknowledged.
  int64_t PendingBatches() const;
  // The storage state now.
  StoreHealth Health() const;
  // Health().degraded, without a lock.
  bool degraded() const { return degraded_flag_.load(); }
  // What WAL recovery dropped when Open ran. Constant after Open.
  const WalRecoveryReport& wal_recovery() const { return wal_recovery_; }
  // Live SST bytes plus live WAL bytes on disk; 0 while the database is
  // being reopened.
  int64_t DiskBytes() const;
  const std::string& path() const { return path_; }
  const TrieStoreOptions& options() const { return options_; }

  // Drains the queue, syncs the WAL, stops the writer, flushes the memtable
  // to a table file (so the next Open replays no WAL) and closes RocksDB.
  // A degraded store tries once more to write what it holds; if it cannot,
  // Close returns UNAVAILABLE saying how many mutations were never
  // persisted. Later Submit/Flush calls fail with FAILED_PRECONDITION.
  // Idempotent.
  absl::Status Close();

 private:
  struct Pending {
    TrieMutationBatch batch;
    std::function<void(absl::Status)> done;
    absl::Status rejected;  // Non-OK: do not write; report this.
    bool is_flush = false;  // A Flush() barrier rather than a batch.
  };
  class Backlog;
  class ErrorListener;

  TrieStore(std::string path, TrieStoreOptions options);

  // ---- Opening (trie_store.cc) ----
  // Open's work after the options are checked: WAL analysis on a read-only
  // open, then the read-write open (or a degraded read-only start).
  absl::Status OpenAtStart();
  // OpenAtStart's first step: opens the database read-only (*ro: RocksDB's
  // status) with the round filter of `ignore`, reports what WAL recovery
  // dropped against `marker` and sets next_round_. Non-OK iff Open must
  // fail (corrupt, or a loss or an unchecked WAL under kStrict).
  absl::Status RecoverReadOnly(const std::optional<AckMarker>& marker,
                               uint64_t ignore, rocksdb::Status* ro);
  // After the read-write open failed with `rw`: Open's error, or (an I/O
  // error while the database is `readable`) a degraded read-only start.
  absl::Status StartReadOnly(const rocksdb::Status& rw, bool readable,
                             uint64_t ignore);
  // After the read-write open worked: the LOG, the format record and the
  // ACK marker.
  absl::Status StartWritable();
  // Opens the database into *db read-write (read_only=false) or read-only
  // with the round filter `filter` (which is filled). Returns RocksDB's
  // status. Takes no lock. REQUIRES: no other instance of this store's
  // database is open read-write.
  rocksdb::Status OpenDb(bool read_only, RoundWalFilter* filter,
                         std::unique_ptr<rocksdb::DB>* db) const;
  // The error of a read while db_ is null (closed, or being reopened).
  absl::Status NoDbError() const ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // The file system under RocksDB and the marker.
  rocksdb::FileSystem* FileSystem() const;
  // Checks the format record and loads the known namespaces. Returns true
  // iff the format record must be written: the database is empty, or has
  // an older (readable) version, which the record's rewrite upgrades.
  absl::StatusOr<bool> LoadFormat();

  // ---- The writer thread (trie_store_writer.cc) ----
  void WriterLoop();
  // Writes one round; runs the callbacks. Called only by the writer thread.
  void WriteRound(std::deque<Pending> round);
  // WriteRound's group commit of the round's accepted batches. Returns
  // whether they are written (if not, the store is degraded now).
  bool WriteRoundBatch(const std::deque<Pending>& round);
  // Appends the round's accepted batches to *wb (adds to one key summed,
  // pool rows last); *new_namespaces gets the namespaces whose metadata key
  // it writes.
  void AppendRound(const std::deque<Pending>& round, rocksdb::WriteBatch* wb,
                   std::vector<std::string>* new_namespaces) const;
  // Keeps the round's accepted batches in the backlog for the recovery, or
  // counts them lost if the backlog overflows (now or before).
  void KeepForRecovery(const std::deque<Pending>& round)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Syncs the WAL if the round holds a Flush, then runs every callback of
  // the round (`written`: its batches are written).
  void AcknowledgeRound(std::deque<Pending>& round, bool has_flush,
                        bool written) ABSL_LOCKS_EXCLUDED(mu_);
  // Syncs the WAL if anything was written since the last sync.
  absl::Status SyncWalIfDirty();
  // Writes `wb` (prefixed with the next round's tag by the caller) and, iff
  // it worked, advances the round and the ACK marker. Returns OK iff `wb`
  // is written; *marker is then the status of the marker's write (non-OK:
  // the data is applied but the disk is failing; the caller degrades).
  // Writer thread only.
  absl::Status WriteTagged(rocksdb::WriteBatch& wb, bool sync,
                           absl::Status* marker);
  // The ACK marker: read at Open, overwritten after every acknowledged
  // round (`sync`: fsynced too).
  absl::Status WriteMarker(bool sync);
  // Sets the marker's sequence number and current WAL file and size from
  // the open database (the position a later open compares with).
  void MarkWalPosition() ABSL_LOCKS_EXCLUDED(db_mu_);
  // Whether RocksDB reported a background error since the last call.
  absl::Status TakeBackgroundError();

  // ---- The degraded state (trie_store_degraded.cc) ----
  // Enters (or stays in) the degraded state because of `error`; schedules
  // the next resume attempt (backing off if already degraded).
  void EnterDegraded(const absl::Status& error);
  // OK iff a small file can be created, written and fsynced in the
  // directory (through FileSystem(), so injected faults apply); removes it.
  absl::Status ProbeWritable();
  // While degraded: probes, reopens read-write and re-writes the backlog.
  void TryResume();
  // Counts a resume attempt; false (and the next attempt put off) once the
  // backlog overflowed, as only a restart can resume then.
  bool BeginResumeAttempt() ABSL_LOCKS_EXCLUDED(mu_);
  // Closes the database and opens it read-write (read-only if that fails,
  // so the data stays readable), with no lock held meanwhile. Returns the
  // read-write open's status.
  rocksdb::Status ReopenDb() ABSL_LOCKS_EXCLUDED(db_mu_);
  // After a reopen: moves the ACK marker on and writes the backlog. Returns
  // false iff the store is degraded again.
  bool RepersistBacklog();
  // Back to healthy: drops the backlog, resets the backoff, notifies.
  void LeaveDegraded() ABSL_LOCKS_EXCLUDED(mu_);
  void NotifyHealth();

  // Constant after construction.
  const std::string path_;
  const TrieStoreOptions options_;
  std::unique_ptr<rocksdb::Env> env_;        // Null: the default Env.
  std::shared_ptr<StoreInfoLog> info_log_;   // RocksDB's info log.
  std::shared_ptr<ErrorListener> listener_;  // RocksDB background errors.
  WalRecoveryReport wal_recovery_;           // Set by Open.

  // db_ is swapped only by Open, the writer thread (reopen) and Close, under
  // db_mu_ held exclusively; everything else reads it under a shared lock.
  mutable absl::Mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_ ABSL_GUARDED_BY(db_mu_);
  bool db_writable_ ABSL_GUARDED_BY(db_mu_) = false;
  bool reopening_ ABSL_GUARDED_BY(db_mu_) = false;  // db_ null meanwhile.

  // Owned by the writer thread (and Open/Close before/after it runs).
  absl::flat_hash_set<std::string> known_namespaces_;  // Meta key written.
  bool wal_dirty_ = false;
  bool degraded_ = false;  // The writer's copy of health_.degraded.
  std::unique_ptr<Backlog> backlog_;
  absl::Time next_resume_ = absl::InfinitePast();
  absl::Duration resume_backoff_;  // Period to the next resume attempt.
  std::unique_ptr<rocksdb::FSRandomRWFile> marker_file_;
  AckMarker marker_;         // Last acknowledged round.
  uint64_t next_round_ = 1;  // Tag of the next write.

  mutable absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_batches_ ABSL_GUARDED_BY(mu_) = 0;  // Not flush barriers.
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;       // Batches being written.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  StoreHealth health_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> degraded_flag_{false};  // health_.degraded.

  std::thread writer_;    // Started by Open, joined by Close.
  std::string claimed_path_;  // Set by Open: this process's claim on path_.
  absl::Mutex close_mu_;      // Serializes Close().
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_STORE_H_
