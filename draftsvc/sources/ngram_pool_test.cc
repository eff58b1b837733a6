#include "draftsvc/sources/ngram_pool.h"

#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "draftsvc/storage/trie_mutation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

using ::testing::HasSubstr;
using Tokens = std::vector<int32_t>;

std::unique_ptr<NgramPool> MakePool(NgramPoolOptions options = {}) {
  absl::StatusOr<std::unique_ptr<NgramPool>> pool = NgramPool::Create(options);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

// (continuation, count, key_length) triples, in Lookup's order.
struct Row {
  Tokens continuation;
  int64_t count;
  int32_t key_length;
  bool operator==(const Row& o) const {
    return continuation == o.continuation && count == o.count &&
           key_length == o.key_length;
  }
};
std::ostream& operator<<(std::ostream& os, const Row& r) {
  os << "{[";
  for (int32_t t : r.continuation) os << t << ",";
  return os << "] x" << r.count << " k=" << r.key_length << "}";
}

std::vector<Row> Rows(const NgramPool& pool, const Tokens& context,
                      int32_t max_results = 100) {
  std::vector<Row> rows;
  for (const NgramMatch& m : pool.Lookup(context, max_results)) {
    rows.push_back(Row{m.continuation, m.count, m.key_length});
  }
  return rows;
}

// Only the continuations stored under exactly `key`.
std::vector<Row> RowsOfKey(const NgramPool& pool, const Tokens& key) {
  std::vector<Row> rows = Rows(pool, key, 1 << 20);
  rows.erase(std::remove_if(rows.begin(), rows.end(),
                            [&](const Row& r) {
                              return r.key_length !=
                                     static_cast<int32_t>(key.size());
                            }),
             rows.end());
  return rows;
}

// A pool entry (key, continuation), ordered as the store's rows: key
// length, key, continuation.
using Entry = std::pair<Tokens, Tokens>;
struct StoreOrder {
  bool operator()(const Entry& a, const Entry& b) const {
    return std::forward_as_tuple(a.first.size(), a.first, a.second) <
           std::forward_as_tuple(b.first.size(), b.first, b.second);
  }
};
using Entries = std::map<Entry, int64_t, StoreOrder>;

// The pool's entries through ForEach, which must visit them in store order.
Entries Contents(const NgramPool& pool) {
  Entries out;
  bool ordered = true;
  pool.ForEach([&](absl::Span<const int32_t> key,
                   absl::Span<const int32_t> continuation, int64_t count) {
    Entry e{Tokens(key.begin(), key.end()),
            Tokens(continuation.begin(), continuation.end())};
    if (!out.empty() && !StoreOrder()(out.rbegin()->first, e)) {
      ordered = false;
    }
    out.emplace(std::move(e), count);
  });
  EXPECT_TRUE(ordered) << "ForEach is not in store order";
  return out;
}

// Applies pool mutations as the store does (kAdd: +=, creating; kSetCount:
// =; kDeleteSubtree: erase exactly that entry, or all with an empty path).
void Replay(const std::vector<TrieMutation>& mutations, Entries* store) {
  for (const TrieMutation& m : mutations) {
    ASSERT_EQ(m.table, TrieMutation::Table::kNgramPool);
    if (m.path.empty()) {
      ASSERT_EQ(m.kind, TrieMutation::Kind::kDeleteSubtree);
      store->clear();
      continue;
    }
    ASSERT_GE(m.path.size(), 2u);
    const size_t key_length = static_cast<size_t>(m.path[0]);
    ASSERT_GE(key_length, 1u);
    ASSERT_LT(key_length + 1, m.path.size());
    Entry e{Tokens(m.path.begin() + 1, m.path.begin() + 1 + key_length),
            Tokens(m.path.begin() + 1 + key_length, m.path.end())};
    switch (m.kind) {
      case TrieMutation::Kind::kAdd:
        (*store)[e] += m.value;
        break;
      case TrieMutation::Kind::kSetCount:
        (*store)[e] = m.value;
        break;
      case TrieMutation::Kind::kDeleteSubtree:
        store->erase(e);
        break;
    }
  }
}

TEST(NgramPoolTest, CreateRejectsBadOptionsNamingTheField) {
  struct Case {
    void (*mutate)(NgramPoolOptions&);
    const char* field;
  };
  const Case cases[] = {
      {[](NgramPoolOptions& o) { o.max_key_tokens = 0; }, "max_key_tokens 0"},
      {[](NgramPoolOptions& o) { o.max_key_tokens = 9; }, "max_key_tokens 9"},
      {[](NgramPoolOptions& o) { o.max_continuation_tokens = 0; },
       "max_continuation_tokens 0"},
      {[](NgramPoolOptions& o) { o.max_continuations_per_key = 0; },
       "max_continuations_per_key 0"},
      {[](NgramPoolOptions& o) { o.capacity_entries = 0; },
       "capacity_entries 0"},
      {[](NgramPoolOptions& o) { o.low_water = 0; }, "low_water 0"},
      {[](NgramPoolOptions& o) { o.low_water = 1.5; }, "low_water 1.5"},
  };
  for (const Case& c : cases) {
    NgramPoolOptions options;
    c.mutate(options);
    absl::StatusOr<std::unique_ptr<NgramPool>> pool =
        NgramPool::Create(options);
    EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument)
        << c.field;
    EXPECT_THAT(pool.status().message(), HasSubstr(c.field));
  }
  EXPECT_TRUE(NgramPool::Create(NgramPoolOptions{}).ok());
}

