// LlamaModel on the real embedded model (SmolLM2-135M-Instruct Q4_1): the
// config read from metadata, tree-mask metamorphic properties and KV commit.
// Needs the model (tools/setup.sh).
#include <torch/types.h>

#include <memory>
#include <random>
#include <vector>

#include "engine/model/llama_model.h"
#include "engine/model/threading.h"
#include "engine/testing/engine_test_util.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

// Max |difference| of float32 logits between two evaluation orders of the
// same math (logits of this model are O(10)).
constexpr double kTol = 1e-4;
// Against the float64 reference: float32 rounding accumulates over 30
// layers, so allow more.
constexpr double kRefTol = 2e-3;

class RealModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(ConfigureThreads({}).ok());
    auto file = OpenRealModel();
    ASSERT_TRUE(file.ok()) << file.status();
    auto model = LlamaModel::Load(**file, {});  // native weights
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE((*model)->native());
    model_ = model->release();
    ModelOptions f32;
    f32.weights = WeightFormat::kF32;
    auto reference = LlamaModel::Load(**file, f32);
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = reference->release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    delete reference_;
    reference_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(model_, nullptr); }
  std::unique_ptr<KvCache> NewCache() { return *model_->NewCache(512); }
  static std::vector<int32_t> Tokens(std::mt19937& rng, int n) {
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % 49152);
    return t;
  }
  static LlamaModel* model_;      // owned; suite-lifetime; native
  static LlamaModel* reference_;  // owned; f32, for ReferenceCausalLogits
};
LlamaModel* RealModelTest::model_ = nullptr;
LlamaModel* RealModelTest::reference_ = nullptr;

TEST_F(RealModelTest, ConfigFromMetadata) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.embedding_length, 576);
  EXPECT_EQ(c.block_count, 30);
  EXPECT_EQ(c.head_count, 9);
  EXPECT_EQ(c.head_count_kv, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.feed_forward_length, 1536);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 100000.0f);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(model_->NewCache().value()->Capacity(), 2048);
}

TEST_F(RealModelTest, ChainTreeEqualsCausalForward) {
  std::mt19937 rng(1);
  const std::vector<int32_t> all = Tokens(rng, 24);
  const torch::Tensor want = ReferenceCausalLogits(*reference_, all);
  auto cache = NewCache();
  ASSERT_TRUE(
      model_->Prefill(cache.get(), absl::MakeConstSpan(all).subspan(0, 11))
          .ok());
  DraftTree chain;
  for (int i = 12; i < 24; ++i) {
    chain.tokens.push_back(all[i]);
    chain.parents.push_back(i - 13);
  }
  auto logits = model_->VerifyTree(cache.get(), all[11], chain);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_LT(MaxAbsDiff(*logits, want.narrow(0, 11, 13)), kRefTol);
  // Same tokens decoded one at a time through the engine.
  auto seq = NewCache();
  ASSERT_TRUE(
      model_->Prefill(seq.get(), absl::MakeConstSpan(all).subspan(0, 11)).ok());
  double worst = 0;
  for (int i = 11; i < 24; ++i) {
    auto one = model_->Prefill(seq.get(), absl::MakeConstSpan(&all[i], 1));
    ASSERT_TRUE(one.ok());
    worst = std::max(worst, MaxAbsDiff(*one, (*logits)[i - 11]));
  }
  EXPECT_LT(worst, kTol);
  RecordProperty("chain_vs_sequential_max_abs_diff", std::to_string(worst));
}

