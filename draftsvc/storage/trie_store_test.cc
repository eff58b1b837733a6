#include "draftsvc/storage/trie_store.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "draftsvc/storage/trie_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace lookahead::draftsvc {
namespace {

namespace fmt = trie_format;
using ::testing::HasSubstr;

using NodeMap = std::map<std::pair<std::string, std::vector<int32_t>>, int64_t>;
// Pool entries by (namespace, mutation path [key_length, key, continuation]).
using PoolMap = NodeMap;

// A fresh directory below TEST_TMPDIR.
std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir =
      std::filesystem::path(base != nullptr ? base : "/tmp") /
      absl::StrCat("trie_store_test_", name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

// Collects a full scan; checks the visiting order on the way.
class CollectingVisitor : public TrieScanVisitor {
 public:
  absl::Status OnNamespace(absl::string_view name_space,
                           int32_t vocab_size) override {
    if (saw_node_) return absl::InternalError("namespace after a node");
    namespaces[std::string(name_space)] = vocab_size;
    return absl::OkStatus();
  }
  absl::Status OnNode(absl::string_view name_space,
                      absl::Span<const int32_t> path, int64_t count) override {
    if (saw_ngram_) return absl::InternalError("node after a pool entry");
    saw_node_ = true;
    auto key = std::make_pair(std::string(name_space),
                              std::vector<int32_t>(path.begin(), path.end()));
    // Within a namespace, paths must come in numeric lexicographic order.
    if (!nodes.empty()) {
      const auto& last = nodes.rbegin()->first;
      if (last.first == key.first && !(last.second < key.second)) {
        return absl::InternalError("paths out of numeric order");
      }
    }
    if (!nodes.emplace(std::move(key), count).second) {
      return absl::InternalError("node visited twice");
    }
    return absl::OkStatus();
  }
  absl::Status OnNgram(absl::string_view name_space,
                       absl::Span<const int32_t> key,
                       absl::Span<const int32_t> continuation,
                       int64_t count) override {
    saw_ngram_ = true;
    if (namespaces.count(std::string(name_space)) == 0) {
      return absl::InternalError("pool entry before its namespace");
    }
    auto entry = std::make_pair(std::string(name_space),
                                NgramMutationPath(key, continuation));
    // Within a namespace: key length, key, continuation (= path order).
    if (!pool.empty()) {
      const auto& last = pool.rbegin()->first;
      if (last.first == entry.first && !(last.second < entry.second)) {
        return absl::InternalError("pool entries out of order");
      }
    }
    if (!pool.emplace(std::move(entry), count).second) {
      return absl::InternalError("pool entry visited twice");
    }
    return absl::OkStatus();
  }
  std::map<std::string, int32_t> namespaces;
  NodeMap nodes;
  PoolMap pool;

 private:
  bool saw_node_ = false;
  bool saw_ngram_ = false;
};

NodeMap ScanAll(const TrieStore& store,
                std::map<std::string, int32_t>* namespaces = nullptr,
                PoolMap* pool = nullptr) {
  CollectingVisitor v;
  absl::Status s = store.Scan(v);
  EXPECT_TRUE(s.ok()) << s;
  if (namespaces != nullptr) *namespaces = v.namespaces;
  if (pool != nullptr) *pool = v.pool;
  return v.nodes;
}

PoolMap ScanPool(const TrieStore& store) {
  PoolMap pool;
  ScanAll(store, nullptr, &pool);
  return pool;
}

// Submits and waits for the done callback.
absl::Status SubmitAndWait(TrieStore& store, TrieMutationBatch batch) {
  absl::Mutex mu;
  bool finished = false;
  absl::Status result;
  store.Submit(std::move(batch), [&](absl::Status s) {
    absl::MutexLock lock(&mu);
    result = s;
    finished = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&finished));
  return result;
}

TrieMutation Add(std::vector<int32_t> path, int64_t v) {
  return {TrieMutation::Kind::kAdd, std::move(path), v};
}
TrieMutation Set(std::vector<int32_t> path, int64_t v) {
  return {TrieMutation::Kind::kSetCount, std::move(path), v};
}
TrieMutation Del(std::vector<int32_t> path) {
  return {TrieMutation::Kind::kDeleteSubtree, std::move(path), 0};
}
// Pool mutations of the entry key -> continuation.
TrieMutation PoolAdd(std::vector<int32_t> key, std::vector<int32_t> cont,
                     int64_t v) {
  return {TrieMutation::Kind::kAdd, NgramMutationPath(key, cont), v,
          TrieMutation::Table::kNgramPool};
}
TrieMutation PoolSet(std::vector<int32_t> key, std::vector<int32_t> cont,
                     int64_t v) {
  return {TrieMutation::Kind::kSetCount, NgramMutationPath(key, cont), v,
          TrieMutation::Table::kNgramPool};
}
TrieMutation PoolDel(std::vector<int32_t> key, std::vector<int32_t> cont) {
  return {TrieMutation::Kind::kDeleteSubtree, NgramMutationPath(key, cont), 0,
          TrieMutation::Table::kNgramPool};
}
// Deletes every pool entry of the batch's namespace.
TrieMutation PoolWipe() {
  return {TrieMutation::Kind::kDeleteSubtree,
          {},
          0,
          TrieMutation::Table::kNgramPool};
}

TEST(TrieFormatTest, KeyOrderIsNumericPathOrder) {
  std::mt19937 rng(7);
  const int32_t interesting[] = {
      0, 1, 255, 256, 65535, 65536, 49151, 0x00ffffff, 0x01000000, 0x7fffffff};
  std::vector<std::vector<int32_t>> paths;
  for (int i = 0; i < 400; ++i) {
    std::vector<int32_t> p(1 + rng() % 4);
    for (auto& t : p) t = interesting[rng() % 10];
    paths.push_back(p);
  }
  for (const auto& a : paths) {
    for (size_t j = 0; j < 20; ++j) {
      const auto& b = paths[rng() % paths.size()];
      EXPECT_EQ(a < b, fmt::NodeKey("ns", a) < fmt::NodeKey("ns", b));
      // Subtree = key range.
      bool is_prefix =
          b.size() >= a.size() && std::equal(a.begin(), a.end(), b.begin());
      std::string ka = fmt::NodeKey("ns", a), kb = fmt::NodeKey("ns", b);
      EXPECT_EQ(is_prefix, ka <= kb && kb < fmt::PrefixSuccessor(ka));
    }
    fmt::ParsedNodeKey parsed;
    const std::string key = fmt::NodeKey("ns", a);
    ASSERT_TRUE(fmt::ParseNodeKey(key, &parsed).ok());
    EXPECT_EQ(parsed.name_space, "ns");
    EXPECT_EQ(parsed.path, a);
  }
}

TEST(TrieFormatTest, NamespacesDoNotShareKeyRanges) {
  // "a" must not contain "a.b" or "ab" in its node range.
  std::string lo = fmt::NodePrefix("a"), hi = fmt::PrefixSuccessor(lo);
  for (const char* other : {"a.b", "ab", "a-", "A", "b"}) {
    std::string k = fmt::NodeKey(other, {0});
    EXPECT_FALSE(lo <= k && k < hi) << other;
  }
}

TEST(TrieFormatTest, RejectsBadNamespacesAndKeys) {
  EXPECT_TRUE(fmt::ValidateNamespace("Ab_0.9-z").ok());
  EXPECT_EQ(fmt::ValidateNamespace("").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fmt::ValidateNamespace(std::string(129, 'a')).message(),
              HasSubstr("1..128 bytes"));
  EXPECT_THAT(fmt::ValidateNamespace(std::string("a\0b", 3)).message(),
              HasSubstr("outside [A-Za-z0-9_.-]"));
  EXPECT_FALSE(fmt::ValidateNamespace("a/b").ok());
  fmt::ParsedNodeKey parsed;
  EXPECT_EQ(fmt::ParseNodeKey("nabc", &parsed).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(fmt::ParseNodeKey(std::string("na\0\1\2", 5), &parsed).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(fmt::ParseNodeKey(fmt::NodePrefix("a"), &parsed).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(fmt::PrefixSuccessor("a\xff\xff"), "b");
  EXPECT_EQ(fmt::PrefixSuccessor("\xff"), "");
}

TEST(TrieFormatTest, NgramKeysRoundTripInStoreOrderApartFromNodes) {
  std::mt19937 rng(11);
  const int32_t interesting[] = {0, 1, 255, 256, 65536, 0x7fffffff};
  using Entry = std::pair<std::vector<int32_t>, std::vector<int32_t>>;
  std::vector<Entry> entries;
  for (int i = 0; i < 300; ++i) {
    Entry e;
    e.first.resize(1 + rng() % 3);
    e.second.resize(1 + rng() % 3);
    for (auto& t : e.first) t = interesting[rng() % 6];
    for (auto& t : e.second) t = interesting[rng() % 6];
    entries.push_back(e);
  }
  const std::string lo = fmt::NgramPrefix("ns");
  const std::string hi = fmt::PrefixSuccessor(lo);
  for (const Entry& a : entries) {
    const std::string ka = fmt::NgramKey("ns", a.first, a.second);
    fmt::ParsedNgramKey parsed;
    ASSERT_TRUE(fmt::ParseNgramKey(ka, &parsed).ok());
    EXPECT_EQ(parsed.name_space, "ns");
    EXPECT_EQ(parsed.key, a.first);
    EXPECT_EQ(parsed.continuation, a.second);
    EXPECT_TRUE(lo <= ka && ka < hi);
    // After every node key and namespace record of any namespace.
    EXPECT_GT(ka, fmt::NodeKey("zz", {0x7fffffff}));
    EXPECT_GT(ka, fmt::NamespaceKey("zz"));
    for (int j = 0; j < 10; ++j) {
      const Entry& b = entries[rng() % entries.size()];
      // Store order: key length, key, continuation (one row per entry).
      const bool before = std::make_tuple(a.first.size(), a.first, a.second) <
                          std::make_tuple(b.first.size(), b.first, b.second);
      EXPECT_EQ(before, ka < fmt::NgramKey("ns", b.first, b.second));
      EXPECT_EQ(a == b, ka == fmt::NgramKey("ns", b.first, b.second));
    }
  }
  // Another namespace's rows are outside the range.
  for (const char* other : {"n", "nsa", "ns.b", "Ns"}) {
    const std::string k = fmt::NgramKey(other, {1}, {2});
    EXPECT_FALSE(lo <= k && k < hi) << other;
  }
}

TEST(TrieFormatTest, MalformedNgramKeysAreDataLoss) {
  fmt::ParsedNgramKey parsed;
  const std::string good = fmt::NgramKey("ns", {1, 2}, {3});
  ASSERT_TRUE(fmt::ParseNgramKey(good, &parsed).ok());
  const std::string prefix = fmt::NgramPrefix("ns");
  struct Case {
    std::string key;
    const char* message;
  };
  const Case cases[] = {
      {"pns", "no namespace terminator"},
      {prefix, "has no key length"},
      {prefix + std::string(1, '\0') + good.substr(prefix.size() + 1),
       "key length 0"},
      // Key of 2 tokens, no continuation.
      {good.substr(0, good.size() - 4), "at least one continuation token"},
      {good.substr(0, good.size() - 1), "a multiple of 4"},
      {fmt::NodeKey("ns", {1}), "does not start with the pool tag"},
      {prefix + "\1" + std::string("\x80\0\0\0\0\0\0\1", 8),
       "negative token id"},
  };
  for (const Case& c : cases) {
    absl::Status s = fmt::ParseNgramKey(c.key, &parsed);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(TrieStoreTest, AddSetDeleteAndReopen) {
  const std::string dir = TempDir("basic");
  {
    auto store = TrieStore::Open(dir, {});
    ASSERT_TRUE(store.ok()) << store.status();
    TrieMutationBatch b{"ns",
                        100,
                        {Add({1}, 2), Add({1, 2}, 1), Add({1}, 3),
                         Add({1, 2, 3}, 1), Add({4}, 1)}};
    ASSERT_TRUE(SubmitAndWait(**store, b).ok());
    EXPECT_EQ(*(*store)->GetCount("ns", {1}), 5);
    ASSERT_TRUE(
        SubmitAndWait(**store, {"ns", 100, {Set({1}, 9), Del({1, 2})}}).ok());
    EXPECT_EQ(*(*store)->GetCount("ns", {1}), 9);
    EXPECT_EQ((*store)->GetCount("ns", {1, 2}).status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ((*store)->GetCount("ns", {1, 2, 3}).status().code(),
              absl::StatusCode::kNotFound);
    // Add after delete in one batch: the add wins (batch order).
    ASSERT_TRUE(
        SubmitAndWait(**store, {"ns", 100, {Del({4}), Add({4}, 7)}}).ok());
    EXPECT_TRUE((*store)->Flush().ok());
    EXPECT_GT((*store)->DiskBytes(), 0);
    EXPECT_EQ((*store)->PendingBatches(), 0);
  }
  auto store = TrieStore::Open(dir, {});
  ASSERT_TRUE(store.ok()) << store.status();
  std::map<std::string, int32_t> namespaces;
  NodeMap nodes = ScanAll(**store, &namespaces);
  EXPECT_EQ(namespaces, (std::map<std::string, int32_t>{{"ns", 100}}));
  EXPECT_EQ(nodes, (NodeMap{{{"ns", {1}}, 9}, {{"ns", {4}}, 7}}));
}

// Pool rows beside trie rows: written in the same batches, deleted exactly
// (never as a subtree), apart per namespace and from the trie's rows, and
// there after a reopen.
TEST(TrieStoreTest, NgramPoolRowsRoundTrip) {
  const std::string dir = TempDir("pool");
  {
    auto store = TrieStore::Open(dir, {});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(
        SubmitAndWait(**store, {"ns",
                                100,
                                {Add({1}, 1), PoolAdd({1}, {3}, 2),
                                 PoolAdd({1}, {3, 4}, 1), PoolAdd({1}, {3}, 5),
                                 Add({1, 3}, 1), PoolAdd({1, 2}, {3}, 7)}})
            .ok());
    // Another namespace: same tokens, its own rows.
    ASSERT_TRUE(SubmitAndWait(**store, {"ns2",
                                        50,
                                        {PoolAdd({1}, {3}, 40), Add({1}, 9),
                                         PoolSet({9}, {9}, 3)}})
                    .ok());
    EXPECT_EQ(*(*store)->GetNgramCount("ns", {1}, {3}), 7);
    EXPECT_EQ(*(*store)->GetNgramCount("ns2", {1}, {3}), 40);
    EXPECT_EQ(*(*store)->GetNgramCount("ns", {1, 2}, {3}), 7);
    // {1} -> {3} is not the trie node {1, 3}.
    EXPECT_EQ(*(*store)->GetCount("ns", {1, 3}), 1);
    // Exactly that entry goes: not {1} -> {3, 4}, nor the trie's {1, 3};
    // a trie subtree delete leaves pool rows alone. Set after delete, add
    // after set, delete after add, all in one batch.
    ASSERT_TRUE(
        SubmitAndWait(
            **store,
            {"ns",
             100,
             {PoolDel({1}, {3}), Del({1}), PoolSet({5}, {6}, 4),
              PoolAdd({5}, {6}, 2), PoolDel({5}, {6}), PoolAdd({5}, {6}, 3),
              PoolSet({7}, {8}, 1), PoolAdd({7}, {8}, 1), PoolDel({9}, {9})}})
            .ok());
    EXPECT_EQ((*store)->GetNgramCount("ns", {1}, {3}).status().code(),
              absl::StatusCode::kNotFound);
    ASSERT_TRUE((*store)->Flush().ok());
  }
  auto store = TrieStore::Open(dir, {});
  ASSERT_TRUE(store.ok()) << store.status();
  std::map<std::string, int32_t> namespaces;
  PoolMap pool;
  NodeMap nodes = ScanAll(**store, &namespaces, &pool);
  EXPECT_EQ(namespaces,
            (std::map<std::string, int32_t>{{"ns", 100}, {"ns2", 50}}));
  EXPECT_EQ(nodes, (NodeMap{{{"ns2", {1}}, 9}}));
  EXPECT_EQ(pool, (PoolMap{{{"ns", {1, 1, 3, 4}}, 1},
                           {{"ns", {1, 5, 6}}, 3},
                           {{"ns", {1, 7, 8}}, 2},
                           {{"ns", {2, 1, 2, 3}}, 7},
                           {{"ns2", {1, 1, 3}}, 40},
                           {{"ns2", {1, 9, 9}}, 3}}));
  EXPECT_EQ(*(*store)->GetNgramCount("ns", {5}, {6}), 3);
}

// A whole-pool delete takes every entry of its namespace and nothing else:
// not another namespace's, not the trie's; entries folded before it in the
// same round go, those after it stay.
TEST(TrieStoreTest, PoolWipeDeletesOneNamespacesPool) {
  const std::string dir = TempDir("pool_wipe");
  TrieStoreOptions options;
  options.sync = true;
  {
    auto store = TrieStore::Open(dir, options);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(SubmitAndWait(**store, {"ns",
                                        100,
                                        {Add({1}, 1), PoolAdd({1}, {3}, 2),
                                         PoolAdd({2}, {4}, 2)}})
                    .ok());
    ASSERT_TRUE(
        SubmitAndWait(**store, {"ns2", 100, {PoolAdd({1}, {3}, 5)}}).ok());
    // One round: everything before the wipe goes, what follows stays.
    (*store)->Submit({"ns", 100, {PoolSet({5}, {5}, 9), PoolAdd({1}, {3}, 1)}},
                     [](absl::Status s) { EXPECT_TRUE(s.ok()) << s; });
    (*store)->Submit(
        {"ns", 100, {PoolWipe(), PoolAdd({2}, {4}, 7), PoolSet({6}, {6}, 1)}},
        [](absl::Status s) { EXPECT_TRUE(s.ok()) << s; });
    ASSERT_TRUE((*store)->Flush().ok());
  }
  auto store = TrieStore::Open(dir, options);
  ASSERT_TRUE(store.ok()) << store.status();
  PoolMap pool;
  EXPECT_EQ(ScanAll(**store, nullptr, &pool), (NodeMap{{{"ns", {1}}, 1}}));
  EXPECT_EQ(pool, (PoolMap{{{"ns", {1, 2, 4}}, 7},
                           {{"ns", {1, 6, 6}}, 1},
                           {{"ns2", {1, 1, 3}}, 5}}));
}

// A pool-only batch of a new namespace writes the namespace record, so a
// scan meets the namespace before its entries.
TEST(TrieStoreTest, PoolOnlyBatchRecordsItsNamespace) {
  const std::string dir = TempDir("pool_only");
  {
    auto store = TrieStore::Open(dir, {});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(
        SubmitAndWait(**store, {"fresh", 77, {PoolAdd({1}, {2}, 1)}}).ok());
  }
  auto store = TrieStore::Open(dir, {});
  ASSERT_TRUE(store.ok()) << store.status();
  std::map<std::string, int32_t> namespaces;
  PoolMap pool;
  EXPECT_TRUE(ScanAll(**store, &namespaces, &pool).empty());
  EXPECT_EQ(namespaces, (std::map<std::string, int32_t>{{"fresh", 77}}));
  EXPECT_EQ(pool, (PoolMap{{{"fresh", {1, 1, 2}}, 1}}));
}

TEST(TrieStoreTest, InvalidPoolMutationIsRejectedWhole) {
  auto store = TrieStore::Open(TempDir("pool_invalid"), {});
  ASSERT_TRUE(store.ok()) << store.status();
  struct Case {
    std::vector<int32_t> path;
    const char* message;
  };
  const Case cases[] = {
      {{}, "got key_length 0 and 0 tokens"},
      {{0, 1, 2}, "got key_length 0 and 2 tokens"},
      {{2, 1, 2}, "got key_length 2 and 2 tokens"},  // No continuation.
      {{256, 1, 2}, "key_length in [1, 255]"},
      {{1, 1, 10}, "token id 10 outside [0, 10)"},
      {{1, -1, 1}, "token id -1 outside"},
  };
  for (const Case& c : cases) {
    TrieMutation bad{TrieMutation::Kind::kAdd, c.path, 1,
                     TrieMutation::Table::kNgramPool};
    absl::Status s = SubmitAndWait(
        **store, {"ns", 10, {PoolAdd({1}, {2}, 1), Add({3}, 1), bad}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  // The key length is not a token: 200 passes a vocab of 10.
  std::vector<int32_t> long_key(200, 1);
  ASSERT_TRUE(
      SubmitAndWait(**store, {"ns", 10, {PoolAdd(long_key, {2}, 1)}}).ok());
  ASSERT_TRUE((*store)->Flush().ok());
  std::vector<int32_t> path = NgramMutationPath(long_key, {2});
  EXPECT_TRUE(ScanAll(**store).empty());
  EXPECT_EQ(ScanPool(**store), (PoolMap{{{"ns", path}, 1}}));
}

// Databases of format version 1 (before the pool) open as they are, with
// no pool; the first read-write open upgrades the record. Unknown versions
// are refused.
TEST(TrieStoreTest, FormatVersionOneOpensAndIsUpgraded) {
  const std::string dir = TempDir("v1");
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::WriteOptions wo;
    ASSERT_TRUE(db->Put(wo, fmt::FormatKey(), fmt::EncodeFixed32(1)).ok());
    ASSERT_TRUE(
        db->Put(wo, fmt::NamespaceKey("old"), fmt::EncodeFixed32(10)).ok());
    ASSERT_TRUE(
        db->Put(wo, fmt::NodeKey("old", {4}), fmt::EncodeFixed64(3)).ok());
  }
  {
    auto store = TrieStore::Open(dir, {});
    ASSERT_TRUE(store.ok()) << store.status();
    PoolMap pool;
    EXPECT_EQ(ScanAll(**store, nullptr, &pool), (NodeMap{{{"old", {4}}, 3}}));
    EXPECT_TRUE(pool.empty());
    ASSERT_TRUE(
        SubmitAndWait(**store, {"old", 10, {PoolAdd({4}, {5}, 2)}}).ok());
  }
  auto read_version = [&](uint32_t* version) {
    rocksdb::Options o;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(o, dir, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string bytes;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), fmt::FormatKey(), &bytes).ok());
    ASSERT_TRUE(fmt::DecodeFixed32(bytes, version));
  };
  uint32_t version = 0;
  read_version(&version);
  EXPECT_EQ(version, fmt::kFormatVersion);
  {
    auto store = TrieStore::Open(dir, {});
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(ScanPool(**store), (PoolMap{{{"old", {1, 4, 5}}, 2}}));
  }
  // A version from the future.
  {
    rocksdb::Options o;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), fmt::FormatKey(),
                        fmt::EncodeFixed32(fmt::kFormatVersion + 1))
                    .ok());
  }
  auto refused = TrieStore::Open(dir, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat(
                  "has format version ", fmt::kFormatVersion + 1,
                  "; this build reads versions 1..", fmt::kFormatVersion)));
}

// A damaged pool row is reported by the scan, not crashed on.
TEST(TrieStoreTest, MalformedPoolRowIsDataLoss) {
  const std::string dir = TempDir("pool_corrupt");
  {
    auto store = TrieStore::Open(dir, {});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(
        SubmitAndWait(**store, {"ns", 10, {PoolAdd({1}, {2}, 1)}}).ok());
  }
  for (int damage = 0; damage < 2; ++damage) {
    {
      rocksdb::Options o;
      rocksdb::DB* raw = nullptr;
      ASSERT_TRUE(rocksdb::DB::Open(o, dir, &raw).ok());
      std::unique_ptr<rocksdb::DB> db(raw);
      rocksdb::WriteOptions wo;
      if (damage == 0) {
        // A ragged key.
        ASSERT_TRUE(db->Put(wo, fmt::NgramPrefix("ns") + "\1\0\0",
                            fmt::EncodeFixed64(1))
                        .ok());
      } else {
        ASSERT_TRUE(db->Delete(wo, fmt::NgramPrefix("ns") + "\1\0\0").ok());
        // A count of the wrong width.
        ASSERT_TRUE(db->Put(wo, fmt::NgramKey("ns", {1}, {3}), "abc").ok());
      }
    }
    auto store = TrieStore::Open(dir, {});
    ASSERT_TRUE(store.ok()) << store.status();
    CollectingVisitor v;
    absl::Status s = (*store)->Scan(v);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << damage;
    EXPECT_THAT(s.message(), HasSubstr(damage == 0 ? "n-gram pool key"
                                                   : "malformed count of an "
                                                     "n-gram pool entry"));
  }
}

TEST(TrieStoreTest, InvalidBatchIsRejectedWhole) {
  auto store = TrieStore::Open(TempDir("invalid"), {});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(SubmitAndWait(**store, {"ns", 10, {Add({1}, 1)}}).ok());
  absl::Status s = SubmitAndWait(**store, {"bad/ns", 10, {Add({1}, 1)}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("outside [A-Za-z0-9_.-]"));
  s = SubmitAndWait(**store, {"ns", 10, {Add({2}, 1), Add({}, 1)}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("got 0"));
  s = SubmitAndWait(**store, {"ns", 10, {Add({2}, 1), Add({10}, 1)}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("token id 10 outside [0, 10)"));
  s = SubmitAndWait(**store, {"ns", 10, {Add({-1}, 1)}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*store)->Flush().ok());
  EXPECT_EQ(ScanAll(**store), (NodeMap{{{"ns", {1}}, 1}}));
}

TEST(TrieStoreTest, SecondOpenOfLockedDirIsUnavailable) {
  const std::string dir = TempDir("locked");
  auto first = TrieStore::Open(dir, {});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(SubmitAndWait(**first, {"ns", 10, {Add({3}, 4)}}).ok());
  auto second = TrieStore::Open(dir, {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(dir));
  EXPECT_THAT(second.status().message(),
              HasSubstr("is locked: another store in this process"));
  // The holder is unaffected.
  ASSERT_TRUE(SubmitAndWait(**first, {"ns", 10, {Add({3}, 1)}}).ok());
  EXPECT_EQ(*(*first)->GetCount("ns", {3}), 5);
  ASSERT_TRUE((*first)->Close().ok());
  auto third = TrieStore::Open(dir, {});
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(*(*third)->GetCount("ns", {3}), 5);
}

TEST(TrieStoreTest, CorruptDirIsFailedPrecondition) {
  const std::string dir = TempDir("corrupt");
  {
    auto store = TrieStore::Open(dir, {});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(SubmitAndWait(**store, {"ns", 10, {Add({3}, 4)}}).ok());
  }
  // Point CURRENT at garbage.
  std::string current;
  {
    std::ifstream in(dir + "/CURRENT");
    std::getline(in, current);
  }
  {
    std::ofstream out(dir + "/CURRENT", std::ios::trunc);
    out << "not a manifest";
  }
  auto store = TrieStore::Open(dir, {});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(dir));
  EXPECT_THAT(store.status().message(), HasSubstr("corrupt"));
  // Garbage MANIFEST.
  {
    std::ofstream out(dir + "/CURRENT", std::ios::trunc);
    out << current << "\n";
  }
  {
    std::ofstream out(dir + "/" + current, std::ios::trunc);
    out << "garbage garbage garbage garbage garbage garbage garbage";
  }
  store = TrieStore::Open(dir, {});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(dir));
}

TEST(TrieStoreTest, ForeignDatabaseAndMissingDir) {
  const std::string dir = TempDir("foreign");
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir, &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "hello", "world").ok());
    delete db;
  }
  auto store = TrieStore::Open(dir, {});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(),
              HasSubstr("not a lookahead trie store"));

  TrieStoreOptions no_create;
  no_create.create_if_missing = false;
  const std::string missing = TempDir("missing");
  store = TrieStore::Open(missing, no_create);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(store.status().message(), HasSubstr(missing));
}

TEST(TrieStoreTest, BadOptionsAreInvalidArgument) {
  TrieStoreOptions options;
  options.max_group_mutations = 0;
  auto store = TrieStore::Open(TempDir("bad_options"), options);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(),
              HasSubstr("max_group_mutations >= 1 (got 0)"));
  store = TrieStore::Open("", TrieStoreOptions());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(), HasSubstr("path is empty"));
}