TEST(NgramPoolTest, IdenticalContinuationsMerge) {
  auto pool = MakePool();
  ASSERT_TRUE(pool->Add({1, 2}, {3, 4}).ok());
  ASSERT_TRUE(pool->Add({1, 2}, {3, 4}, 5).ok());
  ASSERT_TRUE(pool->Add({1, 2}, {3, 5}, 2).ok());
  EXPECT_THAT(Rows(*pool, {1, 2}),
              ::testing::ElementsAre(Row{{3, 4}, 6, 2}, Row{{3, 5}, 2, 2}));
  const NgramPoolStats stats = pool->Stats();
  EXPECT_EQ(stats.entries, 2);
  EXPECT_EQ(stats.keys, 1);
}

TEST(NgramPoolTest, PrefixIsCountedIntoItsBestExtension) {
  auto pool = MakePool();
  ASSERT_TRUE(pool->Add({1}, {3, 4, 5}, 2).ok());
  ASSERT_TRUE(pool->Add({1}, {3, 6}, 1).ok());
  ASSERT_TRUE(pool->Add({1}, {3}, 4).ok());  // Extends {3,4,5} (rank first).
  ASSERT_TRUE(pool->Add({1}, {3, 4}).ok());  // Same.
  EXPECT_THAT(Rows(*pool, {1}),
              ::testing::ElementsAre(Row{{3, 4, 5}, 7, 1}, Row{{3, 6}, 1, 1}));
  EXPECT_EQ(pool->Stats().entries, 2);
}

TEST(NgramPoolTest, ExtensionAbsorbsStoredPrefixes) {
  NgramPoolOptions options;
  options.max_continuations_per_key = 2;
  auto pool = MakePool(options);
  ASSERT_TRUE(pool->Add({1}, {3}, 2).ok());
  ASSERT_TRUE(pool->Add({1}, {7}, 1).ok());  // The key is full now.
  // Not a new slot: {3} becomes {3,4,5} with both counts.
  ASSERT_TRUE(pool->Add({1}, {3, 4, 5}, 1).ok());
  EXPECT_THAT(Rows(*pool, {1}),
              ::testing::ElementsAre(Row{{3, 4, 5}, 3, 1}, Row{{7}, 1, 1}));
  const NgramPoolStats stats = pool->Stats();
  EXPECT_EQ(stats.entries, 2);
  EXPECT_EQ(stats.evicted, 0);
  EXPECT_EQ(stats.rejected, 0);
}

TEST(NgramPoolTest, FullKeyRefusesLowerCountAndReplacesLowestOtherwise) {
  NgramPoolOptions options;
  options.max_continuations_per_key = 2;
  auto pool = MakePool(options);
  ASSERT_TRUE(pool->Add({1}, {10}, 3).ok());
  ASSERT_TRUE(pool->Add({1}, {11}, 2).ok());
  // Count 1 < the lowest (2): refused, nothing changes.
  ASSERT_TRUE(pool->Add({1}, {12}, 1).ok());
  EXPECT_THAT(Rows(*pool, {1}),
              ::testing::ElementsAre(Row{{10}, 3, 1}, Row{{11}, 2, 1}));
  EXPECT_EQ(pool->Stats().rejected, 1);
  // Count 2 == the lowest: the newer one wins.
  ASSERT_TRUE(pool->Add({1}, {12}, 2).ok());
  EXPECT_THAT(Rows(*pool, {1}),
              ::testing::ElementsAre(Row{{10}, 3, 1}, Row{{12}, 2, 1}));
  EXPECT_EQ(pool->Stats().evicted, 1);
  EXPECT_EQ(pool->Stats().entries, 2);
}

