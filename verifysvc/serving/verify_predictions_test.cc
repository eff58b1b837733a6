// TopPredictions: the k best ids of every verified row, best first, with
// the tree carried as verified; bad shapes and k are errors.

#include "verifysvc/serving/verify_predictions.h"

#include <torch/torch.h>

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
