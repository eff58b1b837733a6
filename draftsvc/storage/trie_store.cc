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
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "draftsvc/storage/store_info_log.h"
#include "draftsvc/storage/trie_format.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/iterator.h"
#include "rocksdb/listener.h"
#include "rocksdb/merge_operator.h"
#include "rocksdb/options.h"
#include "rocksdb/transaction_log.h"
#include "rocksdb/write_batch.h"

namespace lookahead::draftsvc {
namespace {

namespace fmt = trie_format;

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

absl::string_view View(const rocksdb::Slice& s) {
  return absl::string_view(s.data(), s.size());
}

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

absl::Status ReadError(const std::string& path, const rocksdb::Status& s) {
  if (s.IsCorruption()) {
    return absl::DataLossError(
        absl::StrCat("trie store ", path, " is corrupt: ", s.ToString()));
  }
  return absl::InternalError(
      absl::StrCat("trie store ", path, ": ", s.ToString()));
}

// Whether `m` deletes every entry of its namespace's pool.
bool IsNgramPoolWipe(const TrieMutation& m) {
  return m.table == TrieMutation::Table::kNgramPool &&
         m.kind == TrieMutation::Kind::kDeleteSubtree && m.path.empty();
}

// Removes from `rows` every pool row of `name_space` (a wipe supersedes
// them). O(rows): wipes are rare (a halving prune).
template <typename Rows>
void EraseNamespaceRows(absl::string_view name_space, Rows* rows) {
  const std::string prefix = fmt::NgramPrefix(name_space);
  for (auto it = rows->begin(); it != rows->end();) {
    if (absl::StartsWith(it->first, prefix)) {
      rows->erase(it++);
    } else {
      ++it;
    }
  }
}

// Returns OK iff `batch` may be written (the format's own limits).
absl::Status ValidateBatch(const TrieMutationBatch& batch) {
  absl::Status ns = fmt::ValidateNamespace(batch.name_space);
  if (!ns.ok()) return ns;
  if (batch.vocab_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative vocab_size ", batch.vocab_size));
  }
  for (const TrieMutation& m : batch.mutations) {
    // A pool path starts with the key length, which is not a token.
    size_t first_token = 0;
    if (IsNgramPoolWipe(m)) continue;
    if (m.table == TrieMutation::Table::kNgramPool) {
      const int64_t key_length = m.path.empty() ? 0 : m.path[0];
      const int64_t tokens = static_cast<int64_t>(m.path.size()) - 1;
      if (key_length < 1 || key_length > fmt::kMaxNgramKeyTokens ||
          tokens <= key_length || tokens > fmt::kMaxPathTokens) {
        return absl::InvalidArgumentError(absl::StrCat(
            "n-gram pool mutation path must be [key_length in [1, ",
            fmt::kMaxNgramKeyTokens,
            "], key tokens, continuation tokens] with a non-empty "
            "continuation and at most ",
            fmt::kMaxPathTokens,
            " tokens (or empty, for a kDeleteSubtree of the whole pool); got "
            "key_length ",
            key_length, " and ", std::max<int64_t>(tokens, 0), " tokens"));
      }
      first_token = 1;
    } else if (m.table != TrieMutation::Table::kTrie) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown mutation table ", static_cast<int>(m.table)));
    } else if (m.path.empty() || m.path.size() > fmt::kMaxPathTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("mutation path must hold 1..", fmt::kMaxPathTokens,
                       " tokens, got ", m.path.size()));
    }
    for (size_t i = first_token; i < m.path.size(); ++i) {
      const int32_t token = m.path[i];
      if (token < 0 || (batch.vocab_size > 0 && token >= batch.vocab_size)) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", token, " outside [0, ", batch.vocab_size,
                         ") in namespace ", batch.name_space));
      }
    }
  }
  return absl::OkStatus();
}

// The RocksDB key of a kNgramPool mutation. REQUIRES: ValidateBatch passed.
std::string NgramRowKey(absl::string_view name_space,
                        const std::vector<int32_t>& path) {
  absl::Span<const int32_t> all(path);
  const size_t key_length = static_cast<size_t>(path[0]);
  return fmt::NgramKey(name_space, all.subspan(1, key_length),
                       all.subspan(1 + key_length));
}