TEST(NgramPoolTest, FullKeyOfEqualCountsIsFifo) {
  NgramPoolOptions options;
  options.max_continuations_per_key = 2;
  auto pool = MakePool(options);
  for (int32_t t : {10, 11, 12, 13}) ASSERT_TRUE(pool->Add({1}, {t}).ok());
  EXPECT_THAT(Rows(*pool, {1}),
              ::testing::ElementsAre(Row{{12}, 1, 1}, Row{{13}, 1, 1}));
  EXPECT_EQ(pool->Stats().evicted, 2);
  EXPECT_EQ(pool->Stats().rejected, 0);
}

TEST(NgramPoolTest, LongestSuffixFirstThenShorterKeysFill) {
  NgramPoolOptions options;
  options.max_key_tokens = 3;
  auto pool = MakePool(options);
  ASSERT_TRUE(pool->Add({1, 2}, {10}).ok());
  ASSERT_TRUE(pool->Add({2}, {20}, 5).ok());
  ASSERT_TRUE(pool->Add({2}, {10}, 9).ok());  // Also under {1,2}: skipped.
  ASSERT_TRUE(pool->Add({9, 1, 2}, {30}).ok());
  EXPECT_FALSE(pool->Add({8, 9, 1, 2}, {40}).ok());  // Key too long.

  // Context longer than max_key_tokens: its last 3 tokens first.
  EXPECT_THAT(Rows(*pool, {8, 9, 1, 2}),
              ::testing::ElementsAre(Row{{30}, 1, 3}, Row{{10}, 1, 2},
                                     Row{{20}, 5, 1}));
  // No {7,1,2} key: falls back to {1,2}, then {2}.
  EXPECT_THAT(Rows(*pool, {7, 1, 2}),
              ::testing::ElementsAre(Row{{10}, 1, 2}, Row{{20}, 5, 1}));
  // No {7,2} key: {2} alone.
  EXPECT_THAT(Rows(*pool, {7, 2}),
              ::testing::ElementsAre(Row{{10}, 9, 1}, Row{{20}, 5, 1}));
  EXPECT_THAT(Rows(*pool, {8, 9, 1, 2}, 2),
              ::testing::ElementsAre(Row{{30}, 1, 3}, Row{{10}, 1, 2}));
  EXPECT_TRUE(Rows(*pool, {8, 9, 1, 2}, 0).empty());
  EXPECT_TRUE(Rows(*pool, {2, 1}).empty());
  EXPECT_TRUE(Rows(*pool, {}).empty());
  EXPECT_TRUE(Rows(*pool, {-2}).empty());
}

TEST(NgramPoolTest, OrderIsAFunctionOfTheContents) {
  // Equal counts: longer first, then tokens ascending, whatever the order of
  // the Adds.
  const std::vector<Tokens> continuations = {{5}, {4, 1}, {3, 9}, {2}, {7, 7}};
  std::vector<Tokens> shuffled = continuations;
  std::mt19937 rng(7);
  std::vector<Row> first;
  for (int round = 0; round < 10; ++round) {
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    auto pool = MakePool();
    for (const Tokens& c : shuffled) ASSERT_TRUE(pool->Add({1}, c).ok());
    ASSERT_TRUE(pool->Add({1}, {6}, 2).ok());
    const std::vector<Row> rows = Rows(*pool, {1});
    if (round == 0) {
      first = rows;
      EXPECT_THAT(rows,
                  ::testing::ElementsAre(Row{{6}, 2, 1}, Row{{3, 9}, 1, 1},
                                         Row{{4, 1}, 1, 1}, Row{{7, 7}, 1, 1},
                                         Row{{2}, 1, 1}, Row{{5}, 1, 1}));
    }
    EXPECT_EQ(rows, first) << "round " << round;
  }
}

