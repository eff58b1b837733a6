#include "engine/model/kv_cache.h"

#include <torch/types.h>

#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<KvCache> MakeCache(int capacity) {
  auto cache = KvCache::Create({2, 3, 4, capacity}, torch::kFloat);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return *std::move(cache);
}

// Writes value `slot * 10 + tag` into every element of slot `slot`.
void FillSlots(KvCache& cache, int from, int count, float tag) {
  for (int l = 0; l < 2; ++l) {
    for (int s = from; s < from + count; ++s) {
      cache.k_layer(l).narrow(1, s, 1).fill_(s * 10 + tag);
      cache.v_layer(l).narrow(1, s, 1).fill_(-(s * 10 + tag));
    }
  }
}

TEST(KvCacheTest, CreateRejectsBadShape) {
  auto cache = KvCache::Create({2, 0, 4, 8}, torch::kFloat);
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cache.status().message(), HasSubstr("kv_heads=0"));
}

TEST(KvCacheTest, ShapesAndAccounting) {
  auto cache = MakeCache(10);
  EXPECT_EQ(cache->k().sizes(), torch::IntArrayRef({2, 3, 10, 4}));
  EXPECT_EQ(cache->Length(), 0);
  EXPECT_EQ(cache->Capacity(), 10);
  ASSERT_TRUE(cache->BeginTree(std::vector<int32_t>{-1, 0, 1}).ok());
  EXPECT_EQ(cache->Pending(), 3);
  ASSERT_TRUE(cache->CommitPath(std::vector<int32_t>{0, 1, 2}).ok());
  EXPECT_EQ(cache->Length(), 3);
  EXPECT_EQ(cache->Pending(), 0);
  absl::Status overflow = cache->BeginTree(std::vector<int32_t>(8, -1));
  EXPECT_EQ(overflow.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(overflow.message(),
              HasSubstr("3 committed + 8 new tokens > capacity 10"));
  EXPECT_TRUE(cache->BeginTree(std::vector<int32_t>(7, -1)).ok());
  EXPECT_TRUE(cache->Truncate(1).ok());
  EXPECT_EQ(cache->Length(), 1);
  EXPECT_EQ(cache->Pending(), 0);
  EXPECT_EQ(cache->Truncate(2).code(), absl::StatusCode::kInvalidArgument);
}

// Randomized: commit random root-to-node paths; the committed slots hold
// exactly the rows of the path's nodes, earlier slots are untouched.
TEST(KvCacheTest, CommitPathMovesPathRows) {
  std::mt19937 rng(3);
  auto cache = MakeCache(200);
  std::vector<float> committed_tags;  // tag of each committed slot
  for (int round = 0; round < 30 && cache->Length() < 150; ++round) {
    const int len = cache->Length();
    const int n = 1 + static_cast<int>(rng() % 20);
    std::vector<int32_t> parents(n);
    for (int i = 0; i < n; ++i)
      parents[i] = static_cast<int32_t>(rng() % (i + 1)) - 1;
    ASSERT_TRUE(cache->BeginTree(parents).ok());
    const float tag = static_cast<float>(round % 10) / 10.0f;
    FillSlots(*cache, len, n, tag);
    std::vector<int32_t> path = {0};
    while (true) {
      std::vector<int32_t> kids;
      for (int i = 0; i < n; ++i)
        if (parents[i] == path.back()) kids.push_back(i);
      if (kids.empty() || rng() % 3 == 0) break;
      path.push_back(kids[rng() % kids.size()]);
    }
    ASSERT_TRUE(cache->CommitPath(path).ok());
    for (int32_t node : path) committed_tags.push_back((len + node) * 10 + tag);
    ASSERT_EQ(cache->Length(), static_cast<int>(committed_tags.size()));
  }
  for (int s = 0; s < cache->Length(); ++s) {
    for (int l = 0; l < 2; ++l) {
      EXPECT_TRUE(
          cache->k()[l].select(1, s).eq(committed_tags[s]).all().item<bool>())
          << "slot " << s;
      EXPECT_TRUE(
          cache->v()[l].select(1, s).eq(-committed_tags[s]).all().item<bool>());
    }
  }
}

TEST(KvCacheTest, CommitPathRejectsNonPaths) {
  auto cache = MakeCache(16);
  EXPECT_EQ(cache->CommitPath(std::vector<int32_t>{0}).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(cache->BeginTree(std::vector<int32_t>{-1, 0, 0, 2}).ok());
  absl::Status s = cache->CommitPath(std::vector<int32_t>{1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("node 1 has parent 0, expected -1"));
  s = cache->CommitPath(std::vector<int32_t>{0, 1, 3});
  EXPECT_THAT(s.message(), HasSubstr("node 3 has parent 2, expected 1"));
  s = cache->CommitPath(std::vector<int32_t>{0, 9});
  EXPECT_THAT(s.message(), HasSubstr("not a node of the 4-node"));
  EXPECT_EQ(cache->Length(), 0);
  EXPECT_EQ(cache->Pending(), 4);  // errors change nothing
  EXPECT_TRUE(cache->CommitPath(std::vector<int32_t>{0, 2, 3}).ok());
  EXPECT_EQ(cache->Length(), 3);
  EXPECT_TRUE(cache->CommitPath({}).ok());  // nothing pending: no-op
}

TEST(KvCacheTest, AppendCommittedCopiesRowsAfterTheCommittedOnes) {
  auto cache = MakeCache(10);
  ASSERT_TRUE(cache->BeginTree({-1, 0}).ok());
  ASSERT_TRUE(cache->CommitPath({0, 1}).ok());
  // rows: (layers, kv_heads, n, head_dim)
  torch::Tensor k =
      torch::arange(2 * 3 * 3 * 4, torch::kFloat).view({2, 3, 3, 4});
  ASSERT_TRUE(cache->BeginTree({-1}).ok());  // dropped by the append
  ASSERT_TRUE(cache->AppendCommitted(k, -k).ok());
  EXPECT_EQ(cache->Length(), 5);
  EXPECT_EQ(cache->Pending(), 0);
  EXPECT_TRUE(torch::equal(cache->k().narrow(2, 2, 3), k));
  EXPECT_TRUE(torch::equal(cache->v().narrow(2, 2, 3), -k));
}

TEST(KvCacheTest, AppendCommittedRejectsBadRows) {
  auto cache = MakeCache(4);
  torch::Tensor wrong = torch::zeros({2, 2, 1, 4});
  absl::Status shape = cache->AppendCommitted(wrong, wrong);
  EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape.message(), HasSubstr("kv_heads=3"));
  torch::Tensor doubles = torch::zeros({2, 3, 1, 4}, torch::kDouble);
  absl::Status dtype = cache->AppendCommitted(doubles, doubles);
  EXPECT_EQ(dtype.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dtype.message(), HasSubstr("Double"));
  torch::Tensor five = torch::zeros({2, 3, 5, 4});
  absl::Status full = cache->AppendCommitted(five, five);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("capacity 4"));
  EXPECT_EQ(cache->AppendCommitted(torch::Tensor(), torch::Tensor()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->Length(), 0);
}

}  // namespace
}  // namespace lookahead::engine
