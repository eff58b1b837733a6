// PrefixCache against an oracle: a fake "prefill" whose K/V rows for token
// i are a function of tokens [0, i] (as a causal model's are), so a block
// restored after the wrong prefix shows up as wrong rows.

#include "engine/model/prefix_cache.h"

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

constexpr KvCacheShape kLayout = {/*layers=*/2, /*kv_heads=*/2,
                                  /*head_dim=*/3, /*capacity=*/64};

// The oracle's rows: (layers, kv_heads, n, head_dim) for tokens [from, to)
// of `tokens`, each a function of its whole prefix. V = -K.
torch::Tensor OracleRows(const std::vector<int32_t>& tokens, int from, int to) {
  torch::Tensor k = torch::empty(
      {kLayout.layers, kLayout.kv_heads, to - from, kLayout.head_dim});
  uint32_t h = 17;
  for (int i = 0; i < to; ++i) {
    h = h * 1000003u + static_cast<uint32_t>(tokens[i]) + 1;
    if (i < from) continue;
    for (int l = 0; l < kLayout.layers; ++l) {
      for (int kv = 0; kv < kLayout.kv_heads; ++kv) {
        for (int d = 0; d < kLayout.head_dim; ++d) {
          k[l][kv][i - from][d] =
              static_cast<float>((h >> (l + kv + d)) % 100003) + l + 0.25f * d;
        }
      }
    }
  }
  return k;
}

// A cache holding the oracle's rows for every token of `tokens`.
std::unique_ptr<KvCache> Prefilled(const std::vector<int32_t>& tokens) {
  auto cache = KvCache::Create(kLayout, torch::kFloat32);
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!tokens.empty()) {
    torch::Tensor k = OracleRows(tokens, 0, static_cast<int>(tokens.size()));
    EXPECT_TRUE((*cache)->AppendCommitted(k, -k).ok());
  }
  return *std::move(cache);
}

std::unique_ptr<PrefixCache> NewCache(int block_tokens, int64_t blocks) {
  PrefixCacheOptions options;
  options.block_tokens = block_tokens;
  const int64_t block_bytes = int64_t{2} * kLayout.layers * kLayout.kv_heads *
                              block_tokens * kLayout.head_dim * 4;
  options.capacity_bytes = blocks * block_bytes;
  auto cache =
      PrefixCache::Create(options, kLayout, torch::kFloat32, torch::kCPU);
  EXPECT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->block_bytes(), block_bytes);
  return *std::move(cache);
}

// Looks `prompt` up; expects `want` tokens and restores them, checking the
// rows against the oracle.
void ExpectHit(PrefixCache* cache, const std::vector<int32_t>& prompt,
               int want) {
  PrefixHit hit = cache->Lookup(prompt);
  ASSERT_EQ(hit.tokens(), want);
  auto kv = KvCache::Create(kLayout, torch::kFloat32);
  ASSERT_TRUE(kv.ok());
  ASSERT_TRUE(cache->Restore(hit, kv->get()).ok());
  ASSERT_EQ((*kv)->Length(), want);
  if (want == 0) return;
  torch::Tensor k = OracleRows(prompt, 0, want);
  EXPECT_TRUE(torch::equal((*kv)->k().narrow(2, 0, want), k));
  EXPECT_TRUE(torch::equal((*kv)->v().narrow(2, 0, want), -k));
}

std::vector<int32_t> Range(int from, int to) {
  std::vector<int32_t> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a,
                            const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixCacheTest, CreateRejectsBadOptions) {
  PrefixCacheOptions options;
  options.block_tokens = 0;
  auto cache =
      PrefixCache::Create(options, kLayout, torch::kFloat32, torch::kCPU);
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cache.status().message().find("block_tokens"), std::string::npos);
  options.block_tokens = 32;
  options.capacity_bytes = -1;
  EXPECT_EQ(PrefixCache::Create(options, kLayout, torch::kFloat32, torch::kCPU)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  options.capacity_bytes = 0;
  KvCacheShape bad = kLayout;
  bad.head_dim = 0;
  auto wrong = PrefixCache::Create(options, bad, torch::kFloat32, torch::kCPU);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("head_dim=0"), std::string::npos);
}

