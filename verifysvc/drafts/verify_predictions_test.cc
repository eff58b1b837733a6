// TopPredictions: the k best ids of every verified row, best first, with
// the tree carried as verified; bad shapes and k are errors.

#include "verifysvc/drafts/verify_predictions.h"

#include <torch/types.h>
#include <torch/utils.h>

#include <limits>
#include <vector>

#include "engine/model/draft_tree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::verifysvc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A tree root -> {5 -> 6, 7}, with logits whose row r ranks ids by a
// known permutation: row r puts value v at id (v * 3 + r) % vocab.
TEST(TopPredictionsTest, EveryRowsBestIdsInOrder) {
  engine::DraftTree tree;
  tree.tokens = {5, 6, 7};
  tree.parents = {-1, 0, -1};
  constexpr int kVocab = 11;
  torch::Tensor logits = torch::zeros({4, kVocab});
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < kVocab; ++v) {
      logits[r][(v * 3 + r) % kVocab] = static_cast<float>(v);
    }
  }
  auto got = TopPredictions(tree, logits, 3);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tokens, tree.tokens);
  EXPECT_EQ(got->parents, tree.parents);
  EXPECT_EQ(got->k, 3);
  std::vector<int32_t> want;
  for (int r = 0; r < 4; ++r) {
    for (int v = kVocab - 1; v > kVocab - 4; --v) {
      want.push_back((v * 3 + r) % kVocab);
    }
  }
  EXPECT_EQ(got->top_tokens, want);
}

TEST(TopPredictionsTest, EmptyTreeHasTheRootRowAndKIsCutToTheVocab) {
  engine::DraftTree tree;
  torch::Tensor logits = torch::tensor({{0.5f, 2.0f, -1.0f}});
  auto got = TopPredictions(tree, logits, 8);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->k, 3);
  EXPECT_THAT(got->top_tokens, ElementsAre(1, 0, 2));
}

TEST(TopPredictionsTest, HalfPrecisionLogitsWork) {
  engine::DraftTree tree;
  tree.tokens = {1};
  tree.parents = {-1};
  torch::Tensor logits = torch::tensor({{0.0f, 1.0f, 3.0f}, {4.0f, 2.0f, 0.0f}})
                             .to(torch::kBFloat16);
  auto got = TopPredictions(tree, logits, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->top_tokens, ElementsAre(2, 1, 0, 1));
}

// The CPU scan (float32, k <= 64) against LibTorch's topk on
// vocabulary-sized random rows, on a vocabulary that is no multiple of 16,
// and past the scan's k (LibTorch's path); ties go to the lower id.
TEST(TopPredictionsTest, CpuScanMatchesLibTorchTopK) {
  torch::manual_seed(7);
  for (int64_t vocab : {int64_t{49152}, int64_t{1003}}) {
    engine::DraftTree tree;
    tree.tokens = {1, 2, 3, 4, 5, 6, 7, 8};
    tree.parents = {-1, 0, 1, 2, -1, 4, 5, 6};
    const torch::Tensor logits = torch::randn({9, vocab});
    for (int k : {1, 4, 8, 64, 65}) {
      auto got = TopPredictions(tree, logits, k);
      ASSERT_TRUE(got.ok()) << got.status();
      const torch::Tensor want =
          std::get<1>(logits.topk(k, 1, true, true)).to(torch::kInt32);
      ASSERT_EQ(got->top_tokens.size(), static_cast<size_t>(9 * k));
      for (int64_t i = 0; i < 9 * k; ++i) {
        ASSERT_EQ(got->top_tokens[i], want.view(-1)[i].item<int32_t>())
            << "vocab " << vocab << " k " << k << " at " << i;
      }
    }
  }
  engine::DraftTree root;
  auto ties = TopPredictions(
      root, torch::tensor({{1.0f, 3.0f, 3.0f, 0.0f, 3.0f, 2.0f}}), 4);
  ASSERT_TRUE(ties.ok()) << ties.status();
  EXPECT_THAT(ties->top_tokens, ElementsAre(1, 2, 4, 5));
  // NaN logits (a broken model) break nothing: k valid ids come back.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto nans = TopPredictions(
      root, torch::tensor({{nan, 1.0f, nan, 5.0f, 2.0f}}), 2);
  ASSERT_TRUE(nans.ok()) << nans.status();
  ASSERT_EQ(nans->top_tokens.size(), 2u);
  for (int32_t id : nans->top_tokens) EXPECT_TRUE(id >= 0 && id < 5) << id;
}

TEST(TopPredictionsTest, BadShapeOrKIsAnError) {
  engine::DraftTree tree;
  tree.tokens = {1, 2};
  tree.parents = {-1, 0};
  auto rows = TopPredictions(tree, torch::zeros({2, 5}), 2);
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rows.status().message(), HasSubstr("tree of 3 rows"));
  auto flat = TopPredictions(tree, torch::zeros({15}), 2);
  EXPECT_EQ(flat.status().code(), absl::StatusCode::kInvalidArgument);
  auto k = TopPredictions(tree, torch::zeros({3, 5}), 0);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(k.status().message(), HasSubstr("prediction k = 0"));
}

}  // namespace
}  // namespace lookahead::verifysvc
