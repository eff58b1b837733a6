#include "draftsvc/sources/token_trie.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

using Path = std::vector<int32_t>;
using Oracle = std::map<Path, int64_t>;

Oracle Dump(const TokenTrie& trie) {
  Oracle out;
  Path last;
  trie.ForEach([&](absl::Span<const int32_t> path, int64_t count) {
    Path p(path.begin(), path.end());
    EXPECT_TRUE(last.empty() || last < p) << "ForEach not in key order";
    last = p;
    out[p] = count;
  });
  return out;
}

// Applies mutations the way a store would.
void Apply(const std::vector<TrieMutation>& mutations, Oracle* oracle) {
  for (const TrieMutation& m : mutations) {
    switch (m.kind) {
      case TrieMutation::Kind::kAdd:
        (*oracle)[m.path] += m.value;
        break;
      case TrieMutation::Kind::kSetCount:
        ASSERT_TRUE(oracle->count(m.path)) << "kSetCount on a missing node";
        (*oracle)[m.path] = m.value;
        break;
      case TrieMutation::Kind::kDeleteSubtree: {
        ASSERT_TRUE(oracle->count(m.path)) << "delete of a missing node";
        auto it = oracle->lower_bound(m.path);
        while (it != oracle->end() && it->first.size() >= m.path.size() &&
               std::equal(m.path.begin(), m.path.end(), it->first.begin())) {
          it = oracle->erase(it);
        }
        break;
      }
    }
  }
}

// Inserting every prefix of a path into a map: the reference semantics.
void OracleInsert(absl::Span<const int32_t> path, Oracle* oracle) {
  for (size_t d = 1; d <= path.size(); ++d) {
    (*oracle)[Path(path.begin(), path.begin() + d)] += 1;
  }
}

// A Zipf-ish token stream: small ids are much more frequent.
std::vector<int32_t> ZipfTokens(std::mt19937& rng, int n, int vocab) {
  std::vector<int32_t> out(n);
  std::uniform_real_distribution<double> u(0, 1);
  for (int& t : out) {
    t = static_cast<int32_t>(std::pow(vocab, u(rng))) - 1;
  }
  return out;
}

TEST(TokenTrieTest, InsertCountsEveryPrefix) {
  TokenTrie trie;
  trie.Insert(Path{1, 2, 3});
  trie.Insert(Path{1, 2, 4});
  trie.Insert(Path{1, 5});
  trie.Insert(Path{1, 2, 4});
  Oracle expected = {{{1}, 4},       {{1, 2}, 3}, {{1, 2, 3}, 1},
                     {{1, 2, 4}, 2}, {{1, 5}, 1}};
  EXPECT_EQ(Dump(trie), expected);
  EXPECT_EQ(trie.node_count(), 5);
  const TokenTrie::NodeId n12 = trie.Find(Path{1, 2});
  ASSERT_NE(n12, TokenTrie::kNoNode);
  ASSERT_EQ(trie.NumChildren(n12), 2u);
  // Children sorted by count: 4 (count 2) before 3 (count 1).
  EXPECT_EQ(trie.token(trie.ChildAt(n12, 0)), 4);
  EXPECT_EQ(trie.token(trie.ChildAt(n12, 1)), 3);
  EXPECT_EQ(trie.Find(Path{2}), TokenTrie::kNoNode);
  EXPECT_EQ(trie.Find(Path{1, 2, 3, 9}), TokenTrie::kNoNode);
  EXPECT_EQ(trie.Find(Path{}), TokenTrie::kRoot);
  EXPECT_TRUE(trie.CheckInvariants().ok());
}

TEST(TokenTrieTest, MutationsDescribeInsertions) {
  TokenTrie trie;
  std::vector<TrieMutation> mutations;
  trie.Insert(Path{7, 8}, &mutations);
  ASSERT_EQ(mutations.size(), 2u);
  EXPECT_EQ(mutations[0].kind, TrieMutation::Kind::kAdd);
  EXPECT_EQ(mutations[0].path, Path({7}));
  EXPECT_EQ(mutations[1].path, Path({7, 8}));
  EXPECT_EQ(mutations[1].value, 1);
}

TEST(TokenTrieTest, RandomizedAgainstMapOracle) {
  for (int seed = 0; seed < 4; ++seed) {
    std::mt19937 rng(seed);
    const int vocab = seed % 2 ? 6 : 300;
    const int window = 2 + seed * 2;
    TokenTrie trie;
    Oracle oracle, replayed;
    std::vector<int32_t> stream = ZipfTokens(rng, 4000, vocab);
    for (size_t i = 0; i + 1 < stream.size(); ++i) {
      absl::Span<const int32_t> w =
          absl::MakeConstSpan(stream).subspan(i, window);
      std::vector<TrieMutation> mutations;
      trie.Insert(w, &mutations);
      OracleInsert(w, &oracle);
      Apply(mutations, &replayed);
      if (i % 997 == 0) {
        ASSERT_TRUE(trie.CheckInvariants().ok()) << trie.CheckInvariants();
      }
    }
    ASSERT_TRUE(trie.CheckInvariants().ok()) << trie.CheckInvariants();
    EXPECT_EQ(Dump(trie), oracle);
    EXPECT_EQ(replayed, oracle);
    EXPECT_EQ(trie.node_count(), static_cast<int64_t>(oracle.size()));
  }
}