TEST(PrefixCacheTest, HitsWholeBlocksAndLeavesOnePromptToken) {
  auto cache = NewCache(/*block_tokens=*/4, /*blocks=*/100);
  const std::vector<int32_t> prompt = Range(0, 10);  // 2 whole blocks
  ExpectHit(cache.get(), prompt, 0);
  ASSERT_TRUE(cache->Insert(prompt, *Prefilled(prompt)).ok());
  EXPECT_EQ(cache->Stats().inserted_blocks, 2);
  ExpectHit(cache.get(), prompt, 8);
  ExpectHit(cache.get(), Range(0, 9), 8);
  ExpectHit(cache.get(), Range(0, 8), 4);  // one token left to compute
  ExpectHit(cache.get(), Range(0, 1), 0);
  ExpectHit(cache.get(), {}, 0);
  // Diverges inside the second block (mid-block prefix): the first only.
  ExpectHit(cache.get(), Concat(Range(0, 6), {99, 98, 97, 96}), 4);
  ExpectHit(cache.get(), Concat({99}, Range(1, 10)), 0);
  // Inserting again adds nothing.
  ASSERT_TRUE(cache->Insert(prompt, *Prefilled(prompt)).ok());
  const PrefixCacheStats stats = cache->Stats();
  EXPECT_EQ(stats.inserted_blocks, 2);
  EXPECT_EQ(stats.blocks, 2);
  EXPECT_EQ(stats.bytes, 2 * cache->block_bytes());
  EXPECT_EQ(stats.lookups, 8);
  EXPECT_EQ(stats.hit_tokens, 8 + 8 + 4 + 4);
  EXPECT_EQ(stats.lookup_tokens, 10 + 10 + 9 + 8 + 1 + 0 + 10 + 10);
}

TEST(PrefixCacheTest, EqualBlocksAfterDifferentPrefixesAreDifferentBlocks) {
  auto cache = NewCache(4, 100);
  const std::vector<int32_t> a = Concat(Range(0, 4), Range(50, 55));
  const std::vector<int32_t> b = Concat(Range(10, 14), Range(50, 55));
  ASSERT_TRUE(cache->Insert(a, *Prefilled(a)).ok());
  ExpectHit(cache.get(), b, 0);
  ASSERT_TRUE(cache->Insert(b, *Prefilled(b)).ok());
  ExpectHit(cache.get(), a, 8);
  ExpectHit(cache.get(), b, 8);  // its own rows, not a's
  EXPECT_EQ(cache->Stats().blocks, 4);
}

TEST(PrefixCacheTest, LeastRecentlyUsedGoesFirstLeavesBeforeParents) {
  auto cache = NewCache(4, /*blocks=*/3);
  const std::vector<int32_t> a = Range(0, 9);  // 2 blocks: a1, a2
  const std::vector<int32_t> b = Range(20, 25);
  const std::vector<int32_t> c = Range(30, 35);
  ASSERT_TRUE(cache->Insert(a, *Prefilled(a)).ok());
  ASSERT_TRUE(cache->Insert(b, *Prefilled(b)).ok());
  ExpectHit(cache.get(), a, 8);  // a is now more recent than b
  ASSERT_TRUE(cache->Insert(c, *Prefilled(c)).ok());
  ExpectHit(cache.get(), b, 0);  // b went
  ExpectHit(cache.get(), a, 8);
  // Now c is least recent, then a2, a1. Two new blocks: c, then leaf a2.
  const std::vector<int32_t> d = Range(40, 49);
  ASSERT_TRUE(cache->Insert(d, *Prefilled(d)).ok());
  ExpectHit(cache.get(), c, 0);
  ExpectHit(cache.get(), a, 4);  // a1 stays, a2 (its leaf) went
  ExpectHit(cache.get(), d, 8);
  const PrefixCacheStats stats = cache->Stats();
  EXPECT_EQ(stats.evicted_blocks, 3);
  EXPECT_EQ(stats.bytes, 3 * cache->block_bytes());
  EXPECT_EQ(stats.peak_bytes, 3 * cache->block_bytes());
}

