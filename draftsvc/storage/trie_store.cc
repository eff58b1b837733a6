// TrieStore: opening (WAL-recovery analysis, the read-write open or a
// degraded read-only start, the format record) and closing. The writer
// thread is in trie_store_writer.cc, the degraded state in
// trie_store_degraded.cc, reads in trie_store_reads.cc.
#include "draftsvc/storage/trie_store.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/base/const_init.h"
#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "draftsvc/storage/store_info_log.h"
#include "draftsvc/storage/trie_format.h"
#include "draftsvc/storage/trie_store_internal.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/iterator.h"
#include "rocksdb/listener.h"
#include "rocksdb/merge_operator.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace lookahead::draftsvc {
namespace {

namespace fmt = trie_format;
using trie_store_internal::View;

// count += operand, both fixed64 two's-complement (wrapping add).
class Int64AddOperator : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice& /*key*/,
             const rocksdb::Slice* existing_value, const rocksdb::Slice& value,
             std::string* new_value,
             rocksdb::Logger* /*logger*/) const override {
    uint64_t base = 0;
    if (existing_value != nullptr &&
        !fmt::DecodeFixed64(
            absl::string_view(existing_value->data(), existing_value->size()),
            &base)) {
      return false;
    }
    uint64_t delta = 0;
    if (!fmt::DecodeFixed64(absl::string_view(value.data(), value.size()),
                            &delta)) {
      return false;
    }
    *new_value = fmt::EncodeFixed64(base + delta);
    return true;
  }
  const char* Name() const override { return fmt::kCountMergeOperatorName; }
};

// The store directories open in this process. RocksDB refuses a second
// open of a directory from the same process, and the kernel's lock table
// cannot tell that case apart (POSIX locks do not conflict within a process,
// and probing the LOCK file from here would release its lock).
absl::Mutex open_paths_mu(absl::kConstInit);
absl::flat_hash_set<std::string>& OpenPaths()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(open_paths_mu) {
  static auto* paths = new absl::flat_hash_set<std::string>();
  return *paths;
}

// The key under which `path` is claimed: its absolute, normalized form.
std::string PathKey(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : p.string();
}