TEST_F(RealModelTest, LeavesEqualSeparateDecodes) {
  std::mt19937 rng(2);
  const std::vector<int32_t> prompt = Tokens(rng, 30);
  const std::vector<int32_t> leaves = Tokens(rng, 10);
  auto cache = NewCache();
  ASSERT_TRUE(
      model_->Prefill(cache.get(), absl::MakeConstSpan(prompt).subspan(0, 29))
          .ok());
  DraftTree draft{leaves, std::vector<int32_t>(leaves.size(), -1)};
  auto logits = model_->VerifyTree(cache.get(), prompt[29], draft);
  ASSERT_TRUE(logits.ok()) << logits.status();
  auto base = NewCache();
  ASSERT_TRUE(model_->Prefill(base.get(), prompt).ok());
  for (size_t j = 0; j < leaves.size(); ++j) {
    auto one = model_->Prefill(base.get(), absl::MakeConstSpan(&leaves[j], 1));
    ASSERT_TRUE(one.ok());
    EXPECT_LT(MaxAbsDiff(*one, (*logits)[j + 1]), kTol) << "leaf " << j;
    ASSERT_TRUE(base->Truncate(30).ok());  // back to the prompt
  }
}

TEST_F(RealModelTest, CommitPathEqualsCausalCache) {
  std::mt19937 rng(3);
  const std::vector<int32_t> prompt = Tokens(rng, 16);
  auto cache = NewCache();
  ASSERT_TRUE(
      model_->Prefill(cache.get(), absl::MakeConstSpan(prompt).subspan(0, 15))
          .ok());
  // Root with two branches; accept root -> 2 -> 4 -> 5 -> 7 (node = draft
  // index + 1), a non-contiguous path.
  DraftTree draft{Tokens(rng, 7), {-1, -1, 0, 1, 3, 2, 4}};
  ASSERT_TRUE(model_->VerifyTree(cache.get(), prompt[15], draft).ok());
  const std::vector<int32_t> path = {0, 2, 4, 5, 7};
  ASSERT_TRUE(cache->CommitPath(path).ok());
  std::vector<int32_t> tokens = prompt;
  for (int node : {2, 4, 5, 7}) tokens.push_back(draft.tokens[node - 1]);
  auto causal = NewCache();
  ASSERT_TRUE(model_->Prefill(causal.get(), tokens).ok());
  ASSERT_EQ(cache->Length(), causal->Length());
  EXPECT_LT(MaxCommittedCacheDiff(*cache, *causal), kTol);
}

// The native pass is row-invariant: a token's logits and K/V are the same
// bits decoded alone, verified in a tree, or prefilled in one chunk.
TEST_F(RealModelTest, NativeTreeDecodeAndPrefillAreBitIdentical) {
  std::mt19937 rng(4);
  const std::vector<int32_t> all = Tokens(rng, 40);
  auto tree = NewCache();
  ASSERT_TRUE(
      model_->Prefill(tree.get(), absl::MakeConstSpan(all).subspan(0, 20))
          .ok());
  DraftTree chain;
  for (int i = 21; i < 40; ++i) {
    chain.tokens.push_back(all[i]);
    chain.parents.push_back(i - 22);
  }
  auto logits = model_->VerifyTree(tree.get(), all[20], chain);
  ASSERT_TRUE(logits.ok()) << logits.status();
  auto one_by_one = NewCache();
  for (int i = 0; i < 40; ++i) {
    auto one =
        model_->Prefill(one_by_one.get(), absl::MakeConstSpan(&all[i], 1));
    ASSERT_TRUE(one.ok());
    if (i >= 20) {
      ASSERT_EQ(MaxAbsDiff(*one, (*logits)[i - 20]), 0.0) << "token " << i;
    }
  }
  std::vector<int32_t> path(20);
  for (int i = 0; i < 20; ++i) path[i] = i;
  ASSERT_TRUE(tree->CommitPath(path).ok());
  auto whole = NewCache();
  ASSERT_TRUE(model_->Prefill(whole.get(), all).ok());
  EXPECT_EQ(MaxCommittedCacheDiff(*tree, *whole), 0.0);
  EXPECT_EQ(MaxCommittedCacheDiff(*one_by_one, *whole), 0.0);
}

}  // namespace
}  // namespace lookahead::engine