TEST(TrieStoreTest, ClosedStoreRejects) {
  auto store = TrieStore::Open(TempDir("closed"), {});
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Close().ok());
  absl::Status s = SubmitAndWait(**store, {"ns", 10, {Add({1}, 1)}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("closed"));
  EXPECT_EQ((*store)->Flush().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TrieStoreTest, ConcurrentSubmittersLoseNothing) {
  TrieStoreOptions options;
  options.sync = true;
  options.max_group_mutations = 50;
  auto store = TrieStore::Open(TempDir("concurrent"), options);
  ASSERT_TRUE(store.ok());
  std::atomic<int> ok_callbacks{0};
  constexpr int kThreads = 4, kBatches = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kBatches; ++i) {
        (*store)->Submit({"ns", 100, {Add({t}, 1), Add({t, i % 7}, 1)}},
                         [&](absl::Status s) {
                           if (s.ok()) ok_callbacks.fetch_add(1);
                         });
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE((*store)->Flush().ok());
  EXPECT_EQ(ok_callbacks.load(), kThreads * kBatches);
  NodeMap nodes = ScanAll(**store);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ((nodes[{"ns", {t}}]), kBatches);
  }
}

// --- Randomized comparison against a std::map oracle (leveldb "Randomized").

struct RandomizedParam {
  const char* name;
  bool sync;
  int max_group_mutations;
  double delete_fraction;  // Share of mutations that delete a subtree.
  double set_fraction;     // Share that set a count.
};

