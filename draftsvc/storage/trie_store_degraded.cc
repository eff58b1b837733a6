// TrieStore: the degraded state. A failed write turns the store degraded;
// the batches accepted meanwhile are kept in a Backlog, and the writer
// thread tries now and then to probe the disk, reopen the database
// read-write and write the backlog, after which the store is healthy again.
#include <sys/statvfs.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "draftsvc/storage/store_info_log.h"
#include "draftsvc/storage/trie_format.h"
#include "draftsvc/storage/trie_store.h"
#include "draftsvc/storage/trie_store_internal.h"
#include "rocksdb/db.h"
#include "rocksdb/file_system.h"
#include "rocksdb/write_batch.h"

namespace lookahead::draftsvc {
namespace {

namespace fmt = trie_format;
using trie_store_internal::EraseNamespaceRows;
using trie_store_internal::IsNgramPoolWipe;
using trie_store_internal::NgramRowKey;
using trie_store_internal::WriteNgramRows;

// Created, written, fsynced and removed by a resume attempt before it
// reopens the database (TrieStore::ProbeWritable).
constexpr char kResumeProbeFile[] = "LOOKAHEAD-PROBE";
constexpr size_t kResumeProbeBytes = 4096;

}  // namespace

void TrieStore::Backlog::AddPut(std::string key, std::string value) {
  bytes_ += static_cast<int64_t>(key.size() + value.size()) + 48;
  ++mutations_;
  segments_.push_back({Segment::kPut, {}, std::move(key), std::move(value)});
}

void TrieStore::Backlog::Add(const TrieMutationBatch& b) {
  for (const TrieMutation& m : b.mutations) {
    if (IsNgramPoolWipe(m)) {
      // Rows kept before it are moot; later ones are written after it.
      ++mutations_;
      EraseNamespaceRows(b.name_space, &ngram_rows_);
      std::string begin = fmt::NgramPrefix(b.name_space);
      std::string end = fmt::PrefixSuccessor(begin);
      bytes_ += static_cast<int64_t>(begin.size() + end.size()) + 48;
      segments_.push_back(
          {Segment::kDeleteRange, {}, std::move(begin), std::move(end)});
      continue;
    }
    if (m.table == TrieMutation::Table::kNgramPool) {
      ++mutations_;
      auto [it, inserted] =
          ngram_rows_.try_emplace(NgramRowKey(b.name_space, m.path));
      if (inserted) bytes_ += static_cast<int64_t>(it->first.size()) + 48;
      it->second.Apply(m);
      continue;
    }
    std::string key = fmt::NodeKey(b.name_space, m.path);
    ++mutations_;
    switch (m.kind) {
      case TrieMutation::Kind::kAdd: {
        if (segments_.empty() || segments_.back().kind != Segment::kAdds) {
          segments_.push_back({Segment::kAdds, {}, {}, {}});
        }
        auto [it, inserted] =
            segments_.back().adds.try_emplace(std::move(key), 0);
        if (inserted) bytes_ += static_cast<int64_t>(it->first.size()) + 48;
        it->second += static_cast<uint64_t>(m.value);
        break;
      }
      case TrieMutation::Kind::kSetCount:
        AddPut(std::move(key),
               fmt::EncodeFixed64(static_cast<uint64_t>(m.value)));
        --mutations_;
        break;
      case TrieMutation::Kind::kDeleteSubtree: {
        std::string end = fmt::PrefixSuccessor(key);
        bytes_ += static_cast<int64_t>(key.size() + end.size()) + 48;
        segments_.push_back(
            {Segment::kDeleteRange, {}, std::move(key), std::move(end)});
        break;
      }
    }
  }
}

void TrieStore::Backlog::WriteTo(rocksdb::WriteBatch* wb) const {
  std::vector<std::pair<std::string, uint64_t>> sorted;
  for (const Segment& s : segments_) {
    switch (s.kind) {
      case Segment::kAdds:
        sorted.assign(s.adds.begin(), s.adds.end());
        std::sort(sorted.begin(), sorted.end());
        for (const auto& [key, delta] : sorted) {
          wb->Merge(key, fmt::EncodeFixed64(delta));
        }
        break;
      case Segment::kPut:
        wb->Put(s.key, s.value);
        break;
      case Segment::kDeleteRange:
        wb->DeleteRange(s.key, s.value);
        break;
    }
  }
  // Pool rows are disjoint from every trie key and range above, and
  // follow every pool wipe there (Add erased the rows before a wipe).
  WriteNgramRows(ngram_rows_, wb);
}

void TrieStore::EnterDegraded(const absl::Status& error) {
  const bool was_degraded = degraded_;
  degraded_ = true;
  // The first attempt after resume_interval_ms, each later one twice as late
  // as the one before (up to max_resume_interval_ms).
  const absl::Duration interval =
      absl::Milliseconds(options_.resume_interval_ms);
  if (!was_degraded) {
    resume_backoff_ = interval;
  } else {
    resume_backoff_ =
        std::min(2 * resume_backoff_,
                 std::max(interval,
                          absl::Milliseconds(options_.max_resume_interval_ms)));
  }
  next_resume_ = absl::Now() + resume_backoff_;
  if (backlog_ == nullptr) backlog_ = std::make_unique<Backlog>();
  {
    absl::MutexLock lock(&db_mu_);
    db_writable_ = false;
  }
  {
    absl::MutexLock lock(&mu_);
    health_.degraded = true;
    degraded_flag_.store(true);
    health_.error = std::string(error.message());
    ++health_.write_errors;
  }
  if (!was_degraded) NotifyHealth();
}

absl::Status TrieStore::ProbeWritable() {
  if (options_.resume_min_free_bytes > 0) {
    struct statvfs volume;
    if (statvfs(path_.c_str(), &volume) == 0) {
      const int64_t free_bytes = static_cast<int64_t>(volume.f_bavail) *
                                 static_cast<int64_t>(volume.f_frsize);
      if (free_bytes < options_.resume_min_free_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "trie store ", path_, " is on a volume with ", free_bytes >> 20,
            " MiB free; writing resumes once it has ",
            options_.resume_min_free_bytes >> 20,
            " MiB (--store_resume_min_free_mib)"));
      }
    }
  }
  rocksdb::FileSystem* fs = FileSystem();
  const std::string name = absl::StrCat(path_, "/", kResumeProbeFile);
  const rocksdb::IOOptions io;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s =
      fs->NewWritableFile(name, rocksdb::FileOptions(), &file, nullptr);
  if (s.ok()) {
    s = file->Append(std::string(kResumeProbeBytes, '\0'), io, nullptr);
  }
  if (s.ok()) s = file->Fsync(io, nullptr);
  if (file != nullptr) {
    rocksdb::IOStatus closed = file->Close(io, nullptr);
    if (s.ok()) s = closed;
  }
  fs->DeleteFile(name, io, nullptr).PermitUncheckedError();
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("trie store ", path_, " still cannot be written (probe ",
                     kResumeProbeFile, "): ", s.ToString()));
  }
  return absl::OkStatus();
}