// The pid of another process holding a write lock on `dir`/LOCK (the lock
// RocksDB takes with fcntl), or 0 if none. REQUIRES: this process does not
// have `dir` open (closing a descriptor drops this process's POSIX locks on
// the file).
pid_t LockHolder(const std::string& dir) {
  const int fd = ::open((dir + "/LOCK").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct flock probe = {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  pid_t holder = 0;
  if (::fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type != F_UNLCK) {
    holder = probe.l_pid;
  }
  ::close(fd);
  return holder;
}

// Whether files can be created in `dir`, or in its nearest existing
// ancestor if it does not exist yet: false on a read-only mount
// (access(2) answers EROFS even to root) or without write permission.
bool DirectoryWritable(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir);
  std::error_code ec;
  while (p.has_parent_path() && p != p.root_path() &&
         !std::filesystem::exists(p, ec)) {
    p = p.parent_path();
  }
  struct statvfs vfs;
  if (::statvfs(p.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0) {
    return false;
  }
  return ::access(p.c_str(), W_OK) == 0;
}

// What an operator should do about a directory that cannot be written.
constexpr char kNotWritableHint[] =
    "make it writable (a read-only mount or missing permission), or give "
    "--db_path a writable directory";

// Maps a RocksDB failure while opening the store at `path` to a Status
// naming the directory.
absl::Status OpenError(const std::string& path, const rocksdb::Status& s) {
  const std::string what = s.ToString();
  if (s.IsCorruption()) {
    return absl::FailedPreconditionError(
        absl::StrCat("trie store ", path, " is corrupt: ", what));
  }
  if (s.IsInvalidArgument() && absl::StrContains(what, "does not exist")) {
    return absl::NotFoundError(
        absl::StrCat("trie store ", path, " does not exist: ", what));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot open trie store ", path, ": ", what));
}

// OpenError for a failed read-write DB::Open. The cause of an I/O error is
// told by the kernel, never by the words of RocksDB's message: a lock that
// another process holds (UNAVAILABLE, naming its pid) or a directory that
// cannot be written (FAILED_PRECONDITION, saying what helps). REQUIRES: this
// process does not hold the directory's lock (see LockHolder).
absl::Status ReadWriteOpenError(const std::string& path,
                                const rocksdb::Status& s) {
  if (s.IsIOError()) {
    if (const pid_t holder = LockHolder(path); holder > 0) {
      return absl::UnavailableError(absl::StrCat(
          "trie store ", path, " is locked: process ", holder,
          " holds its LOCK file (another draftsvc on the same --db_path?): ",
          s.ToString()));
    }
    if (!DirectoryWritable(path)) {
      return absl::FailedPreconditionError(
          absl::StrCat("trie store ", path, " is not writable: ",
                       kNotWritableHint, " (", s.ToString(), ")"));
    }
  }
  return OpenError(path, s);
}

// The RocksDB options every open of the store uses.
rocksdb::Options StoreDbOptions(
    bool create_if_missing, rocksdb::Env* env,
    std::shared_ptr<rocksdb::Logger> info_log,
    std::shared_ptr<rocksdb::EventListener> errors) {
  rocksdb::Options o;
  o.create_if_missing = create_if_missing;
  o.merge_operator = std::make_shared<Int64AddOperator>();
  o.paranoid_checks = true;
  o.max_background_jobs = 2;
  o.keep_log_file_num = 4;
  // Our own LOG writer: RocksDB's asserts when it logs after a failed write.
  o.info_log = std::move(info_log);
  // Replay up to the first damaged record; wal_recovery.h reports the rest.
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // No automatic DB::Resume(): recovery is the store's reopen (TryResume).
  o.max_bgerror_resume_count = 0;
  o.listeners.push_back(std::move(errors));
  if (env != nullptr) o.env = env;
  return o;
}

// The marker file's content, or nullopt if it is missing or not valid.
std::optional<AckMarker> ReadMarkerFile(const std::string& path) {
  std::ifstream in(path + "/" + kAckMarkerFile, std::ios::binary);
  if (!in.good()) return std::nullopt;
  std::string bytes(kAckMarkerBytes, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(kAckMarkerBytes)) {
    return std::nullopt;
  }
  return DecodeAckMarker(bytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrieStore>> TrieStore::Open(
    const std::string& path, const TrieStoreOptions& options) {
  if (path.empty()) {
    return absl::InvalidArgumentError("trie store path is empty");
  }
  if (options.sync_interval_ms < 0 || options.max_group_mutations < 1 ||
      options.resume_interval_ms < 1 || options.max_resume_interval_ms < 1 ||
      options.max_backlog_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trie store options: sync_interval_ms must be >= 0 (got ",
        options.sync_interval_ms, "), max_group_mutations >= 1 (got ",
        options.max_group_mutations, "), resume_interval_ms >= 1 (got ",
        options.resume_interval_ms, "), max_resume_interval_ms >= 1 (got ",
        options.max_resume_interval_ms, ") and max_backlog_bytes >= 0 (got ",
        options.max_backlog_bytes, ")"));
  }
  if (options.create_if_missing) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create trie store directory ", path, ": ", ec.message(),
          DirectoryWritable(path) ? "" : absl::StrCat(": ", kNotWritableHint)));
    }
  }
  const std::string key = PathKey(path);
  {
    absl::MutexLock lock(&open_paths_mu);
    if (!OpenPaths().insert(key).second) {
      return absl::UnavailableError(
          absl::StrCat("trie store ", path,
                       " is locked: another store in this process has it "
                       "open (close it first)"));
    }
  }
  auto store = std::unique_ptr<TrieStore>(new TrieStore(path, options));
  store->claimed_path_ = key;  // Released by Close.
  absl::Status opened = store->OpenAtStart();
  if (!opened.ok()) return opened;
  store->writer_ = std::thread([s = store.get()] { s->WriterLoop(); });
  return store;
}

