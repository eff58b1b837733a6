// TrieStore: the writer thread. Submit and Flush queue; one thread drains
// the queue a round at a time into one WriteBatch (group commit), advances
// the ACK marker and runs the callbacks. A round that cannot be written is
// kept for the recovery (trie_store_degraded.cc).
#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "draftsvc/storage/trie_format.h"
#include "draftsvc/storage/trie_store.h"
#include "draftsvc/storage/trie_store_internal.h"
#include "rocksdb/db.h"
#include "rocksdb/file_system.h"
#include "rocksdb/transaction_log.h"
#include "rocksdb/write_batch.h"

namespace lookahead::draftsvc {
namespace {

namespace fmt = trie_format;
using trie_store_internal::EraseNamespaceRows;
using trie_store_internal::IsNgramPoolWipe;
using trie_store_internal::NgramRowKey;
using trie_store_internal::NgramRowWrite;
using trie_store_internal::ValidateBatch;
using trie_store_internal::WriteNgramRows;

}  // namespace

void TrieStore::Submit(TrieMutationBatch batch,
                       std::function<void(absl::Status)> done) {
  Pending p;
  p.rejected = ValidateBatch(batch);
  p.batch = std::move(batch);
  p.done = std::move(done);
  {
    absl::MutexLock lock(&mu_);
    if (!closing_) {
      queue_.push_back(std::move(p));
      ++queued_batches_;
      return;
    }
  }
  p.done(absl::FailedPreconditionError(
      absl::StrCat("trie store ", path_, " is closed")));
}

void TrieStore::Flush(std::function<void(absl::Status)> done) {
  Pending p;
  p.is_flush = true;
  p.done = std::move(done);
  {
    absl::MutexLock lock(&mu_);
    if (!closing_) {
      queue_.push_back(std::move(p));
      return;
    }
  }
  p.done(absl::FailedPreconditionError(
      absl::StrCat("trie store ", path_, " is closed")));
}

absl::Status TrieStore::Flush() {
  absl::Mutex mu;
  bool finished = false;
  absl::Status result;
  Flush([&](absl::Status s) {
    absl::MutexLock lock(&mu);
    result = std::move(s);
    finished = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&finished));
  return result;
}

void TrieStore::WriterLoop() {
  absl::Time last_sync = absl::Now();
  const bool periodic = !options_.sync && options_.sync_interval_ms > 0;
  const absl::Duration interval = absl::Milliseconds(options_.sync_interval_ms);
  auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || closing_;
  };
  while (true) {
    std::deque<Pending> round;
    {
      absl::MutexLock lock(&mu_);
      if (degraded_) {
        mu_.AwaitWithTimeout(
            absl::Condition(&has_work),
            std::max(next_resume_ - absl::Now(), absl::ZeroDuration()));
      } else if (periodic) {
        mu_.AwaitWithTimeout(absl::Condition(&has_work), interval);
      } else {
        mu_.Await(absl::Condition(&has_work));
      }
      if (queue_.empty() && closing_) break;
      size_t mutations = 0;
      int64_t batches = 0;
      while (!queue_.empty()) {
        size_t next = queue_.front().batch.mutations.size();
        if (!round.empty() &&
            mutations + next >
                static_cast<size_t>(options_.max_group_mutations)) {
          break;
        }
        mutations += next;
        if (!queue_.front().is_flush) ++batches;
        round.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_batches_ -= batches;
      in_flight_ = batches;
    }
    if (degraded_ && absl::Now() >= next_resume_) TryResume();
    if (!round.empty()) WriteRound(std::move(round));
    if (!degraded_ && periodic && absl::Now() - last_sync >= interval) {
      absl::Status s = SyncWalIfDirty();
      if (!s.ok()) EnterDegraded(s);
      last_sync = absl::Now();
    }
  }
  // Closing: a last chance to write what was kept, then a last sync.
  if (degraded_) TryResume();
  if (!degraded_) {
    absl::Status s = SyncWalIfDirty();
    if (!s.ok()) EnterDegraded(s);
  }
}

absl::Status TrieStore::TakeBackgroundError() { return listener_->Take(); }

absl::Status TrieStore::SyncWalIfDirty() {
  if (!wal_dirty_) return absl::OkStatus();
  // DB::SyncWAL after a failed WAL write asserts inside RocksDB: never call
  // it once anything failed.
  absl::Status bg = TakeBackgroundError();
  if (!bg.ok()) return bg;
  rocksdb::Status s;
  {
    absl::ReaderMutexLock lock(&db_mu_);
    s = db_->SyncWAL();
  }
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "trie store ", path_, ": WAL sync failed: ", s.ToString()));
  }
  wal_dirty_ = false;
  return absl::OkStatus();
}

