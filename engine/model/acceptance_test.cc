// AcceptLongestPath against an oracle: a synthetic "model" whose logits are a
// pure function of the token prefix, decoded plainly one token at a time.
#include "engine/model/acceptance.h"

#include <torch/types.h>

#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;

constexpr int kVocab = 12;

// Logits (kVocab) determined by the prefix; peaky enough that greedy and
// sampled continuations are predictable by a draft, random enough to branch.
std::vector<float> LogitsFor(const std::vector<int32_t>& prefix) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : prefix)
    h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ULL;
  std::mt19937_64 rng(h);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = normal(rng);
  return logits;
}

std::vector<int32_t> PlainDecode(std::vector<int32_t> context, int steps,
                                 const SamplingParams& params) {
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i) {
    // The token drawn is for position context.size() (0-based).
    const int32_t t = SampleToken(LogitsFor(context), params,
                                  static_cast<int64_t>(context.size()));
    out.push_back(t);
    context.push_back(t);
  }
  return out;
}

struct Tree {
  std::vector<int32_t> tokens, parents;
};

// Random tree under root token `root`: with probability p_true a child
// carries the next token of `truth`; no two siblings share a token.
Tree RandomTree(std::mt19937& rng, int32_t root,
                const std::vector<int32_t>& truth, int max_nodes) {
  Tree tree{{root}, {-1}};
  std::vector<int> depth = {0};
  std::vector<std::set<int32_t>> child_tokens(1);
  const int n = 1 + static_cast<int>(rng() % max_nodes);
  while (static_cast<int>(tree.tokens.size()) < n) {
    const int parent = static_cast<int>(rng() % tree.tokens.size());
    int32_t token = static_cast<int32_t>(rng() % kVocab);
    // Follow the truth iff the parent is on the truth path.
    bool on_truth = true;
    for (int k = parent, d = depth[parent]; k > 0; k = tree.parents[k], --d) {
      on_truth = on_truth && tree.tokens[k] == truth[d - 1];
    }
    if (on_truth && rng() % 2 == 0 &&
        depth[parent] < static_cast<int>(truth.size())) {
      token = truth[depth[parent]];
    }
    if (child_tokens[parent].count(token)) continue;
    child_tokens[parent].insert(token);
    tree.tokens.push_back(token);
    tree.parents.push_back(parent);
    depth.push_back(depth[parent] + 1);
    child_tokens.emplace_back();
  }
  return tree;
}

void CheckAgainstOracle(const SamplingParams& params) {
  std::mt19937 rng(params.seed + 100);
  int total_accepted = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> context;
    const int ctx = 1 + static_cast<int>(rng() % 10);
    for (int i = 0; i < ctx; ++i)
      context.push_back(static_cast<int32_t>(rng() % kVocab));
    const int64_t root_position = ctx - 1;
    const std::vector<int32_t> truth = PlainDecode(context, 16, params);
    Tree tree = RandomTree(rng, context.back(), truth, 40);
    const int n = static_cast<int>(tree.tokens.size());
    // Logits of node i = LogitsFor(context + path to i).
    torch::Tensor logits = torch::empty({n, kVocab});
    int deepest_true = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> path;
      for (int k = i; k > 0; k = tree.parents[k])
        path.insert(path.begin(), tree.tokens[k]);
      std::vector<int32_t> prefix = context;
      prefix.insert(prefix.end(), path.begin(), path.end());
      std::vector<float> row = LogitsFor(prefix);
      for (int v = 0; v < kVocab; ++v) logits[i][v] = row[v];
      if (std::equal(path.begin(), path.end(), truth.begin())) {
        deepest_true = std::max(deepest_true, static_cast<int>(path.size()));
      }
    }
    auto result = AcceptLongestPath(tree.tokens, tree.parents, logits, params,
                                    root_position);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->tokens.size(), result->path.size());
    ASSERT_EQ(result->path[0], 0);
    // Longest: every tree path agreeing with the truth is taken.
    EXPECT_EQ(static_cast<int>(result->path.size()) - 1, deepest_true);
    for (size_t i = 1; i < result->path.size(); ++i) {
      EXPECT_EQ(tree.parents[result->path[i]], result->path[i - 1]);
      EXPECT_EQ(tree.tokens[result->path[i]], result->tokens[i - 1]);
    }
    // Lossless: emitted tokens are the plain-decoding tokens.
    EXPECT_EQ(result->tokens,
              std::vector<int32_t>(truth.begin(),
                                   truth.begin() + result->tokens.size()))
        << "trial " << trial;
    total_accepted += static_cast<int>(result->path.size()) - 1;
  }
  EXPECT_GT(total_accepted, 150);  // the trees really did contain the truth
}

TEST(AcceptLongestPathTest, GreedyMatchesPlainDecoding) {
  CheckAgainstOracle(SamplingParams{});
}

TEST(AcceptLongestPathTest, SeededSamplingMatchesPlainDecoding) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = seed == 2 ? 5 : 0;
    p.top_p = seed == 3 ? 0.9f : 1.0f;
    p.seed = seed;
    CheckAgainstOracle(p);
  }
}

TEST(AcceptLongestPathTest, RootOnlyIsOneDecodeStep) {
  torch::Tensor logits = torch::zeros({1, 5});
  logits[0][3] = 1.0f;
  auto r = AcceptLongestPath(std::vector<int32_t>{2}, std::vector<int32_t>{-1},
                             logits, SamplingParams{}, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->path, ::testing::ElementsAre(0));
  EXPECT_THAT(r->tokens, ::testing::ElementsAre(3));
}

TEST(AcceptLongestPathTest, BadInput) {
  torch::Tensor logits = torch::zeros({3, 5});
  const std::vector<int32_t> tokens = {1, 2, 3};
  auto r =
      AcceptLongestPath(tokens, std::vector<int32_t>{0, 0, 1}, logits, {}, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("node 0 must be the root"));
  r = AcceptLongestPath(tokens, std::vector<int32_t>{-1, 0, 2}, logits, {}, 0);
  EXPECT_THAT(r.status().message(), HasSubstr("node 2 has parent 2"));
  r = AcceptLongestPath(tokens, std::vector<int32_t>{-1, -1, 0}, logits, {}, 0);
  EXPECT_THAT(r.status().message(), HasSubstr("node 1 has parent -1"));
  r = AcceptLongestPath(tokens, std::vector<int32_t>{-1, 0}, logits, {}, 0);
  EXPECT_THAT(r.status().message(), HasSubstr("3 tokens and 2 parents"));
  r = AcceptLongestPath(tokens, std::vector<int32_t>{-1, 0, 1},
                        torch::zeros({2, 5}), {}, 0);
  EXPECT_THAT(r.status().message(), HasSubstr("logits must be (3, vocab)"));
  r = AcceptLongestPath({}, {}, logits, {}, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  SamplingParams bad;
  bad.temperature = 1.0f;
  bad.top_p = -1.0f;
  r = AcceptLongestPath(tokens, std::vector<int32_t>{-1, 0, 1}, logits, bad, 0);
  EXPECT_THAT(r.status().message(), HasSubstr("top_p"));
}

}  // namespace
}  // namespace lookahead::engine