void TrieStore::TryResume() {
  if (!BeginResumeAttempt()) return;
  // 1. A cheap probe first: a full reopen replays the WAL, and a disk that
  // still fails is the common case.
  absl::Status probe = ProbeWritable();
  if (!probe.ok()) {
    EnterDegraded(probe);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    ++health_.reopen_attempts;
  }
  // 2. Reopen read-write.
  rocksdb::Status s = ReopenDb();
  if (!s.ok()) {
    EnterDegraded(absl::UnavailableError(absl::StrCat(
        "trie store ", path_, " still cannot be written: ", s.ToString())));
    return;
  }
  // 3. Re-write what was kept; healthy once that and the marker are down.
  if (!RepersistBacklog()) return;
  LeaveDegraded();
}

bool TrieStore::BeginResumeAttempt() {
  absl::MutexLock lock(&mu_);
  // The disk no longer follows memory: only a restart (which reloads the
  // tries from disk) makes them agree again.
  if (health_.lost_mutations > 0) {
    next_resume_ =
        absl::Now() + absl::Milliseconds(options_.max_resume_interval_ms);
    return false;
  }
  ++health_.resume_attempts;
  return true;
}

rocksdb::Status TrieStore::ReopenDb() {
  // db_ is null meanwhile (readers say so); the slow DB::Open runs with no
  // lock held, so readers, Submit and /metrics never wait for it. Only this
  // thread swaps db_ while the writer runs.
  std::unique_ptr<rocksdb::DB> old;
  {
    absl::MutexLock lock(&db_mu_);
    old = std::move(db_);
    db_writable_ = false;
    reopening_ = true;
  }
  if (old != nullptr) {
    old->Close().PermitUncheckedError();
    old.reset();
  }
  if (options_.TEST_before_reopen) options_.TEST_before_reopen();
  std::unique_ptr<rocksdb::DB> fresh;
  RoundWalFilter filter(marker_.ignore_from_round);
  rocksdb::Status s = OpenDb(/*read_only=*/false, &filter, &fresh);
  if (!s.ok()) {
    // Still failing: keep the data readable (Stats, GetCount).
    RoundWalFilter ro_filter(marker_.ignore_from_round);
    OpenDb(/*read_only=*/true, &ro_filter, &fresh).PermitUncheckedError();
  }
  {
    absl::MutexLock lock(&db_mu_);
    db_ = std::move(fresh);
    db_writable_ = s.ok();
    reopening_ = false;
  }
  info_log_->TakeWalDrops();
  TakeBackgroundError().IgnoreError();  // The closed instance's.
  return s;
}

