// The lossless promise on the real model: for random draft trees (random
// tokens, tokens copied from the true continuation, perturbed copies, mixes;
// depth 1-12, size 1-64) greedy and seeded-sampling decoding with drafts emit
// exactly the tokens of plain one-token-at-a-time decoding, 128 tokens per
// prompt, 20 prompts. Sharded (shard_count in BUILD); needs the real model.
#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/llama_model.h"
#include "engine/model/threading.h"
#include "engine/testing/engine_test_util.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

constexpr int kPrompts = 20;
constexpr int kNewTokens = 128;
constexpr int kMaxDepth = 12;
constexpr int kMaxTreeSize = 64;

LlamaModel* g_model = nullptr;  // suite-lifetime; owned by the environment

class ModelEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_TRUE(ConfigureThreads({}).ok());
    auto file = OpenRealModel();
    ASSERT_TRUE(file.ok()) << file.status();
    auto options = TestDeviceOptions();  // CPU unless tools/gpu_check.sh
    ASSERT_TRUE(options.ok()) << options.status();
    auto model = LlamaModel::Load(**file, *options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    g_model = model_.get();
  }
  void TearDown() override {
    g_model = nullptr;
    model_.reset();
  }

 private:
  std::unique_ptr<LlamaModel> model_;
};
const ::testing::Environment* const kEnv =
    ::testing::AddGlobalTestEnvironment(new ModelEnvironment);

std::vector<int32_t> PlainDecode(const std::vector<int32_t>& prompt,
                                 const SamplingParams& params) {
  auto cache = *g_model->NewCache(512);
  EXPECT_TRUE(g_model
                  ->Prefill(cache.get(), absl::MakeConstSpan(prompt).subspan(
                                             0, prompt.size() - 1))
                  .ok());
  std::vector<int32_t> out;
  int32_t root = prompt.back();
  while (static_cast<int>(out.size()) < kNewTokens) {
    auto step =
        g_model->VerifyAndAccept(cache.get(), root, DraftTree{}, params);
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) return out;
    EXPECT_EQ(step->size(), 1u);
    out.push_back(step->back());
    root = step->back();
  }
  return out;
}

// A random draft tree; `future` is the true continuation after the root.
DraftTree RandomDraft(std::mt19937& rng, const std::vector<int32_t>& future) {
  auto uniform = [&](int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1));
  };
  auto random_token = [&] { return static_cast<int32_t>(rng() % 49152); };
  DraftTree tree;
  std::vector<int> depth;  // depth of draft node j (children of root: 1)
  const int kind = uniform(0, 9);
  const int size =
      uniform(1, 4) == 1 ? uniform(1, kMaxTreeSize) : uniform(1, 16);
  if (kind >= 2 && !future.empty()) {
    // A chain copied from the truth, perturbed at one depth for kind >= 6.
    const int d = std::min<int>(
        {uniform(1, kMaxDepth), size, static_cast<int>(future.size())});
    const int bad = kind >= 6 ? uniform(0, d - 1) : -1;
    for (int i = 0; i < d; ++i) {
      tree.tokens.push_back(i == bad ? random_token() : future[i]);
      tree.parents.push_back(i - 1);
      depth.push_back(i + 1);
    }
  }
  while (static_cast<int>(tree.tokens.size()) < size) {
    // Branch off a random node (or the root) that is not at max depth.
    int parent = uniform(-1, static_cast<int>(tree.tokens.size()) - 1);
    if (parent >= 0 && depth[parent] >= kMaxDepth) continue;
    const int d = parent < 0 ? 1 : depth[parent] + 1;
    // Sometimes a true token at the right depth but on the wrong branch.
    const bool copy =
        uniform(0, 3) == 0 && d <= static_cast<int>(future.size());
    tree.tokens.push_back(copy ? future[d - 1] : random_token());
    tree.parents.push_back(parent);
    depth.push_back(d);
  }
  return tree;
}

struct SpecStats {
  int steps = 0;
  int accepted_draft_tokens = 0;
};

std::vector<int32_t> SpeculativeDecode(const std::vector<int32_t>& prompt,
                                       const SamplingParams& params,
                                       const std::vector<int32_t>& truth,
                                       std::mt19937& rng, SpecStats* stats) {
  auto cache = *g_model->NewCache(512);
  EXPECT_TRUE(g_model
                  ->Prefill(cache.get(), absl::MakeConstSpan(prompt).subspan(
                                             0, prompt.size() - 1))
                  .ok());
  std::vector<int32_t> out;
  int32_t root = prompt.back();
  while (static_cast<int>(out.size()) < kNewTokens) {
    const std::vector<int32_t> future(truth.begin() + out.size(), truth.end());
    const DraftTree draft = RandomDraft(rng, future);
    auto step = g_model->VerifyAndAccept(cache.get(), root, draft, params);
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) return out;
    ++stats->steps;
    stats->accepted_draft_tokens += static_cast<int>(step->size()) - 1;
    out.insert(out.end(), step->begin(), step->end());
    root = step->back();
    EXPECT_EQ(cache->Length(),
              static_cast<int>(prompt.size() - 1 + out.size()));
  }
  out.resize(kNewTokens);
  return out;
}

class LosslessTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { ASSERT_NE(g_model, nullptr); }
};

TEST_P(LosslessTest, DraftsChangeNoToken) {
  const int p = GetParam();
  const auto start = std::chrono::steady_clock::now();
  std::mt19937 rng(1000 + p);
  std::vector<int32_t> prompt(4 + (p * 7) % 37);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 49152);

  SamplingParams greedy;
  SamplingParams sampled;
  sampled.temperature = 0.6f + 0.05f * (p % 8);
  sampled.top_k = p % 3 == 0 ? 40 : 0;
  sampled.top_p = p % 2 == 0 ? 0.95f : 1.0f;
  sampled.seed = 7919u * p + 1;
  for (const SamplingParams& params : {greedy, sampled}) {
    SCOPED_TRACE(params.greedy() ? "greedy" : "sampled");
    const std::vector<int32_t> plain = PlainDecode(prompt, params);
    ASSERT_EQ(plain.size(), static_cast<size_t>(kNewTokens));
    SpecStats stats;
    const std::vector<int32_t> spec =
        SpeculativeDecode(prompt, params, plain, rng, &stats);
    EXPECT_EQ(spec, plain) << "prompt " << p << "\n plain "
                           << absl::StrJoin(plain, " ") << "\n spec  "
                           << absl::StrJoin(spec, " ");
    // The drafts were really used: well over a token accepted per step.
    EXPECT_GT(stats.accepted_draft_tokens, kNewTokens / 4)
        << "steps " << stats.steps;
    std::printf(
        "prompt %d %s: %d steps for %d tokens (%d draft tokens accepted)\n", p,
        params.greedy() ? "greedy " : "sampled", stats.steps, kNewTokens,
        stats.accepted_draft_tokens);
  }
  std::printf(
      "prompt %d took %.1f s\n", p,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
}

INSTANTIATE_TEST_SUITE_P(Prompts, LosslessTest, ::testing::Range(0, kPrompts));

}  // namespace
}  // namespace lookahead::engine