TEST(NgramPoolTest, PruneKeepsTheBestHalvesAndStaysUnderCapacity) {
  NgramPoolOptions options;
  options.capacity_entries = 10;
  options.low_water = 0.5;
  auto pool = MakePool(options);
  for (int32_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(pool->Add({i}, {100 + i}, i + 1).ok());
  }
  EXPECT_EQ(pool->Stats().prunes, 0);
  ASSERT_TRUE(pool->Add({50}, {150}, 1).ok());  // 11 > 10: prune to 5.
  const NgramPoolStats stats = pool->Stats();
  EXPECT_EQ(stats.prunes, 1);
  EXPECT_EQ(stats.entries, 5);
  EXPECT_EQ(stats.keys, 5);
  EXPECT_EQ(stats.pruned_entries, 6);
  // Counts 6..10 kept and halved (rounding down); the rest gone.
  for (int32_t i = 0; i < 10; ++i) {
    if (i < 5) {
      EXPECT_TRUE(Rows(*pool, {i}).empty()) << i;
    } else {
      EXPECT_THAT(Rows(*pool, {i}),
                  ::testing::ElementsAre(Row{{100 + i}, (i + 1) / 2, 1}));
    }
  }
  EXPECT_TRUE(Rows(*pool, {50}).empty());
}

TEST(NgramPoolTest, PruneDropsCountsHalvedToZero) {
  NgramPoolOptions options;
  options.capacity_entries = 4;
  options.low_water = 1.0;
  auto pool = MakePool(options);
  ASSERT_TRUE(pool->Add({1}, {10}, 3).ok());
  ASSERT_TRUE(pool->Add({1}, {11}, 2).ok());
  ASSERT_TRUE(pool->Add({2}, {20}, 1).ok());
  ASSERT_TRUE(pool->Add({3}, {30}, 1).ok());
  ASSERT_TRUE(pool->Add({4}, {40}, 1).ok());  // 5 > 4: {2}->{20} is cut.
  NgramPoolStats stats = pool->Stats();
  EXPECT_EQ(stats.prunes, 1);
  // Kept 3, 2, 1, 1; halved to 1, 1, 0, 0; zeros dropped.
  EXPECT_EQ(stats.entries, 2);
  EXPECT_EQ(stats.keys, 1);
  EXPECT_EQ(stats.pruned_entries, 3);
  EXPECT_THAT(Rows(*pool, {1}),
              ::testing::ElementsAre(Row{{10}, 1, 1}, Row{{11}, 1, 1}));
}

TEST(NgramPoolTest, PruneCutBreaksCountTiesByRecency) {
  NgramPoolOptions options;
  options.capacity_entries = 4;
  options.low_water = 0.75;
  options.prune_halves_counts = false;
  auto pool = MakePool(options);
  for (int32_t k : {3, 1, 4, 0, 2}) ASSERT_TRUE(pool->Add({k}, {7}).ok());
  // All count 1: the 3 most recently added keys stay.
  EXPECT_EQ(pool->Stats().entries, 3);
  EXPECT_TRUE(Rows(*pool, {3}).empty());
  EXPECT_TRUE(Rows(*pool, {1}).empty());
  for (int32_t k : {4, 0, 2}) {
    EXPECT_THAT(Rows(*pool, {k}), ::testing::ElementsAre(Row{{7}, 1, 1}));
  }
}

TEST(NgramPoolTest, PruneWithoutHalvingOnlyCutsToLowWater) {
  NgramPoolOptions options;
  options.capacity_entries = 4;
  options.low_water = 0.75;
  options.prune_halves_counts = false;
  auto pool = MakePool(options);
  for (int32_t i = 0; i < 5; ++i) ASSERT_TRUE(pool->Add({1}, {i}, 5 - i).ok());
  const NgramPoolStats stats = pool->Stats();
  EXPECT_EQ(stats.entries, 3);
  EXPECT_THAT(
      Rows(*pool, {1}),
      ::testing::ElementsAre(Row{{0}, 5, 1}, Row{{1}, 4, 1}, Row{{2}, 3, 1}));
}