TEST(PrefixCacheTest, HeldBlocksAreNeverEvicted) {
  auto cache = NewCache(4, /*blocks=*/2);
  const std::vector<int32_t> a = Range(0, 9);
  const std::vector<int32_t> b = Range(20, 29);
  ASSERT_TRUE(cache->Insert(a, *Prefilled(a)).ok());
  {
    PrefixHit held = cache->Lookup(a);
    ASSERT_EQ(held.tokens(), 8);
    ASSERT_TRUE(cache->Insert(b, *Prefilled(b)).ok());  // no room
    PrefixCacheStats stats = cache->Stats();
    EXPECT_EQ(stats.skipped_blocks, 2);
    EXPECT_EQ(stats.evicted_blocks, 0);
    EXPECT_EQ(stats.bytes, 2 * cache->block_bytes());
    ExpectHit(cache.get(), b, 0);
    // The held blocks restore intact.
    auto kv = KvCache::Create(kLayout, torch::kFloat32);
    ASSERT_TRUE(cache->Restore(held, kv->get()).ok());
    EXPECT_TRUE(torch::equal((*kv)->k().narrow(2, 0, 8), OracleRows(a, 0, 8)));
  }
  ASSERT_TRUE(cache->Insert(b, *Prefilled(b)).ok());
  ExpectHit(cache.get(), b, 8);
  ExpectHit(cache.get(), a, 0);
  EXPECT_EQ(cache->Stats().evicted_blocks, 2);
}

TEST(PrefixCacheTest, ZeroCapacityCachesNothing) {
  auto cache = NewCache(4, 0);
  const std::vector<int32_t> a = Range(0, 9);
  ASSERT_TRUE(cache->Insert(a, *Prefilled(a)).ok());
  ExpectHit(cache.get(), a, 0);
  EXPECT_EQ(cache->Stats().bytes, 0);
  EXPECT_EQ(cache->Stats().skipped_blocks, 2);
}

TEST(PrefixCacheTest, BadInputIsAnError) {
  auto cache = NewCache(4, 10);
  const std::vector<int32_t> a = Range(0, 9);
  auto short_cache = Prefilled(Range(0, 5));
  absl::Status too_long = cache->Insert(a, *short_cache);
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("holding 5 committed tokens"),
            std::string::npos)
      << too_long.message();

  KvCacheShape other = kLayout;
  other.kv_heads = 1;
  auto foreign = KvCache::Create(other, torch::kFloat32);
  ASSERT_TRUE(foreign.ok());
  absl::Status mismatch = cache->Insert({}, **foreign);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("does not match"), std::string::npos)
      << mismatch.message();

  ASSERT_TRUE(cache->Insert(a, *Prefilled(a)).ok());
  PrefixHit hit = cache->Lookup(a);
  ASSERT_EQ(hit.tokens(), 8);
  auto used = Prefilled(Range(0, 2));
  EXPECT_EQ(cache->Restore(hit, used.get()).code(),
            absl::StatusCode::kFailedPrecondition);
  KvCacheShape tiny = kLayout;
  tiny.capacity = 6;
  auto small = KvCache::Create(tiny, torch::kFloat32);
  absl::Status full = cache->Restore(hit, small->get());
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*small)->Length(), 0);
  EXPECT_EQ(cache->Restore(hit, foreign->get()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*foreign)->Length(), 0);
}

