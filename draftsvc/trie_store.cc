#include "draftsvc/trie_store.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "draftsvc/trie_format.h"
#include "rocksdb/db.h"
#include "rocksdb/iterator.h"
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

// Maps a RocksDB failure of DB::Open to a Status naming the directory.
absl::Status OpenError(const std::string& path, const rocksdb::Status& s) {
  const std::string what = s.ToString();
  if (s.IsIOError() && absl::StrContains(absl::AsciiStrToLower(what), "lock")) {
    return absl::UnavailableError(absl::StrCat(
        "trie store ", path,
        " is locked: another process (or another store in this process) "
        "holds its LOCK file: ",
        what));
  }
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

absl::Status ReadError(const std::string& path, const rocksdb::Status& s) {
  if (s.IsCorruption()) {
    return absl::DataLossError(
        absl::StrCat("trie store ", path, " is corrupt: ", s.ToString()));
  }
  return absl::InternalError(
      absl::StrCat("trie store ", path, ": ", s.ToString()));
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
    if (m.path.empty() || m.path.size() > fmt::kMaxPathTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("mutation path must hold 1..", fmt::kMaxPathTokens,
                       " tokens, got ", m.path.size()));
    }
    for (int32_t token : m.path) {
      if (token < 0 || (batch.vocab_size > 0 && token >= batch.vocab_size)) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", token, " outside [0, ", batch.vocab_size,
                         ") in namespace ", batch.name_space));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrieStore>> TrieStore::Open(
    const std::string& path, const TrieStoreOptions& options) {
  if (path.empty()) {
    return absl::InvalidArgumentError("trie store path is empty");
  }
  if (options.sync_interval_ms < 0 || options.max_group_mutations < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trie store options: sync_interval_ms must be >= 0 (got ",
        options.sync_interval_ms, ") and max_group_mutations >= 1 (got ",
        options.max_group_mutations, ")"));
  }
  if (options.create_if_missing) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create trie store directory ", path, ": ", ec.message()));
    }
  }
  rocksdb::Options db_options;
  db_options.create_if_missing = options.create_if_missing;
  db_options.merge_operator = std::make_shared<Int64AddOperator>();
  db_options.paranoid_checks = true;
  db_options.max_background_jobs = 2;
  db_options.keep_log_file_num = 4;

  rocksdb::DB* raw_db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, path, &raw_db);
  if (!s.ok()) return OpenError(path, s);
  std::unique_ptr<rocksdb::DB> db(raw_db);

  // Format record: written into an empty database, checked otherwise.
  std::string version_bytes;
  s = db->Get(rocksdb::ReadOptions(), fmt::FormatKey(), &version_bytes);
  if (s.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(
        db->NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    if (it->Valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trie store ", path,
          " holds a RocksDB database that is not a lookahead trie store "
          "(no format record)"));
    }
    if (!it->status().ok()) return OpenError(path, it->status());
    rocksdb::WriteOptions wo;
    wo.sync = true;
    s = db->Put(wo, fmt::FormatKey(), fmt::EncodeFixed32(fmt::kFormatVersion));
    if (!s.ok()) return OpenError(path, s);
  } else if (!s.ok()) {
    return OpenError(path, s);
  } else {
    uint32_t version = 0;
    if (!fmt::DecodeFixed32(version_bytes, &version)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trie store ", path, " is corrupt: malformed format record"));
    }
    if (version != fmt::kFormatVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat("trie store ", path, " has format version ", version,
                       "; this build reads version ", fmt::kFormatVersion));
    }
  }

  // Namespaces whose metadata is already on disk.
  absl::flat_hash_set<std::string> known;
  {
    const std::string begin(1, fmt::kNamespaceTag);
    const std::string end = fmt::PrefixSuccessor(begin);
    rocksdb::Slice upper(end);
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
    for (it->Seek(begin); it->Valid(); it->Next()) {
      known.insert(std::string(View(it->key()).substr(1)));
    }
    if (!it->status().ok()) return OpenError(path, it->status());
  }

  auto store = std::unique_ptr<TrieStore>(
      new TrieStore(path, options, std::move(db), std::move(known)));
  store->writer_ = std::thread([s = store.get()] { s->WriterLoop(); });
  return store;
}

TrieStore::TrieStore(std::string path, TrieStoreOptions options,
                     std::unique_ptr<rocksdb::DB> db,
                     absl::flat_hash_set<std::string> known_namespaces)
    : path_(std::move(path)),
      options_(options),
      db_(std::move(db)),
      known_namespaces_(std::move(known_namespaces)) {}