TEST(NgramPoolTest, BadInputIsRejectedNamingTheLimitAndStoresNothing) {
  NgramPoolOptions options;
  options.max_key_tokens = 2;
  options.max_continuation_tokens = 3;
  auto pool = MakePool(options);
  struct Case {
    Tokens key;
    Tokens continuation;
    int64_t count;
    const char* message;
  };
  const Case cases[] = {
      {{}, {1}, 1, "key is empty"},
      {{1, 2, 3}, {1}, 1, "key has 3 tokens, more than max_key_tokens 2"},
      {{1, -4}, {1}, 1, "key token -4 at position 1 is negative"},
      {{1}, {}, 1, "continuation is empty"},
      {{1},
       {1, 2, 3, 4},
       1,
       "continuation has 4 tokens, more than max_continuation_tokens 3"},
      {{1}, {-1}, 1, "continuation token -1 at position 0 is negative"},
      {{1}, {1}, 0, "count 0 is outside [1, 4294967295]"},
      {{1}, {1}, int64_t{1} << 32, "count 4294967296 is outside"},
  };
  for (const Case& c : cases) {
    const absl::Status status = pool->Add(c.key, c.continuation, c.count);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
  const NgramPoolStats stats = pool->Stats();
  EXPECT_EQ(stats.entries, 0);
  EXPECT_EQ(stats.keys, 0);
  EXPECT_TRUE(Rows(*pool, {1}).empty());
}

TEST(NgramPoolTest, CountsSaturate) {
  auto pool = MakePool();
  ASSERT_TRUE(pool->Add({1}, {2}, NgramPool::kMaxCount).ok());
  ASSERT_TRUE(pool->Add({1}, {2}, 5).ok());
  EXPECT_THAT(Rows(*pool, {1}),
              ::testing::ElementsAre(Row{{2}, NgramPool::kMaxCount, 1}));
}

// Random Adds over several option sets; after each step the invariants that
// Lookup can see: bounded, prefix-free, rank-ordered sets; entries within
// capacity and equal to what the keys hold.
TEST(NgramPoolTest, RandomizedInvariants) {
  for (int set = 0; set < 4; ++set) {
    NgramPoolOptions options;
    options.max_key_tokens = 1 + set;
    options.max_continuation_tokens = 1 + 2 * set;
    options.max_continuations_per_key = 1 + 3 * set;
    options.capacity_entries = 20 + 40 * set;
    options.low_water = 0.5 + 0.15 * set;
    options.prune_halves_counts = set % 2 == 0;
    auto pool = MakePool(options);
    std::mt19937 rng(100 + set);
    auto token = [&] { return static_cast<int32_t>(rng() % 4); };
    for (int step = 0; step < 2000; ++step) {
      Tokens key(1 + rng() % options.max_key_tokens);
      for (int32_t& t : key) t = token();
      Tokens cont(1 + rng() % options.max_continuation_tokens);
      for (int32_t& t : cont) t = token();
      ASSERT_TRUE(pool->Add(key, cont, 1 + rng() % 3).ok());
      if (step % 97 != 0) continue;
      int64_t seen = 0;
      // Every key of up to max_key_tokens over the 4-token alphabet.
      std::vector<Tokens> keys = {{}};
      for (int len = 1; len <= options.max_key_tokens; ++len) {
        std::vector<Tokens> longer;
        for (const Tokens& k : keys) {
          if (static_cast<int>(k.size()) != len - 1) continue;
          for (int32_t t = 0; t < 4; ++t) {
            longer.push_back(k);
            longer.back().push_back(t);
          }
        }
        for (const Tokens& k : longer) {
          const std::vector<Row> rows = RowsOfKey(*pool, k);
          seen += static_cast<int64_t>(rows.size());
          ASSERT_LE(rows.size(),
                    static_cast<size_t>(options.max_continuations_per_key));
          for (size_t i = 0; i < rows.size(); ++i) {
            ASSERT_GE(rows[i].count, 1);
            if (i > 0) {
              ASSERT_GE(rows[i - 1].count, rows[i].count);
            }
            for (size_t j = 0; j < rows.size(); ++j) {
              const Tokens& a = rows[i].continuation;
              const Tokens& b = rows[j].continuation;
              ASSERT_FALSE(i != j && a.size() <= b.size() &&
                           std::equal(a.begin(), a.end(), b.begin()))
                  << "not prefix-free, step " << step;
            }
          }
        }
        keys.insert(keys.end(), longer.begin(), longer.end());
      }
      const NgramPoolStats stats = pool->Stats();
      ASSERT_EQ(stats.entries, seen) << "step " << step;
      ASSERT_LE(stats.entries, options.capacity_entries);
    }
  }
}

TEST(NgramPoolTest, ConcurrentAddsAndLookups) {
  NgramPoolOptions options;
  options.max_continuations_per_key = 16;
  auto pool = MakePool(options);
  constexpr int kThreads = 4;
  constexpr int kAddsPerThread = 3000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < kAddsPerThread; ++i) {
        EXPECT_TRUE(pool->Add({i % 3}, {i % 5, 7}).ok());
        const std::vector<NgramMatch> matches = pool->Lookup({t, i % 3}, 4);
        EXPECT_LE(matches.size(), 4u);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  // No prune, no eviction: every Add is accounted for.
  int64_t total = 0;
  for (int32_t k = 0; k < 3; ++k) {
    for (const Row& r : RowsOfKey(*pool, {k})) total += r.count;
  }
  EXPECT_EQ(total, int64_t{kThreads} * kAddsPerThread);
  EXPECT_EQ(pool->Stats().entries, 15);

  // Again with prunes racing lookups: only the invariants hold.
  options.capacity_entries = 50;
  pool = MakePool(options);
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kAddsPerThread; ++i) {
        const int32_t a = static_cast<int32_t>(rng() % 20);
        const int32_t b = static_cast<int32_t>(rng() % 20);
        EXPECT_TRUE(pool->Add({a}, {b}).ok());
        for (const NgramMatch& m : pool->Lookup({b, a}, 8)) {
          EXPECT_GE(m.count, 1);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const NgramPoolStats stats = pool->Stats();
  EXPECT_LE(stats.entries, 50);
  EXPECT_GT(stats.prunes, 0);
}

// Each kind of change emits exactly the rows it changes.
TEST(NgramPoolTest, AddEmitsTheRowsItChanges) {
  NgramPoolOptions options;
  options.max_continuations_per_key = 2;
  auto pool = MakePool(options);
  Entries store;
  std::vector<TrieMutation> m;
  ASSERT_TRUE(pool->Add({1}, {3}, 2, &m).ok());  // New.
  EXPECT_EQ(m.size(), 1u);
  ASSERT_TRUE(pool->Add({1}, {3, 4}, 1, &m).ok());  // Absorbs {3}.
  ASSERT_TRUE(pool->Add({1}, {3}, 1, &m).ok());     // Merges into {3,4}.
  ASSERT_TRUE(pool->Add({1}, {7}, 1, &m).ok());     // Fills the key.
  ASSERT_TRUE(pool->Add({1}, {8}, 1, &m).ok());     // Evicts {7} (FIFO).
  const size_t before_reject = m.size();
  ASSERT_TRUE(pool->Add({1}, {9}, 0, &m).code() ==
              absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.size(), before_reject);  // Errors emit nothing.
  Replay(m, &store);
  EXPECT_EQ(store, (Entries{{{{1}, {3, 4}}, 4}, {{{1}, {8}}, 1}}));
  EXPECT_EQ(store, Contents(*pool));
  // The kinds, in order: set; delete {3}, set {3,4}; set {3,4}; set {7};
  // delete {7}, set {8}.
  std::vector<std::pair<TrieMutation::Kind, Tokens>> kinds;
  for (const TrieMutation& x : m) kinds.emplace_back(x.kind, x.path);
  using K = TrieMutation::Kind;
  EXPECT_EQ(kinds, (std::vector<std::pair<K, Tokens>>{
                       {K::kSetCount, {1, 1, 3}},
                       {K::kDeleteSubtree, {1, 1, 3}},
                       {K::kSetCount, {1, 1, 3, 4}},
                       {K::kSetCount, {1, 1, 3, 4}},
                       {K::kSetCount, {1, 1, 7}},
                       {K::kDeleteSubtree, {1, 1, 7}},
                       {K::kSetCount, {1, 1, 8}},
                   }));
  // A refused continuation changes nothing and emits nothing.
  m.clear();
  ASSERT_TRUE(pool->Add({1}, {9}, 1, &m).ok());
  EXPECT_EQ(pool->Stats().rejected, 0);  // {8} x1 is older: {9} evicts it.
  ASSERT_TRUE(pool->Add({1}, {6}, 1, &m).ok());  // Evicts {9}.
  Replay(m, &store);
  EXPECT_EQ(store, Contents(*pool));
  m.clear();
  ASSERT_TRUE(pool->Add({1}, {3, 4}, 5, &m).ok());
  ASSERT_TRUE(pool->Add({1}, {6}, 5, &m).ok());
  m.clear();
  ASSERT_TRUE(pool->Add({1}, {5}, 1, &m).ok());
  EXPECT_EQ(pool->Stats().rejected, 1);
  EXPECT_TRUE(m.empty());
}

// Random Adds (merges, absorptions, evictions, prunes with and without
// halving): replaying the emitted mutations on an empty store always gives
// exactly the pool's entries, and restoring that store in scan order gives
// the same pool (same Lookup answers) and asks for no repair.
TEST(NgramPoolTest, EmittedMutationsReplayThePoolAndRestoreRebuildsIt) {
  for (int set = 0; set < 4; ++set) {
    NgramPoolOptions options;
    options.max_key_tokens = 1 + (set + 1) % 3;
    options.max_continuation_tokens = 1 + set;
    options.max_continuations_per_key = 1 + 2 * set;
    options.capacity_entries = 8 + 8 * set;
    options.low_water = 0.5 + 0.1 * set;
    options.prune_halves_counts = set % 2 == 0;
    auto pool = MakePool(options);
    std::mt19937 rng(500 + set);
    auto token = [&] { return static_cast<int32_t>(rng() % 6); };
    Entries store;
    for (int step = 1; step <= 3000; ++step) {
      Tokens key(1 + rng() % options.max_key_tokens);
      for (int32_t& t : key) t = token();
      Tokens cont(1 + rng() % options.max_continuation_tokens);
      for (int32_t& t : cont) t = token();
      std::vector<TrieMutation> m;
      ASSERT_TRUE(pool->Add(key, cont, 1 + rng() % 3, &m).ok());
      Replay(m, &store);
      if (step % 50 != 0) continue;
      ASSERT_EQ(store, Contents(*pool)) << "set " << set << " step " << step;
      ASSERT_EQ(static_cast<int64_t>(store.size()), pool->Stats().entries);
    }
    EXPECT_GT(pool->Stats().prunes, 0) << "set " << set;

    auto restored = MakePool(options);
    std::vector<TrieMutation> repairs;
    for (const auto& [entry, count] : store) {
      ASSERT_TRUE(
          restored->Restore(entry.first, entry.second, count, &repairs).ok());
    }
    EXPECT_TRUE(repairs.empty()) << repairs.size() << " repairs, set " << set;
    EXPECT_EQ(Contents(*restored), store);
    EXPECT_EQ(restored->Stats().entries, pool->Stats().entries);
    EXPECT_EQ(restored->Stats().keys, pool->Stats().keys);
    for (int probe = 0; probe < 200; ++probe) {
      Tokens context(1 + rng() % 4);
      for (int32_t& t : context) t = token();
      ASSERT_EQ(Rows(*restored, context), Rows(*pool, context));
    }
  }
}

// A store written under looser options (or damaged) breaks the pool's
// invariants; Restore keeps the pool valid and emits the writes that make
// the store match it again.
TEST(NgramPoolTest, RestoreRepairsAStoreFromOtherOptions) {
  NgramPoolOptions options;
  options.max_key_tokens = 2;
  options.max_continuation_tokens = 3;
  options.max_continuations_per_key = 2;
  options.capacity_entries = 5;
  options.low_water = 1.0;
  options.prune_halves_counts = false;
  Entries store = {
      // {3} prefixes {3,4}: merged into it.
      {{{1}, {3}}, 2},
      {{{1}, {3, 4}}, 5},
      // Three continuations for a key of two: the lowest goes.
      {{{2}, {1}}, 4},
      {{{2}, {2}}, 1},
      {{{2}, {3}}, 6},
      // Key and continuation too long for these options: dropped.
      {{{1, 2, 3}, {1}}, 9},
      {{{4}, {1, 2, 3, 4}}, 9},
      // Count 0 (never written by a pool): dropped.
      {{{5}, {1}}, 0},
      // Fills the pool past capacity 5: the lowest, {7} -> {1}, is pruned.
      {{{6}, {1}}, 3},
      {{{7}, {1}}, 1},
      {{{7, 7}, {1}}, 7},
  };
  auto pool = MakePool(options);
  std::vector<TrieMutation> repairs;
  int rejected = 0;
  for (const auto& [entry, count] : store) {
    absl::Status s = pool->Restore(entry.first, entry.second, count, &repairs);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      ++rejected;
    }
  }
  EXPECT_EQ(rejected, 3);
  Replay(repairs, &store);
  const Entries contents = Contents(*pool);
  EXPECT_EQ(store, contents);
  EXPECT_EQ(contents, (Entries{{{{1}, {3, 4}}, 7},
                               {{{2}, {1}}, 4},
                               {{{2}, {3}}, 6},
                               {{{6}, {1}}, 3},
                               {{{7, 7}, {1}}, 7}}));
  EXPECT_EQ(pool->Stats().prunes, 1);

  // An entry with no row at all (negative id) is refused with no repair.
  repairs.clear();
  EXPECT_EQ(pool->Restore({1}, {-3}, 1, &repairs).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(repairs.empty());
}

// A halving prune writes one whole-pool delete and the survivors (the dead
// cost nothing); without halving, one delete per dropped entry.
TEST(NgramPoolTest, PruneEmitsAWipeAndTheSurvivorsOrTheDropped) {
  for (bool halve : {true, false}) {
    NgramPoolOptions options;
    options.capacity_entries = 4;
    options.low_water = 0.5;
    options.prune_halves_counts = halve;
    auto pool = MakePool(options);
    Entries store;
    std::vector<TrieMutation> m;
    for (int32_t i = 0; i < 4; ++i) {
      ASSERT_TRUE(pool->Add({i}, {i}, 2 + 2 * i, &m).ok());
    }
    Replay(m, &store);
    m.clear();
    ASSERT_TRUE(pool->Add({9}, {9}, 1, &m).ok());  // 5 > 4: keeps 2.
    EXPECT_EQ(pool->Stats().prunes, 1);
    using K = TrieMutation::Kind;
    std::vector<std::pair<K, Tokens>> kinds;
    for (const TrieMutation& x : m) kinds.emplace_back(x.kind, x.path);
    std::sort(kinds.begin() + 1, kinds.end());  // Prune order is unspecified.
    if (halve) {
      EXPECT_EQ(kinds, (std::vector<std::pair<K, Tokens>>{
                           {K::kSetCount, {1, 9, 9}},
                           {K::kSetCount, {1, 2, 2}},
                           {K::kSetCount, {1, 3, 3}},
                           {K::kDeleteSubtree, {}},
                       }));
      // The wipe comes before the survivors.
      ASSERT_EQ(m.size(), 4u);
      EXPECT_TRUE(m[1].path.empty());
    } else {
      EXPECT_EQ(kinds, (std::vector<std::pair<K, Tokens>>{
                           {K::kSetCount, {1, 9, 9}},
                           {K::kDeleteSubtree, {1, 0, 0}},
                           {K::kDeleteSubtree, {1, 1, 1}},
                           {K::kDeleteSubtree, {1, 9, 9}},
                       }));
    }
    Replay(m, &store);
    EXPECT_EQ(store, Contents(*pool));
    EXPECT_EQ(store, halve ? (Entries{{{{2}, {2}}, 3}, {{{3}, {3}}, 4}})
                           : (Entries{{{{2}, {2}}, 6}, {{{3}, {3}}, 8}}));
  }
}

// A prune inside Restore never wipes: the rows the scan has not reached
// yet are on disk and must stay.
TEST(NgramPoolTest, RestorePrunesRowByRow) {
  NgramPoolOptions options;
  options.capacity_entries = 2;
  options.low_water = 0.5;
  auto pool = MakePool(options);
  std::vector<TrieMutation> repairs;
  for (int32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool->Restore({i}, {i}, 4 - i, &repairs).ok());
  }
  for (const TrieMutation& m : repairs) EXPECT_FALSE(m.path.empty());
  Entries store = {{{{0}, {0}}, 4}, {{{1}, {1}}, 3}, {{{2}, {2}}, 2}};
  Replay(repairs, &store);
  EXPECT_EQ(store, Contents(*pool));
  EXPECT_EQ(store, (Entries{{{{0}, {0}}, 2}}));
}

TEST(NgramPoolTest, ForEachVisitsInStoreOrder) {
  auto pool = MakePool();
  ASSERT_TRUE(pool->Add({2, 1}, {5}).ok());
  ASSERT_TRUE(pool->Add({256}, {9, 1}).ok());
  ASSERT_TRUE(pool->Add({256}, {1}, 3).ok());
  ASSERT_TRUE(pool->Add({3}, {0}).ok());
  std::vector<Entry> order;
  pool->ForEach([&](absl::Span<const int32_t> key,
                    absl::Span<const int32_t> continuation, int64_t) {
    order.emplace_back(Tokens(key.begin(), key.end()),
                       Tokens(continuation.begin(), continuation.end()));
  });
  EXPECT_EQ(order,
            (std::vector<Entry>{
                {{3}, {0}}, {{256}, {1}}, {{256}, {9, 1}}, {{2, 1}, {5}}}));
}

}  // namespace
}  // namespace lookahead::draftsvc