// What a run of pool mutations of one entry amounts to. Pool entries are
// single rows (no ranges), so only the order of one entry's own mutations
// matters, and any run folds into one write: a merge of the summed adds, a
// put (a set-count, or a delete followed by adds), or a delete.
struct NgramRowWrite {
  enum Kind { kMerge, kPut, kDelete } kind = kMerge;
  uint64_t value = 0;

  void Apply(const TrieMutation& m) {
    const uint64_t v = static_cast<uint64_t>(m.value);
    switch (m.kind) {
      case TrieMutation::Kind::kAdd:
        if (kind == kDelete) {
          kind = kPut;
          value = v;
        } else {
          value += v;  // Wrapping, as the merge operator.
        }
        break;
      case TrieMutation::Kind::kSetCount:
        kind = kPut;
        value = v;
        break;
      case TrieMutation::Kind::kDeleteSubtree:
        kind = kDelete;
        value = 0;
        break;
    }
  }
};

// Appends `rows` to `wb` in key order (cheap memtable inserts, as the adds).
void WriteNgramRows(const absl::flat_hash_map<std::string, NgramRowWrite>& rows,
                    rocksdb::WriteBatch* wb) {
  std::vector<const std::pair<const std::string, NgramRowWrite>*> sorted;
  sorted.reserve(rows.size());
  for (const auto& row : rows) sorted.push_back(&row);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  for (const auto* row : sorted) {
    const std::string& key = row->first;
    const NgramRowWrite& w = row->second;
    switch (w.kind) {
      case NgramRowWrite::kMerge:
        wb->Merge(key, fmt::EncodeFixed64(w.value));
        break;
      case NgramRowWrite::kPut:
        wb->Put(key, fmt::EncodeFixed64(w.value));
        break;
      case NgramRowWrite::kDelete:
        wb->Delete(key);
        break;
    }
  }
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

// Created, written, fsynced and removed by a resume attempt before it
// reopens the database (TrieStore::ProbeWritable).
constexpr char kResumeProbeFile[] = "LOOKAHEAD-PROBE";
constexpr size_t kResumeProbeBytes = 4096;

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
// entries fold per entry, as in a write round.
class TrieStore::Backlog {
 public:
  void AddPut(std::string key, std::string value) {
    bytes_ += static_cast<int64_t>(key.size() + value.size()) + 48;
    ++mutations_;
    segments_.push_back({Segment::kPut, {}, std::move(key), std::move(value)});
  }
  void Add(const TrieMutationBatch& b) {
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
  // Appends everything in order.
  void WriteTo(rocksdb::WriteBatch* wb) const {
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
  absl::flat_hash_map<std::string, NgramRowWrite> ngram_rows_;
  int64_t bytes_ = 0;
  int64_t mutations_ = 0;
};

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
  RoundWalFilter ro_filter(ignore);
  rocksdb::Status ro;
  uint64_t recovered_sequence = 0;
  {
    std::unique_ptr<rocksdb::DB> db;
    ro = OpenDb(/*read_only=*/true, &ro_filter, &db);
    absl::MutexLock lock(&db_mu_);
    db_ = std::move(db);
    if (ro.ok()) recovered_sequence = db_->GetLatestSequenceNumber();
  }
  std::vector<WalDropLine> drops = info_log_->TakeWalDrops();
  if (ro.ok()) {
    wal_recovery_ = AnalyzeWalRecovery(marker, ro_filter, std::move(drops),
                                       recovered_sequence);
  } else if (ro.IsCorruption()) {
    info_log_->Start(/*rotate=*/false);
    return OpenError(path_, ro);
  } else if (options_.wal_recovery == WalRecoveryMode::kStrict &&
             std::filesystem::exists(path_ + "/CURRENT")) {
    // There is a database, but what its WAL recovery would drop cannot be
    // known: the read-write open below would recover and retire the WAL
    // unexamined.
    return absl::FailedPreconditionError(absl::StrCat(
        "trie store ", path_,
        ": cannot check WAL recovery (read-only open failed: ", ro.ToString(),
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
  if (!rw.ok()) {
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
    if (!ro.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create trie store ", path_, ": ", rw.ToString(),
          DirectoryWritable(path_) ? ""
                                   : absl::StrCat(": ", kNotWritableHint)));
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
      backlog_->AddPut(fmt::FormatKey(),
                       fmt::EncodeFixed32(fmt::kFormatVersion));
      absl::MutexLock lock(&mu_);
      health_.unpersisted_mutations = backlog_->mutations();
    }
    return absl::OkStatus();
  }
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
  {
    absl::MutexLock lock(&mu_);
    // The disk no longer follows memory: only a restart (which reloads the
    // tries from disk) makes them agree again.
    if (health_.lost_mutations > 0) {
      next_resume_ =
          absl::Now() + absl::Milliseconds(options_.max_resume_interval_ms);
      return;
    }
    ++health_.resume_attempts;
  }
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
  // 2. Reopen read-write. db_ is null meanwhile (readers say so); the slow
  // DB::Open runs with no lock held, so readers, Submit and /metrics never
  // wait for it. Only this thread swaps db_ while the writer runs.
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
  if (!s.ok()) {
    EnterDegraded(absl::UnavailableError(absl::StrCat(
        "trie store ", path_, " still cannot be written: ", s.ToString())));
    return;
  }
  // Writable again. RocksDB recovered the old WAL and retired it, so the
  // failed rounds in it are never replayed again: their numbers are reused.
  MarkWalPosition();
  marker_.wal_first_round = next_round_;
  marker_.ignore_from_round = 0;
  absl::Status m = WriteMarker(/*sync=*/true);
  if (!m.ok()) {
    EnterDegraded(m);
    return;
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
      return;
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
      return;
    }
  }
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
  bool written = false;
  if (has_writes && !degraded_) {
    rocksdb::WriteBatch wb;
    wb.PutLogData(RoundTag(next_round_));
    std::vector<std::string> new_namespaces;
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
        wb.Merge(key, fmt::EncodeFixed64(delta));
      }
      adds.clear();
    };
    for (const Pending& p : round) {
      if (p.is_flush || !p.rejected.ok()) continue;
      const TrieMutationBatch& b = p.batch;
      if (!known_namespaces_.contains(b.name_space) &&
          std::find(new_namespaces.begin(), new_namespaces.end(),
                    b.name_space) == new_namespaces.end()) {
        wb.Put(fmt::NamespaceKey(b.name_space),
               fmt::EncodeFixed32(static_cast<uint32_t>(b.vocab_size)));
        new_namespaces.push_back(b.name_space);
      }
      for (const TrieMutation& m : b.mutations) {
        if (IsNgramPoolWipe(m)) {
          // Pool rows go last: the ones folded so far are moot, later ones
          // land after the range delete.
          EraseNamespaceRows(b.name_space, &ngram_rows);
          const std::string begin = fmt::NgramPrefix(b.name_space);
          wb.DeleteRange(begin, fmt::PrefixSuccessor(begin));
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
            wb.Put(key, fmt::EncodeFixed64(static_cast<uint64_t>(m.value)));
            break;
          case TrieMutation::Kind::kDeleteSubtree:
            flush_adds();
            wb.DeleteRange(key, fmt::PrefixSuccessor(key));
            break;
        }
      }
    }
    flush_adds();
    WriteNgramRows(ngram_rows, &wb);
    absl::Status marker_written;
    absl::Status s = WriteTagged(wb, options_.sync, &marker_written);
    if (s.ok()) {
      written = true;
      for (std::string& name : new_namespaces) {
        known_namespaces_.insert(std::move(name));
      }
      // The round is applied (and acknowledged below); later ones are not.
      if (!marker_written.ok()) EnterDegraded(marker_written);
    } else {
      EnterDegraded(s);
    }
  }
  if (has_writes && !written) {
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

absl::Status TrieStore::Scan(TrieScanVisitor& visitor) const {
  absl::ReaderMutexLock lock(&db_mu_);
  if (db_ == nullptr) return NoDbError();
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.readahead_size = 2 << 20;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  fmt::ParsedNodeKey parsed;
  fmt::ParsedNgramKey parsed_ngram;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::string_view key = View(it->key());
    absl::string_view value = View(it->value());
    if (key.empty()) {
      return absl::DataLossError(
          absl::StrCat("trie store ", path_, ": empty key"));
    }
    switch (key[0]) {
      case fmt::kFormatTag:
        break;
      case fmt::kNamespaceTag: {
        uint32_t vocab = 0;
        if (!fmt::DecodeFixed32(value, &vocab)) {
          return absl::DataLossError(absl::StrCat(
              "trie store ", path_, ": malformed metadata of namespace ",
              key.substr(1)));
        }
        absl::Status s =
            visitor.OnNamespace(key.substr(1), static_cast<int32_t>(vocab));
        if (!s.ok()) return s;
        break;
      }
      case fmt::kNodeTag: {
        absl::Status s = fmt::ParseNodeKey(key, &parsed);
        if (!s.ok()) {
          return absl::DataLossError(
              absl::StrCat("trie store ", path_, ": ", s.message()));
        }
        uint64_t count = 0;
        if (!fmt::DecodeFixed64(value, &count)) {
          return absl::DataLossError(absl::StrCat("trie store ", path_,
                                                  ": malformed count of a node "
                                                  "in namespace ",
                                                  parsed.name_space));
        }
        s = visitor.OnNode(parsed.name_space, parsed.path,
                           static_cast<int64_t>(count));
        if (!s.ok()) return s;
        break;
      }
      case fmt::kNgramTag: {
        absl::Status s = fmt::ParseNgramKey(key, &parsed_ngram);
        if (!s.ok()) {
          return absl::DataLossError(
              absl::StrCat("trie store ", path_, ": ", s.message()));
        }
        uint64_t count = 0;
        if (!fmt::DecodeFixed64(value, &count)) {
          return absl::DataLossError(absl::StrCat(
              "trie store ", path_,
              ": malformed count of an n-gram pool entry in namespace ",
              parsed_ngram.name_space));
        }
        s = visitor.OnNgram(parsed_ngram.name_space, parsed_ngram.key,
                            parsed_ngram.continuation,
                            static_cast<int64_t>(count));
        if (!s.ok()) return s;
        break;
      }
      default:
        return absl::DataLossError(
            absl::StrCat("trie store ", path_, ": unknown key tag 0x",
                         absl::Hex(static_cast<unsigned char>(key[0]))));
    }
  }
  if (!it->status().ok()) return ReadError(path_, it->status());
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TrieStore::GetCount(
    absl::string_view name_space, absl::Span<const int32_t> path) const {
  absl::ReaderMutexLock lock(&db_mu_);
  if (db_ == nullptr) return NoDbError();
  std::string value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), fmt::NodeKey(name_space, path), &value);
  if (s.IsNotFound()) return absl::NotFoundError("no such trie node");
  if (!s.ok()) return ReadError(path_, s);
  uint64_t count = 0;
  if (!fmt::DecodeFixed64(value, &count)) {
    return absl::DataLossError(
        absl::StrCat("trie store ", path_, ": malformed count"));
  }
  return static_cast<int64_t>(count);
}

