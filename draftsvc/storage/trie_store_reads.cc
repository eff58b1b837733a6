// TrieStore: reads (the full scan a restart rebuilds from, point reads for
// tests and tools) and the sizes /metrics reports. Every read holds db_mu_
// shared, so the writer thread's reopen never frees a database under it.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "draftsvc/storage/trie_format.h"
#include "draftsvc/storage/trie_store.h"
#include "draftsvc/storage/trie_store_internal.h"
#include "rocksdb/db.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "rocksdb/transaction_log.h"

namespace lookahead::draftsvc {
namespace {

namespace fmt = trie_format;
using trie_store_internal::View;

absl::Status ReadError(const std::string& path, const rocksdb::Status& s) {
  if (s.IsCorruption()) {
    return absl::DataLossError(
        absl::StrCat("trie store ", path, " is corrupt: ", s.ToString()));
  }
  return absl::InternalError(
      absl::StrCat("trie store ", path, ": ", s.ToString()));
}

}  // namespace

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

}  // namespace lookahead::draftsvc