// Random prompts over a small alphabet (many shared prefixes, prefixes
// ending mid-block) against a set of cached block prefixes; with a small
// cap, hits may be shorter than the oracle's but never wrong, and the bytes
// never pass the cap.
TEST(PrefixCacheTest, RandomizedAgainstOracle) {
  for (const int64_t cap_blocks : {int64_t{100000}, int64_t{6}}) {
    for (const int bt : {1, 3, 4}) {
      SCOPED_TRACE(testing::Message()
                   << "cap " << cap_blocks << " block " << bt);
      auto cache = NewCache(bt, cap_blocks);
      std::set<std::vector<int32_t>> cached;  // whole-block prefixes
      std::mt19937 rng(static_cast<uint32_t>(cap_blocks * 10 + bt));
      for (int step = 0; step < 300; ++step) {
        std::vector<int32_t> prompt(1 + rng() % 30);
        for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 3);
        int want = 0;
        for (int n = bt; n <= static_cast<int>(prompt.size()) - 1; n += bt) {
          if (cached.count({prompt.begin(), prompt.begin() + n}) == 0) break;
          want = n;
        }
        PrefixHit hit = cache->Lookup(prompt);
        if (cap_blocks == 100000) {
          ASSERT_EQ(hit.tokens(), want);
        } else {
          ASSERT_LE(hit.tokens(), want);
        }
        auto kv = KvCache::Create(kLayout, torch::kFloat32);
        ASSERT_TRUE(cache->Restore(hit, kv->get()).ok());
        if (hit.tokens() > 0) {
          ASSERT_TRUE(torch::equal((*kv)->k().narrow(2, 0, hit.tokens()),
                                   OracleRows(prompt, 0, hit.tokens())));
        }
        hit = PrefixHit();
        if (rng() % 2 == 0) {
          ASSERT_TRUE(cache->Insert(prompt, *Prefilled(prompt)).ok());
          for (size_t n = bt; n <= prompt.size(); n += bt) {
            cached.insert({prompt.begin(), prompt.begin() + n});
          }
        }
        const PrefixCacheStats stats = cache->Stats();
        ASSERT_LE(stats.bytes, cap_blocks * cache->block_bytes());
        ASSERT_EQ(stats.bytes, stats.blocks * cache->block_bytes());
      }
      const PrefixCacheStats stats = cache->Stats();
      EXPECT_LE(stats.peak_bytes, cap_blocks * cache->block_bytes());
      EXPECT_GT(stats.hit_tokens, 0);
      if (cap_blocks == 6) {
        EXPECT_GT(stats.evicted_blocks, 0);
      }
    }
  }
}

// Threads looking up, restoring and inserting at once (run it under the
// clang thread-safety build and TSan): rows are never wrong, the cap holds.
TEST(PrefixCacheTest, ConcurrentUseKeepsRowsRightAndBytesUnderCap) {
  auto cache = NewCache(2, /*blocks=*/8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      std::mt19937 rng(t);
      for (int step = 0; step < 200; ++step) {
        std::vector<int32_t> prompt(1 + rng() % 12);
        for (int32_t& x : prompt) x = static_cast<int32_t>(rng() % 2);
        PrefixHit hit = cache->Lookup(prompt);
        auto kv = KvCache::Create(kLayout, torch::kFloat32);
        EXPECT_TRUE(cache->Restore(hit, kv->get()).ok());
        if (hit.tokens() > 0) {
          EXPECT_TRUE(torch::equal((*kv)->k().narrow(2, 0, hit.tokens()),
                                   OracleRows(prompt, 0, hit.tokens())));
        }
        EXPECT_TRUE(cache->Insert(prompt, *Prefilled(prompt)).ok());
        EXPECT_LE(cache->Stats().bytes, 8 * cache->block_bytes());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(cache->Stats().peak_bytes, 8 * cache->block_bytes());
}

}  // namespace
}  // namespace lookahead::engine