absl::StatusOr<int64_t> TrieStore::GetNgramCount(
    absl::string_view name_space, absl::Span<const int32_t> key,
    absl::Span<const int32_t> continuation) const {
  absl::ReaderMutexLock lock(&db_mu_);
  if (db_ == nullptr) return NoDbError();
  std::string value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(),
               fmt::NgramKey(name_space, key, continuation), &value);
  if (s.IsNotFound()) return absl::NotFoundError("no such n-gram pool entry");
  if (!s.ok()) return ReadError(path_, s);
  uint64_t count = 0;
  if (!fmt::DecodeFixed64(value, &count)) {
    return absl::DataLossError(
        absl::StrCat("trie store ", path_, ": malformed count"));
  }
  return static_cast<int64_t>(count);
}

int64_t TrieStore::PendingBatches() const {
  absl::MutexLock lock(&mu_);
  return queued_batches_ + in_flight_;
}

int64_t TrieStore::DiskBytes() const {
  absl::ReaderMutexLock lock(&db_mu_);
  if (db_ == nullptr) return 0;
  uint64_t sst = 0;
  if (!db_->GetIntProperty("rocksdb.total-sst-files-size", &sst)) sst = 0;
  uint64_t wal = 0;
  rocksdb::VectorLogPtr files;
  if (db_->GetSortedWalFiles(files).ok()) {
    for (const auto& f : files) {
      if (f->Type() == rocksdb::kAliveLogFile) wal += f->SizeFileBytes();
    }
  }
  return static_cast<int64_t>(sst + wal);
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