TEST(TokenTrieTest, SetCountRebuildsAnIdenticalTrie) {
  std::mt19937 rng(7);
  TokenTrie trie;
  std::vector<int32_t> stream = ZipfTokens(rng, 3000, 50);
  for (size_t i = 0; i + 1 < stream.size(); ++i) {
    trie.Insert(absl::MakeConstSpan(stream).subspan(i, 5));
  }
  const Oracle before = Dump(trie);
  TokenTrie restored;
  for (const auto& [path, count] : before) {
    ASSERT_TRUE(restored.SetCount(path, count).ok());
  }
  EXPECT_EQ(Dump(restored), before);
  ASSERT_TRUE(restored.CheckInvariants().ok()) << restored.CheckInvariants();
  // Any parents-first order works, e.g. by depth (not key order).
  TokenTrie by_depth;
  for (size_t depth = 1; depth <= 5; ++depth) {
    for (auto it = before.rbegin(); it != before.rend(); ++it) {
      if (it->first.size() != depth) continue;
      ASSERT_TRUE(by_depth.SetCount(it->first, it->second).ok());
    }
  }
  EXPECT_EQ(Dump(by_depth), before);
  ASSERT_TRUE(by_depth.CheckInvariants().ok()) << by_depth.CheckInvariants();
  // Lowering a count re-sorts the siblings.
  const Path first = before.begin()->first;
  ASSERT_TRUE(restored.SetCount(first, 1).ok());
  EXPECT_EQ(restored.count(restored.Find(first)), 1u);
}

TEST(TokenTrieTest, SetCountRejectsBadInput) {
  TokenTrie trie;
  absl::Status s = trie.SetCount(Path{1, 2}, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("parent"), absl::string_view::npos) << s;
  s = trie.SetCount(Path{}, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = trie.SetCount(Path{1}, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("count 0"), absl::string_view::npos) << s;
  s = trie.SetCount(Path{-4}, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("-4"), absl::string_view::npos) << s;
  EXPECT_EQ(trie.node_count(), 0);
}

// Prune keeps exactly `target` nodes, the most frequent (ties: shallower),
// and its mutations turn the old trie into the new one.
TEST(TokenTrieTest, PruneKeepsMostFrequentAndEmitsExactMutations) {
  for (bool halve : {false, true}) {
    for (int seed = 0; seed < 3; ++seed) {
      std::mt19937 rng(100 + seed);
      TokenTrie trie;
      std::vector<int32_t> stream = ZipfTokens(rng, 5000, 40 + seed * 100);
      for (size_t i = 0; i + 1 < stream.size(); ++i) {
        trie.Insert(absl::MakeConstSpan(stream).subspan(i, 6));
      }
      const Oracle before = Dump(trie);
      const int64_t target = trie.node_count() / (2 + seed);
      std::vector<TrieMutation> mutations;
      const TokenTrie::PruneStats stats = trie.Prune(target, halve, &mutations);
      ASSERT_TRUE(trie.CheckInvariants().ok()) << trie.CheckInvariants();
      EXPECT_EQ(stats.remaining, target);
      EXPECT_EQ(stats.removed, static_cast<int64_t>(before.size()) - target);
      EXPECT_EQ(trie.node_count(), target);
      const Oracle after = Dump(trie);
      Oracle replayed = before;
      Apply(mutations, &replayed);
      EXPECT_EQ(replayed, after);
      int64_t min_kept = INT64_MAX, max_dropped = 0;
      for (const auto& [path, count] : before) {
        auto it = after.find(path);
        if (it == after.end()) {
          max_dropped = std::max(max_dropped, count);
        } else {
          min_kept = std::min(min_kept, count);
          EXPECT_EQ(it->second, halve ? (count + 1) / 2 : count);
        }
      }
      EXPECT_GE(min_kept, max_dropped);
      // Still usable: inserting after a prune works.
      trie.Insert(Path{1, 2, 3});
      ASSERT_TRUE(trie.CheckInvariants().ok()) << trie.CheckInvariants();
    }
  }
}

TEST(TokenTrieTest, PruneBelowTargetIsANoOp) {
  TokenTrie trie;
  trie.Insert(Path{1, 2});
  trie.Insert(Path{1, 2});
  std::vector<TrieMutation> mutations;
  const TokenTrie::PruneStats stats = trie.Prune(2, true, &mutations);
  EXPECT_EQ(stats.removed, 0);
  EXPECT_EQ(stats.remaining, 2);
  EXPECT_TRUE(mutations.empty());
  EXPECT_EQ(trie.count(trie.Find(Path{1, 2})), 2u);
  // Pruning to zero drops everything with one delete per root child.
  trie.Insert(Path{3});
  trie.Prune(0, false, &mutations);
  EXPECT_EQ(trie.node_count(), 0);
  EXPECT_EQ(mutations.size(), 2u);
}

// ~25 bytes/node on realistic windows (design target <= 32).
TEST(TokenTrieTest, MemoryPerNodeStaysSmall) {
  std::mt19937 rng(3);
  TokenTrie trie;
  std::vector<int32_t> stream = ZipfTokens(rng, 120000, 32000);
  for (size_t i = 0; i + 1 < stream.size(); ++i) {
    trie.Insert(absl::MakeConstSpan(stream).subspan(i, 9));
  }
  const double per_node = static_cast<double>(trie.MemoryBytes()) /
                          static_cast<double>(trie.node_count());
  std::printf("nodes=%lld bytes/node=%.2f\n",
              static_cast<long long>(trie.node_count()), per_node);
  EXPECT_LE(per_node, 32.0);
  trie.Prune(trie.node_count() / 2, true, nullptr);
  const double after = static_cast<double>(trie.MemoryBytes()) /
                       static_cast<double>(trie.node_count());
  std::printf("after prune: nodes=%lld bytes/node=%.2f\n",
              static_cast<long long>(trie.node_count()), after);
  EXPECT_LE(after, 32.0);
}

}  // namespace
}  // namespace lookahead::draftsvc