TrieStore::~TrieStore() { Close().IgnoreError(); }

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
      if (periodic) {
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
    if (!round.empty()) WriteRound(std::move(round));
    if (periodic && absl::Now() - last_sync >= interval) {
      absl::Status s = SyncWalIfDirty();
      if (!s.ok()) {
        absl::MutexLock lock(&mu_);
        if (write_error_.ok()) write_error_ = s;
      }
      last_sync = absl::Now();
    }
  }
  absl::Status s = SyncWalIfDirty();
  if (!s.ok()) {
    absl::MutexLock lock(&mu_);
    if (write_error_.ok()) write_error_ = s;
  }
}

absl::Status TrieStore::SyncWalIfDirty() {
  if (!wal_dirty_) return absl::OkStatus();
  rocksdb::Status s = db_->SyncWAL();
  if (!s.ok()) {
    return absl::InternalError(absl::StrCat(
        "trie store ", path_, ": WAL sync failed: ", s.ToString()));
  }
  wal_dirty_ = false;
  return absl::OkStatus();
}

void TrieStore::WriteRound(std::deque<Pending> round) {
  rocksdb::WriteBatch wb;
  std::vector<std::string> new_namespaces;
  // Adds to one key within the round are summed into one merge operand
  // (hot prefixes are hit by almost every window). A set or a delete ends
  // the summing so that batch order is kept.
  absl::flat_hash_map<std::string, uint64_t> adds;
  std::vector<std::pair<std::string, uint64_t>> sorted_adds;
  auto flush_adds = [&] {
    // In key order: the memtable's skiplist inserts sequential keys cheaply
    // (its splice hint stays valid), random ones dominate the write cost.
    sorted_adds.assign(std::make_move_iterator(adds.begin()),
                       std::make_move_iterator(adds.end()));
    std::sort(sorted_adds.begin(), sorted_adds.end());
    for (const auto& [key, delta] : sorted_adds) {
      wb.Merge(key, fmt::EncodeFixed64(delta));
    }
    adds.clear();
  };
  bool has_flush = false;
  bool has_writes = false;
  for (const Pending& p : round) {
    if (p.is_flush) {
      has_flush = true;
      continue;
    }
    if (!p.rejected.ok()) continue;
    has_writes = true;
    const TrieMutationBatch& b = p.batch;
    if (!known_namespaces_.contains(b.name_space) &&
        std::find(new_namespaces.begin(), new_namespaces.end(), b.name_space) ==
            new_namespaces.end()) {
      wb.Put(fmt::NamespaceKey(b.name_space),
             fmt::EncodeFixed32(static_cast<uint32_t>(b.vocab_size)));
      new_namespaces.push_back(b.name_space);
    }
    for (const TrieMutation& m : b.mutations) {
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

  absl::Status write_status;
  if (has_writes) {
    rocksdb::WriteOptions wo;
    wo.sync = options_.sync;
    rocksdb::Status s = db_->Write(wo, &wb);
    if (s.ok()) {
      if (!options_.sync) wal_dirty_ = true;
      for (std::string& name : new_namespaces) {
        known_namespaces_.insert(std::move(name));
      }
    } else {
      write_status = absl::InternalError(
          absl::StrCat("trie store ", path_, ": write failed: ", s.ToString()));
    }
  }
  absl::Status flush_status;
  if (has_flush) flush_status = SyncWalIfDirty();

  absl::Status sticky;
  {
    absl::MutexLock lock(&mu_);
    if (write_error_.ok() && !write_status.ok()) write_error_ = write_status;
    if (write_error_.ok() && !flush_status.ok()) write_error_ = flush_status;
    sticky = write_error_;
    in_flight_ = 0;  // Acknowledged from here on.
  }
  for (Pending& p : round) {
    if (p.is_flush) {
      p.done(sticky);
    } else if (!p.rejected.ok()) {
      p.done(p.rejected);
    } else {
      p.done(write_status);
    }
  }
}

absl::Status TrieStore::Scan(TrieScanVisitor& visitor) const {
  if (db_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("trie store ", path_, " is closed"));
  }
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.readahead_size = 2 << 20;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  fmt::ParsedNodeKey parsed;
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
  if (db_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("trie store ", path_, " is closed"));
  }
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

int64_t TrieStore::PendingBatches() const {
  absl::MutexLock lock(&mu_);
  return queued_batches_ + in_flight_;
}

int64_t TrieStore::DiskBytes() const {
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
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    result = write_error_;
  }
  // Persist the memtable as a table file so that the next Open need not
  // replay the WAL (a faster restart after a clean shutdown).
  rocksdb::Status s = db_->Flush(rocksdb::FlushOptions());
  if (!s.ok() && result.ok()) {
    result = absl::InternalError(absl::StrCat(
        "trie store ", path_, ": memtable flush failed: ", s.ToString()));
  }
  s = db_->Close();
  if (!s.ok() && result.ok()) {
    result = absl::InternalError(
        absl::StrCat("trie store ", path_, ": close failed: ", s.ToString()));
  }
  db_.reset();
  return result;
}

}  // namespace lookahead::draftsvc