TrieStore::TrieStore(std::string path, TrieStoreOptions options)
    : path_(std::move(path)),
      options_(std::move(options)),
      env_(options_.file_system != nullptr
               ? rocksdb::NewCompositeEnv(options_.file_system)
               : nullptr),
      info_log_(std::make_shared<StoreInfoLog>(path_)),
      listener_(std::make_shared<ErrorListener>()),
      resume_backoff_(absl::Milliseconds(options_.resume_interval_ms)) {}

TrieStore::~TrieStore() { Close().IgnoreError(); }

rocksdb::Status TrieStore::OpenDb(bool read_only, RoundWalFilter* filter,
                                  std::unique_ptr<rocksdb::DB>* db) const {
  rocksdb::Options o = StoreDbOptions(options_.create_if_missing && !read_only,
                                      env_.get(), info_log_, listener_);
  // Used only while recovering inside DB::Open.
  o.wal_filter = filter;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = read_only ? rocksdb::DB::OpenForReadOnly(o, path_, &raw)
                                : rocksdb::DB::Open(o, path_, &raw);
  if (s.ok()) db->reset(raw);
  return s;
}

absl::Status TrieStore::NoDbError() const {
  if (reopening_) {
    return absl::UnavailableError(absl::StrCat(
        "trie store ", path_, " is being reopened (resuming writes); retry"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("trie store ", path_, " is closed"));
}

rocksdb::FileSystem* TrieStore::FileSystem() const {
  return options_.file_system != nullptr ? options_.file_system.get()
                                         : rocksdb::FileSystem::Default().get();
}

absl::StatusOr<bool> TrieStore::LoadFormat() {
  absl::ReaderMutexLock lock(&db_mu_);
  // Format record: checked if present; an empty database needs one.
  std::string version_bytes;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), fmt::FormatKey(), &version_bytes);
  bool needs_format = false;
  if (s.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    if (it->Valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trie store ", path_,
          " holds a RocksDB database that is not a lookahead trie store "
          "(no format record)"));
    }
    if (!it->status().ok()) return OpenError(path_, it->status());
    needs_format = true;
  } else if (!s.ok()) {
    return OpenError(path_, s);
  } else {
    uint32_t version = 0;
    if (!fmt::DecodeFixed32(version_bytes, &version)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trie store ", path_, " is corrupt: malformed format record"));
    }
    if (version < fmt::kOldestReadableFormatVersion ||
        version > fmt::kFormatVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trie store ", path_, " has format version ", version,
          "; this build reads versions ", fmt::kOldestReadableFormatVersion,
          "..", fmt::kFormatVersion));
    }
    // An older layout is a subset of this one: only its record changes.
    needs_format = version < fmt::kFormatVersion;
  }
  // Namespaces whose metadata is already on disk.
  const std::string begin(1, fmt::kNamespaceTag);
  const std::string end = fmt::PrefixSuccessor(begin);
  rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->Seek(begin); it->Valid(); it->Next()) {
    known_namespaces_.insert(std::string(View(it->key()).substr(1)));
  }
  if (!it->status().ok()) return OpenError(path_, it->status());
  return needs_format;
}