class TrieStoreRandomizedTest
    : public ::testing::TestWithParam<RandomizedParam> {};

void ApplyToOracle(const TrieMutationBatch& b, NodeMap* oracle, PoolMap* pool) {
  for (const TrieMutation& m : b.mutations) {
    auto key = std::make_pair(b.name_space, m.path);
    if (m.table == TrieMutation::Table::kNgramPool && m.path.empty()) {
      for (auto it = pool->begin(); it != pool->end();) {
        it = it->first.first == b.name_space ? pool->erase(it) : std::next(it);
      }
      continue;
    }
    if (m.table == TrieMutation::Table::kNgramPool) {
      switch (m.kind) {
        case TrieMutation::Kind::kAdd:
          (*pool)[key] += m.value;
          break;
        case TrieMutation::Kind::kSetCount:
          (*pool)[key] = m.value;
          break;
        case TrieMutation::Kind::kDeleteSubtree:
          pool->erase(key);
          break;
      }
      continue;
    }
    switch (m.kind) {
      case TrieMutation::Kind::kAdd:
        (*oracle)[key] += m.value;
        break;
      case TrieMutation::Kind::kSetCount:
        (*oracle)[key] = m.value;
        break;
      case TrieMutation::Kind::kDeleteSubtree:
        for (auto it = oracle->lower_bound(key); it != oracle->end();) {
          const auto& p = it->first.second;
          if (it->first.first != b.name_space || p.size() < m.path.size() ||
              !std::equal(m.path.begin(), m.path.end(), p.begin())) {
            break;
          }
          it = oracle->erase(it);
        }
        break;
    }
  }
}

