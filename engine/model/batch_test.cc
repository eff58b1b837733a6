// SequenceRows: the general forward input. Trees through RowsFromTree give
// the tree's results; scratch rows (a non-tree mask, K/V discarded) never
// change the kept rows' logits or what is committed; bad rows are named.
#include "engine/model/batch.h"

#include <torch/types.h>

#include <memory>
#include <vector>

#include "engine/model/llama_model.h"
#include "engine/testing/engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;

class BatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = LoadTinyModel(TinyModelSpec());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
  }
  std::unique_ptr<KvCache> PrefilledCache(const std::vector<int32_t>& prompt) {
    auto cache = model_->NewCache(64);
    EXPECT_TRUE(cache.ok());
    EXPECT_TRUE(model_->Prefill(cache->get(), prompt).ok());
    return *std::move(cache);
  }
  std::unique_ptr<LlamaModel> model_;
};

TEST_F(BatchTest, RowsFromTreeHasDepthPositionsAndAncestorMask) {
  auto cache = PrefilledCache({1, 2, 3});
  TreeInput tree{cache.get(), {5, 6, 7, 8}, {-1, 0, 0, 2}};
  absl::StatusOr<SequenceRows> rows = RowsFromTree(tree);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->positions, (std::vector<int32_t>{3, 4, 4, 5}));
  EXPECT_EQ(rows->kept_rows(), 4);
  EXPECT_TRUE(rows->mask.Get(3, 2));
  EXPECT_TRUE(rows->mask.Get(3, 0));
  EXPECT_FALSE(rows->mask.Get(3, 1));  // a sibling's child
  EXPECT_FALSE(rows->mask.Get(1, 2));  // siblings
  EXPECT_TRUE(ValidateRows(*rows, cache->Length()).ok());
}

// Jacobi-style scratch rows after a tree: they may see the tree and each
// other in any pattern, yet the tree's logits and committed K/V are those of
// the tree alone.
TEST_F(BatchTest, ScratchRowsDoNotChangeKeptRows) {
  const std::vector<int32_t> prompt = {4, 9, 11, 2};
  auto alone = PrefilledCache(prompt);
  auto with_scratch = PrefilledCache(prompt);
  TreeInput tree{alone.get(), {5, 6, 7}, {-1, 0, 0}};
  auto want = model_->Forward(absl::MakeConstSpan(&tree, 1));
  ASSERT_TRUE(want.ok()) << want.status();

  tree.cache = with_scratch.get();
  SequenceRows rows = *RowsFromTree(tree);
  // Two scratch rows at positions 5 and 6: row 3 sees rows 0 and itself,
  // row 4 sees rows 0, 3 and itself (not a tree of the kept rows).
  rows.tokens.insert(rows.tokens.end(), {40, 41});
  rows.positions.insert(rows.positions.end(), {5, 6});
  PackedTreeMask mask = PackedTreeMask::Zeros(5, 5);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      if (tree.parents[i] == j || i == j || j == 0) mask.Set(i, j);
    }
  }
  mask.Set(3, 0);
  mask.Set(3, 3);
  mask.Set(4, 0);
  mask.Set(4, 3);
  mask.Set(4, 4);
  rows.mask = mask;
  auto got = model_->ForwardRows(absl::MakeConstSpan(&rows, 1));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ((*got)[0].size(0), 5);
  // Equal up to the softmax's summation order over a wider (masked) span.
  EXPECT_LT(MaxAbsDiff((*got)[0].narrow(0, 0, 3), (*want)[0]), 1e-4);
  // Only the kept tree is pending; committing a path gives the same cache.
  EXPECT_EQ(with_scratch->Pending(), 3);
  ASSERT_TRUE(alone->CommitPath({0, 2}).ok());
  ASSERT_TRUE(with_scratch->CommitPath({0, 2}).ok());
  EXPECT_LT(MaxCommittedCacheDiff(*alone, *with_scratch), 1e-5);
}

TEST_F(BatchTest, ScratchOnlyRowsCommitNothing) {
  auto cache = PrefilledCache({1, 2});
  SequenceRows rows;
  rows.cache = cache.get();
  rows.tokens = {3, 4};
  rows.positions = {3, 2};
  rows.mask = PackedTreeMask::Zeros(2, 2);
  rows.mask.Set(0, 0);
  rows.mask.Set(1, 1);
  rows.mask.Set(1, 0);
  auto logits = model_->ForwardRows(absl::MakeConstSpan(&rows, 1));
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(cache->Pending(), 0);
  EXPECT_EQ(cache->Length(), 2);
}

TEST_F(BatchTest, BadRowsAreNamed) {
  auto cache = PrefilledCache({1, 2, 3});
  TreeInput tree{cache.get(), {5, 6}, {-1, 0}};
  SequenceRows good = *RowsFromTree(tree);

  SequenceRows rows = good;
  rows.positions.pop_back();
  EXPECT_THAT(ValidateRows(rows, 3).message(),
              HasSubstr("2 tokens but 1 positions"));
  rows = good;
  rows.mask = PackedTreeMask::Zeros(2, 2);
  rows.mask.Set(1, 1);
  EXPECT_THAT(ValidateRows(rows, 3).message(),
              HasSubstr("row 0 does not attend to itself"));
  rows = good;
  rows.positions[1] = 2;
  EXPECT_THAT(ValidateRows(rows, 3).message(),
              HasSubstr("inside the committed cache"));
  rows = good;
  rows.positions[1] = 9;
  EXPECT_THAT(ValidateRows(rows, 3).message(),
              HasSubstr("kept row 1 has position 9"));
  // A kept row that sees a scratch row: its K/V would depend on it.
  rows = good;
  rows.tokens.push_back(7);
  rows.positions.push_back(5);
  rows.mask = PackedTreeMask::Zeros(3, 3);
  for (int i = 0; i < 3; ++i) rows.mask.Set(i, i);
  rows.mask.Set(1, 0);
  rows.mask.Set(1, 2);
  EXPECT_THAT(ValidateRows(rows, 3).message(),
              HasSubstr("kept row 1 must not attend to row 2"));
  absl::Status forward =
      model_->ForwardRows(absl::MakeConstSpan(&rows, 1)).status();
  EXPECT_EQ(forward.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(forward.message(), HasSubstr("batch[0]: kept row 1"));
  EXPECT_EQ(cache->Length(), 3);
  EXPECT_EQ(cache->Pending(), 0);
}

}  // namespace
}  // namespace lookahead::engine