absl::Status TrieStore::OpenAtStart() {
  const std::optional<AckMarker> marker = ReadMarkerFile(path_);
  if (marker.has_value()) marker_ = *marker;
  const uint64_t ignore = marker_.ignore_from_round;

  // 1. Read-only, so nothing on disk changes yet: what did recovery drop?
  rocksdb::Status ro;
  absl::Status recovered = RecoverReadOnly(marker, ignore, &ro);
  if (!recovered.ok()) return recovered;

  // 2. Read-write.
  RoundWalFilter rw_filter(ignore);
  rocksdb::Status rw;
  {
    absl::MutexLock lock(&db_mu_);
    if (db_ != nullptr) {
      db_->Close().PermitUncheckedError();
      db_.reset();
    }
    rw = OpenDb(/*read_only=*/false, &rw_filter, &db_);
    db_writable_ = rw.ok();
  }
  info_log_->TakeWalDrops();
  listener_->Take().IgnoreError();
  if (!rw.ok()) return StartReadOnly(rw, /*readable=*/ro.ok(), ignore);
  return StartWritable();
}

absl::Status TrieStore::RecoverReadOnly(const std::optional<AckMarker>& marker,
                                        uint64_t ignore, rocksdb::Status* ro) {
  RoundWalFilter ro_filter(ignore);
  uint64_t recovered_sequence = 0;
  {
    std::unique_ptr<rocksdb::DB> db;
    *ro = OpenDb(/*read_only=*/true, &ro_filter, &db);
    absl::MutexLock lock(&db_mu_);
    db_ = std::move(db);
    if (ro->ok()) recovered_sequence = db_->GetLatestSequenceNumber();
  }
  std::vector<WalDropLine> drops = info_log_->TakeWalDrops();
  if (ro->ok()) {
    wal_recovery_ = AnalyzeWalRecovery(marker, ro_filter, std::move(drops),
                                       recovered_sequence);
  } else if (ro->IsCorruption()) {
    info_log_->Start(/*rotate=*/false);
    return OpenError(path_, *ro);
  } else if (options_.wal_recovery == WalRecoveryMode::kStrict &&
             std::filesystem::exists(path_ + "/CURRENT")) {
    // There is a database, but what its WAL recovery would drop cannot be
    // known: the read-write open below would recover and retire the WAL
    // unexamined.
    return absl::FailedPreconditionError(absl::StrCat(
        "trie store ", path_,
        ": cannot check WAL recovery (read-only open failed: ", ro->ToString(),
        "); refusing to start with --wal_recovery=strict (the directory is "
        "unchanged: fix the cause and retry, or start with "
        "--wal_recovery=tolerate)"));
  }
  if (options_.wal_recovery == WalRecoveryMode::kStrict &&
      wal_recovery_.LostAcknowledged()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trie store ", path_, ": ", wal_recovery_.Summary(),
        "; refusing to start with --wal_recovery=strict (the directory is "
        "unchanged: restore it, or start once with --wal_recovery=tolerate "
        "to accept the loss)"));
  }
  // Rounds go on from the last one that survived, so that they stay
  // consecutive (wal_recovery.h counts dropped records by them).
  uint64_t last_round = std::max(marker_.round, ro_filter.max_round());
  if (wal_recovery_.dropped_records > 0) {
    last_round = marker_.round - static_cast<uint64_t>(std::min<int64_t>(
                                     wal_recovery_.dropped_records,
                                     static_cast<int64_t>(marker_.round)));
  }
  next_round_ = last_round + 1;
  return absl::OkStatus();
}

absl::Status TrieStore::StartReadOnly(const rocksdb::Status& rw, bool readable,
                                      uint64_t ignore) {
  const absl::Status error = ReadWriteOpenError(path_, rw);
  // Another process's LOG stays as it is; else the lines of this start
  // are appended (the directory is not ours to rotate).
  if (error.code() != absl::StatusCode::kUnavailable) {
    info_log_->Start(/*rotate=*/false);
  }
  // Locked, corrupt, missing: as before. Any other I/O error (a full or
  // read-only disk) leaves an existing database readable.
  if (!rw.IsIOError() || error.code() == absl::StatusCode::kUnavailable) {
    return error;
  }
  if (!readable) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create trie store ", path_, ": ", rw.ToString(),
        DirectoryWritable(path_) ? "" : absl::StrCat(": ", kNotWritableHint)));
  }
  {
    absl::MutexLock lock(&db_mu_);
    RoundWalFilter filter(ignore);
    rocksdb::Status s = OpenDb(/*read_only=*/true, &filter, &db_);
    if (!s.ok()) return OpenError(path_, s);
  }
  absl::StatusOr<bool> needs_format = LoadFormat();
  if (!needs_format.ok()) return needs_format.status();
  EnterDegraded(absl::UnavailableError(absl::StrCat(
      error.message(), "; opened read-only, serving what it holds")));
  if (*needs_format) {
    backlog_->AddPut(fmt::FormatKey(), fmt::EncodeFixed32(fmt::kFormatVersion));
    absl::MutexLock lock(&mu_);
    health_.unpersisted_mutations = backlog_->mutations();
  }
  return absl::OkStatus();
}