TEST_P(TrieStoreRandomizedTest, MatchesOracleAcrossReopens) {
  const RandomizedParam& param = GetParam();
  const std::string dir = TempDir(param.name);
  TrieStoreOptions options;
  options.sync = param.sync;
  options.max_group_mutations = param.max_group_mutations;
  options.sync_interval_ms = 5;

  // Token ids straddle byte boundaries so a little-endian or variable-width
  // key would sort wrongly.
  const int32_t tokens[] = {0, 1, 2, 255, 256, 257, 65536, 49151, 0x7ffffffe};
  const std::string namespaces[] = {"a", "a.b", "ab", "Z-9_x"};
  std::mt19937_64 rng(GetParam().sync ? 301 : 17 + param.max_group_mutations);
  auto uniform = [&] { return std::uniform_real_distribution<>(0, 1)(rng); };

  NodeMap oracle;
  // Pool entries over a small alphabet, so that sets and deletes hit.
  PoolMap pool_oracle;
  const int32_t pool_tokens[] = {0, 256, 0x7ffffffe};
  int wipes = 0;
  std::atomic<int> failures{0};
  std::atomic<int> callbacks{0};
  int submitted = 0;
  auto store_or = TrieStore::Open(dir, options);
  ASSERT_TRUE(store_or.ok()) << store_or.status();
  std::unique_ptr<TrieStore> store = std::move(*store_or);

  constexpr int kSteps = 8000;
  constexpr int kCompareEvery = 250;
  constexpr int kReopenEvery = 1000;
  for (int step = 1; step <= kSteps; ++step) {
    TrieMutationBatch b;
    b.name_space = namespaces[rng() % 4];
    b.vocab_size = 0x7fffffff;
    const int n = 1 + rng() % 8;
    for (int i = 0; i < n; ++i) {
      TrieMutation m;
      m.path.resize(1 + rng() % 4);
      for (auto& t : m.path) t = tokens[rng() % 9];
      // A quarter are pool mutations (the same kinds and values below).
      const bool pool = rng() % 4 == 0;
      if (pool) {
        std::vector<int32_t> key(1 + rng() % 2), cont(1 + rng() % 2);
        for (auto& t : key) t = pool_tokens[rng() % 3];
        for (auto& t : cont) t = pool_tokens[rng() % 3];
        m.table = TrieMutation::Table::kNgramPool;
        m.path = NgramMutationPath(key, cont);
      }
      if (pool && rng() % 200 == 0) {
        ++wipes;
        b.mutations.push_back(PoolWipe());
        continue;
      }
      double r = uniform();
      if (r < param.delete_fraction) {
        m.kind = TrieMutation::Kind::kDeleteSubtree;
        // Shallow: deletes real subtrees.
        if (m.table == TrieMutation::Table::kTrie) m.path.resize(1 + rng() % 2);
      } else if (r < param.delete_fraction + param.set_fraction) {
        m.kind = TrieMutation::Kind::kSetCount;
        m.value = rng() % 1000;
      } else {
        m.kind = TrieMutation::Kind::kAdd;
        m.value = 1 + rng() % 5;
      }
      b.mutations.push_back(std::move(m));
    }
    ApplyToOracle(b, &oracle, &pool_oracle);
    ++submitted;
    store->Submit(std::move(b), [&](absl::Status s) {
      if (!s.ok()) failures.fetch_add(1);
      callbacks.fetch_add(1);
    });
    if (step % kCompareEvery == 0) {
      ASSERT_TRUE(store->Flush().ok());
      EXPECT_EQ(callbacks.load(), submitted);
      ASSERT_EQ(failures.load(), 0);
      PoolMap scanned_pool;
      NodeMap scanned = ScanAll(*store, nullptr, &scanned_pool);
      ASSERT_EQ(scanned.size(), oracle.size()) << "step " << step;
      ASSERT_EQ(scanned, oracle) << "step " << step;
      ASSERT_EQ(scanned_pool, pool_oracle) << "step " << step;
      // Point reads agree too.
      for (int probe = 0; probe < 20 && !oracle.empty(); ++probe) {
        auto it = oracle.begin();
        std::advance(it, rng() % oracle.size());
        auto got = store->GetCount(it->first.first, it->first.second);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(*got, it->second);
      }
    }
    if (step % kReopenEvery == 0) {
      // Close without an explicit Flush: Close must drain the queue.
      ASSERT_TRUE(store->Close().ok());
      EXPECT_EQ(callbacks.load(), submitted);
      store.reset();
      store_or = TrieStore::Open(dir, options);
      ASSERT_TRUE(store_or.ok()) << store_or.status();
      store = std::move(*store_or);
      std::map<std::string, int32_t> seen_namespaces;
      PoolMap reopened_pool;
      ASSERT_EQ(ScanAll(*store, &seen_namespaces, &reopened_pool), oracle)
          << "step " << step;
      ASSERT_EQ(reopened_pool, pool_oracle) << "step " << step;
      for (const auto& [name, vocab] : seen_namespaces) {
        EXPECT_EQ(vocab, 0x7fffffff) << name;
      }
    }
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(pool_oracle.size(), 10u);
  EXPECT_GT(wipes, 3);
}

INSTANTIATE_TEST_SUITE_P(
    OptionSets, TrieStoreRandomizedTest,
    ::testing::Values(
        RandomizedParam{"sync_groups_of_256", true, 256, 0.05, 0.05},
        RandomizedParam{"nosync_big_groups", false, 65536, 0.05, 0.1},
        RandomizedParam{"nosync_one_per_group", false, 1, 0.1, 0.0},
        RandomizedParam{"prune_heavy", false, 64, 0.4, 0.1}),
    [](const ::testing::TestParamInfo<RandomizedParam>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace lookahead::draftsvc