bool TrieStore::RepersistBacklog() {
  // Writable again. RocksDB recovered the old WAL and retired it, so the
  // failed rounds in it are never replayed again: their numbers are reused.
  MarkWalPosition();
  marker_.wal_first_round = next_round_;
  marker_.ignore_from_round = 0;
  absl::Status m = WriteMarker(/*sync=*/true);
  if (!m.ok()) {
    EnterDegraded(m);
    return false;
  }
  const int64_t kept = backlog_ != nullptr ? backlog_->mutations() : 0;
  if (backlog_ != nullptr && !backlog_->empty()) {
    rocksdb::WriteBatch wb;
    wb.PutLogData(RoundTag(next_round_));
    backlog_->WriteTo(&wb);
    absl::Status marker_written;
    absl::Status w = WriteTagged(wb, /*sync=*/true, &marker_written);
    if (!w.ok()) {
      EnterDegraded(w);
      return false;
    }
    for (const std::string& ns : backlog_->namespaces) {
      known_namespaces_.insert(ns);
    }
    // The backlog is on disk from here on: never write it twice.
    backlog_ = std::make_unique<Backlog>();
    {
      absl::MutexLock lock(&mu_);
      health_.unpersisted_mutations = 0;
      health_.repersisted_mutations += kept;
    }
    if (!marker_written.ok()) {
      // Written, but the disk is failing again: still degraded (no
      // recovery is reported), with an empty backlog.
      EnterDegraded(marker_written);
      return false;
    }
  }
  return true;
}

void TrieStore::LeaveDegraded() {
  backlog_.reset();
  degraded_ = false;
  resume_backoff_ = absl::Milliseconds(options_.resume_interval_ms);
  {
    absl::MutexLock lock(&mu_);
    health_.degraded = false;
    degraded_flag_.store(false);
    health_.error.clear();
    health_.unpersisted_mutations = 0;
    ++health_.recoveries;
  }
  NotifyHealth();
}

void TrieStore::NotifyHealth() {
  if (!options_.on_health_change) return;
  options_.on_health_change(Health());
}

StoreHealth TrieStore::Health() const {
  absl::MutexLock lock(&mu_);
  return health_;
}

}  // namespace lookahead::draftsvc