absl::Status TrieStore::StartWritable() {
  // The directory's lock is ours: its LOG can be rotated.
  info_log_->Start(/*rotate=*/true);
  absl::StatusOr<bool> needs_format = LoadFormat();
  if (!needs_format.ok()) return needs_format.status();
  // The marker now describes what survived: a later open compares with it.
  MarkWalPosition();
  marker_.round = next_round_ - 1;
  marker_.wal_first_round = next_round_;
  marker_.ignore_from_round = 0;
  absl::Status m = WriteMarker(/*sync=*/true);
  if (!m.ok()) EnterDegraded(m);
  if (*needs_format) {
    rocksdb::WriteBatch wb;
    wb.PutLogData(RoundTag(next_round_));
    wb.Put(fmt::FormatKey(), fmt::EncodeFixed32(fmt::kFormatVersion));
    absl::Status marker_written;
    absl::Status w = degraded_
                         ? absl::UnavailableError("degraded")
                         : WriteTagged(wb, /*sync=*/true, &marker_written);
    if (!w.ok()) {
      if (!degraded_) EnterDegraded(w);
      backlog_->AddPut(fmt::FormatKey(),
                       fmt::EncodeFixed32(fmt::kFormatVersion));
    } else if (!marker_written.ok()) {
      EnterDegraded(marker_written);
    }
  }
  return absl::OkStatus();
}

absl::Status TrieStore::Close() {
  absl::MutexLock close_lock(&close_mu_);
  if (closed_) return absl::OkStatus();
  closed_ = true;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  if (writer_.joinable()) writer_.join();
  absl::Cleanup release = [this] {
    if (claimed_path_.empty()) return;
    absl::MutexLock lock(&open_paths_mu);
    OpenPaths().erase(claimed_path_);
  };
  absl::Status result;
  const StoreHealth health = Health();
  const int64_t never_persisted =
      health.unpersisted_mutations + health.lost_mutations;
  // Degraded with nothing unwritten (a read-only disk that was only read):
  // nothing is lost, an orderly close.
  if (health.degraded && never_persisted > 0) {
    result = absl::UnavailableError(absl::StrCat(
        "trie store ", path_, " closed degraded (", health.error,
        "): ", never_persisted,
        " trie mutations applied in memory were never persisted"));
  }
  absl::MutexLock lock(&db_mu_);
  if (db_ == nullptr) return result;
  // Persist the memtable as a table file so that the next Open need not
  // replay the WAL (a faster restart after a clean shutdown).
  if (db_writable_ && !health.degraded) {
    rocksdb::Status s = db_->Flush(rocksdb::FlushOptions());
    if (!s.ok() && result.ok()) {
      result = absl::InternalError(absl::StrCat(
          "trie store ", path_, ": memtable flush failed: ", s.ToString()));
    }
  }
  rocksdb::Status s = db_->Close();
  if (!s.ok() && result.ok()) {
    result = absl::InternalError(
        absl::StrCat("trie store ", path_, ": close failed: ", s.ToString()));
  }
  db_.reset();
  db_writable_ = false;
  return result;
}

}  // namespace lookahead::draftsvc