absl::Status TrieStore::WriteTagged(rocksdb::WriteBatch& wb, bool sync,
                                    absl::Status* marker) {
  *marker = absl::OkStatus();
  absl::Status bg = TakeBackgroundError();
  if (!bg.ok()) return bg;
  rocksdb::Status s;
  std::unique_ptr<rocksdb::LogFile> wal;
  {
    absl::ReaderMutexLock lock(&db_mu_);
    if (!db_writable_) {
      return absl::UnavailableError(
          absl::StrCat("trie store ", path_, " is open read-only"));
    }
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    s = db_->Write(wo, &wb);
    if (s.ok()) {
      marker_.sequence = db_->GetLatestSequenceNumber();
      if (!db_->GetCurrentWalFile(&wal).ok()) wal.reset();
    }
  }
  if (!s.ok()) {
    // The round was not applied; a copy of it RocksDB may still find in the
    // WAL (a write whose fsync failed) must not be replayed on top of the
    // backlog that re-writes it. Best effort: the disk is failing.
    marker_.ignore_from_round = next_round_;
    WriteMarker(/*sync=*/true).IgnoreError();
    return absl::UnavailableError(
        absl::StrCat("trie store ", path_, ": write failed: ", s.ToString()));
  }
  if (!sync) wal_dirty_ = true;
  const uint64_t round = next_round_++;
  marker_.round = round;
  if (wal != nullptr) {
    if (wal->LogNumber() != marker_.wal_number) {
      marker_.wal_number = wal->LogNumber();
      marker_.wal_first_round = round;
    }
    marker_.wal_bytes = wal->SizeFileBytes();
  }
  // The data is written; a marker that cannot be is a failing disk.
  *marker = WriteMarker(/*sync=*/false);
  return absl::OkStatus();
}

void TrieStore::MarkWalPosition() {
  absl::ReaderMutexLock lock(&db_mu_);
  marker_.sequence = db_->GetLatestSequenceNumber();
  std::unique_ptr<rocksdb::LogFile> wal;
  if (db_->GetCurrentWalFile(&wal).ok() && wal != nullptr) {
    marker_.wal_number = wal->LogNumber();
    marker_.wal_bytes = wal->SizeFileBytes();
  }
}

absl::Status TrieStore::WriteMarker(bool sync) {
  rocksdb::FileSystem* fs = FileSystem();
  const std::string name = absl::StrCat(path_, "/", kAckMarkerFile);
  rocksdb::IOStatus s;
  if (marker_file_ == nullptr) {
    if (!fs->FileExists(name, rocksdb::IOOptions(), nullptr).ok()) {
      std::unique_ptr<rocksdb::FSWritableFile> created;
      s = fs->NewWritableFile(name, rocksdb::FileOptions(), &created, nullptr);
      if (s.ok()) s = created->Close(rocksdb::IOOptions(), nullptr);
    }
    if (s.ok()) {
      s = fs->NewRandomRWFile(name, rocksdb::FileOptions(), &marker_file_,
                              nullptr);
    }
  }
  const std::string bytes = EncodeAckMarker(marker_);
  if (s.ok()) {
    s = marker_file_->Write(0, bytes, rocksdb::IOOptions(), nullptr);
  }
  if (s.ok() && sync) s = marker_file_->Sync(rocksdb::IOOptions(), nullptr);
  if (!s.ok()) {
    marker_file_.reset();
    return absl::UnavailableError(
        absl::StrCat("trie store ", path_, ": cannot write ", kAckMarkerFile,
                     ": ", s.ToString()));
  }
  return absl::OkStatus();
}

void TrieStore::WriteRound(std::deque<Pending> round) {
  bool has_flush = false;
  bool has_writes = false;
  for (const Pending& p : round) {
    if (p.is_flush) {
      has_flush = true;
    } else if (p.rejected.ok()) {
      has_writes = true;
    }
  }
  const bool written = has_writes && !degraded_ && WriteRoundBatch(round);
  if (has_writes && !written) KeepForRecovery(round);
  AcknowledgeRound(round, has_flush, written);
}

bool TrieStore::WriteRoundBatch(const std::deque<Pending>& round) {
  rocksdb::WriteBatch wb;
  wb.PutLogData(RoundTag(next_round_));
  std::vector<std::string> new_namespaces;
  AppendRound(round, &wb, &new_namespaces);
  absl::Status marker_written;
  absl::Status s = WriteTagged(wb, options_.sync, &marker_written);
  if (!s.ok()) {
    EnterDegraded(s);
    return false;
  }
  for (std::string& name : new_namespaces) {
    known_namespaces_.insert(std::move(name));
  }
  // The round is applied (and acknowledged below); later ones are not.
  if (!marker_written.ok()) EnterDegraded(marker_written);
  return true;
}

void TrieStore::AppendRound(const std::deque<Pending>& round,
                            rocksdb::WriteBatch* wb,
                            std::vector<std::string>* new_namespaces) const {
  // Adds to one key within the round are summed into one merge operand
  // (hot prefixes are hit by almost every window). A set or a delete ends
  // the summing so that batch order is kept.
  absl::flat_hash_map<std::string, uint64_t> adds;
  std::vector<std::pair<std::string, uint64_t>> sorted_adds;
  // Pool rows fold per entry (NgramRowWrite) and are written last: no
  // trie mutation, range deletes included, touches their keys.
  absl::flat_hash_map<std::string, NgramRowWrite> ngram_rows;
  auto flush_adds = [&] {
    // In key order: the memtable's skiplist inserts sequential keys
    // cheaply (its splice hint stays valid), random ones dominate the
    // write cost.
    sorted_adds.assign(std::make_move_iterator(adds.begin()),
                       std::make_move_iterator(adds.end()));
    std::sort(sorted_adds.begin(), sorted_adds.end());
    for (const auto& [key, delta] : sorted_adds) {
      wb->Merge(key, fmt::EncodeFixed64(delta));
    }
    adds.clear();
  };
  for (const Pending& p : round) {
    if (p.is_flush || !p.rejected.ok()) continue;
    const TrieMutationBatch& b = p.batch;
    if (!known_namespaces_.contains(b.name_space) &&
        std::find(new_namespaces->begin(), new_namespaces->end(),
                  b.name_space) == new_namespaces->end()) {
      wb->Put(fmt::NamespaceKey(b.name_space),
              fmt::EncodeFixed32(static_cast<uint32_t>(b.vocab_size)));
      new_namespaces->push_back(b.name_space);
    }
    for (const TrieMutation& m : b.mutations) {
      if (IsNgramPoolWipe(m)) {
        // Pool rows go last: the ones folded so far are moot, later ones
        // land after the range delete.
        EraseNamespaceRows(b.name_space, &ngram_rows);
        const std::string begin = fmt::NgramPrefix(b.name_space);
        wb->DeleteRange(begin, fmt::PrefixSuccessor(begin));
        continue;
      }
      if (m.table == TrieMutation::Table::kNgramPool) {
        ngram_rows[NgramRowKey(b.name_space, m.path)].Apply(m);
        continue;
      }
      std::string key = fmt::NodeKey(b.name_space, m.path);
      switch (m.kind) {
        case TrieMutation::Kind::kAdd:
          adds[std::move(key)] += static_cast<uint64_t>(m.value);
          break;
        case TrieMutation::Kind::kSetCount:
          flush_adds();
          wb->Put(key, fmt::EncodeFixed64(static_cast<uint64_t>(m.value)));
          break;
        case TrieMutation::Kind::kDeleteSubtree:
          flush_adds();
          wb->DeleteRange(key, fmt::PrefixSuccessor(key));
          break;
      }
    }
  }
  flush_adds();
  WriteNgramRows(ngram_rows, wb);
}

void TrieStore::KeepForRecovery(const std::deque<Pending>& round) {
  // Kept for the recovery (in order), unless the backlog overflows.
  int64_t mutations = 0;
  for (const Pending& p : round) {
    if (p.is_flush || !p.rejected.ok()) continue;
    mutations += static_cast<int64_t>(p.batch.mutations.size());
  }
  bool overflowed;
  {
    absl::MutexLock lock(&mu_);
    overflowed = health_.lost_mutations > 0;
  }
  // backlog_ and known_namespaces_ are this thread's: built without mu_,
  // which Submit() (and so every Retrieve of the namespace) needs.
  int64_t lost = 0;
  if (!overflowed) {
    for (const Pending& p : round) {
      if (p.is_flush || !p.rejected.ok()) continue;
      const TrieMutationBatch& b = p.batch;
      if (!known_namespaces_.contains(b.name_space) &&
          backlog_->namespaces.insert(b.name_space).second) {
        backlog_->AddPut(
            fmt::NamespaceKey(b.name_space),
            fmt::EncodeFixed32(static_cast<uint32_t>(b.vocab_size)));
      }
      backlog_->Add(b);
    }
    if (backlog_->bytes() > options_.max_backlog_bytes) {
      lost = backlog_->mutations();
      backlog_ = std::make_unique<Backlog>();
    }
  }
  absl::MutexLock lock(&mu_);
  if (overflowed) {
    health_.lost_mutations += mutations;
  } else {
    health_.lost_mutations = lost;
    health_.unpersisted_mutations = backlog_->mutations();
  }
}

void TrieStore::AcknowledgeRound(std::deque<Pending>& round, bool has_flush,
                                 bool written) {
  absl::Status flush_status;
  if (has_flush && !degraded_) {
    flush_status = SyncWalIfDirty();
    if (!flush_status.ok()) EnterDegraded(flush_status);
  }
  absl::Status not_persisted;
  if (degraded_) {
    StoreHealth h = Health();
    not_persisted = absl::UnavailableError(absl::StrCat(
        "trie store ", path_,
        " is degraded (read-only): applied in memory, not persisted: ",
        h.error));
  }
  {
    absl::MutexLock lock(&mu_);
    in_flight_ = 0;  // Acknowledged from here on.
  }
  for (Pending& p : round) {
    if (p.is_flush) {
      p.done(degraded_ ? not_persisted : flush_status);
    } else if (!p.rejected.ok()) {
      p.done(p.rejected);
    } else {
      p.done(written ? absl::OkStatus() : not_persisted);
    }
  }
}

}  // namespace lookahead::draftsvc
