// LlamaModel on tiny random-weight GGUF models: forward vs an independent
// causal reference, tree-mask metamorphic properties, batching, KV commit,
// and bad input.
#include "engine/model/llama_model.h"

#include <torch/types.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/threading.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kTol = 1e-4;

// Every case runs on both weight formats: the native pass and LibTorch.
class TinyModelTest
    : public ::testing::TestWithParam<std::tuple<TinyModelSpec, WeightFormat>> {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(ConfigureThreads({}).ok()); }
  void SetUp() override {
    auto model = LoadTinyModel(Spec(), Options());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    ModelOptions f32;
    f32.weights = WeightFormat::kF32;
    auto reference = LoadTinyModel(Spec(), f32);
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = *std::move(reference);
  }
  static const TinyModelSpec& Spec() { return std::get<0>(GetParam()); }
  static ModelOptions Options() {
    ModelOptions options;
    options.weights = std::get<1>(GetParam());
    return options;
  }
  std::unique_ptr<KvCache> NewCache(int capacity = 0) {
    auto cache = model_->NewCache(capacity);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? *std::move(cache) : nullptr;
  }
  std::vector<int32_t> RandomTokens(std::mt19937& rng, int n) {
    std::uniform_int_distribution<int32_t> tok(0,
                                               model_->config().vocab_size - 1);
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = tok(rng);
    return t;
  }
  // Random tree of n nodes with parents in [-1, i) (several roots allowed
  // iff forest).
  static std::vector<int32_t> RandomParents(std::mt19937& rng, int n,
                                            bool forest) {
    std::vector<int32_t> p(n);
    for (int i = 0; i < n; ++i) {
      if (i == 0) {
        p[i] = -1;
      } else {
        std::uniform_int_distribution<int32_t> d(forest ? -1 : 0, i - 1);
        p[i] = d(rng);
      }
    }
    return p;
  }
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<LlamaModel> reference_;  // f32: ReferenceCausalLogits
};

TEST_P(TinyModelTest, ConfigComesFromMetadata) {
  const ModelConfig& c = model_->config();
  const TinyModelSpec& s = Spec();
  EXPECT_EQ(c.architecture, s.architecture);
  EXPECT_EQ(c.vocab_size, s.vocab);
  EXPECT_EQ(c.embedding_length, s.dim);
  EXPECT_EQ(c.block_count, s.layers);
  EXPECT_EQ(c.head_count, s.heads);
  EXPECT_EQ(c.head_count_kv, s.kv_heads);
  EXPECT_EQ(c.head_dim, s.dim / s.heads);
  EXPECT_EQ(c.feed_forward_length, s.ffn);
  EXPECT_EQ(c.context_length, s.context);
  EXPECT_EQ(c.tied_output, s.tied);
  EXPECT_EQ(c.qkv_bias, s.architecture == "qwen2");
  EXPECT_FLOAT_EQ(c.rope_freq_base, s.rope_base);
  auto cache = NewCache();
  EXPECT_EQ(cache->Capacity(), std::min(s.context, 2048));
}

// A grown cache holds the committed tokens and decodes on as the old one
// would have; a capacity below them is refused and changes nothing.
TEST_P(TinyModelTest, GrowCacheKeepsTheCommittedTokens) {
  std::mt19937 rng(11);
  const std::vector<int32_t> prompt = RandomTokens(rng, 9);
  std::unique_ptr<KvCache> cache;
  ASSERT_TRUE(model_->GrowCache(&cache, 12).ok());  // from none
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->Capacity(), 12);
  EXPECT_EQ(cache->Length(), 0);
  ASSERT_TRUE(model_->Prefill(cache.get(), prompt).ok());
  auto kept = NewCache(12);
  ASSERT_TRUE(model_->Prefill(kept.get(), prompt).ok());

  KvCache* before = cache.get();
  EXPECT_FALSE(model_->GrowCache(&cache, 8).ok());
  EXPECT_EQ(cache.get(), before);
  ASSERT_TRUE(model_->GrowCache(&cache, 20).ok());
  EXPECT_EQ(cache->Capacity(), 20);
  EXPECT_EQ(cache->Length(), 9);
  EXPECT_EQ(MaxCommittedCacheDiff(*cache, *kept), 0);
  auto grown_next = model_->Prefill(cache.get(), {3});
  auto kept_next = model_->Prefill(kept.get(), {3});
  ASSERT_TRUE(grown_next.ok() && kept_next.ok());
  EXPECT_EQ(MaxAbsDiff(*grown_next, *kept_next), 0);
}

TEST_P(TinyModelTest, PrefillMatchesReferenceInEveryChunking) {
  std::mt19937 rng(7);
  const std::vector<int32_t> prompt = RandomTokens(rng, 37);
  const torch::Tensor want = ReferenceCausalLogits(*reference_, prompt);
  // All positions in one chain.
  auto cache = NewCache();
  TreeInput in;
  in.cache = cache.get();
  in.tokens = prompt;
  for (int i = 0; i < 37; ++i) in.parents.push_back(i - 1);
  auto logits = model_->Forward(absl::MakeConstSpan(&in, 1));
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_LT(MaxAbsDiff((*logits)[0], want), kTol);
  // Chunked prefill, several chunk sizes: last-token logits.
  for (int chunk : {1, 3, 16, 256}) {
    ModelOptions options = Options();
    options.prefill_chunk_tokens = chunk;
    auto chunked = LoadTinyModel(Spec(), options);
    ASSERT_TRUE(chunked.ok());
    auto c2 = (*chunked)->NewCache();
    ASSERT_TRUE(c2.ok());
    auto last = (*chunked)->Prefill(c2->get(), prompt);
    ASSERT_TRUE(last.ok()) << last.status();
    EXPECT_EQ((*c2)->Length(), 37);
    EXPECT_LT(MaxAbsDiff(*last, want[36]), kTol) << "chunk " << chunk;
  }
}

// Metamorphic (a): a chain-shaped draft gives the causal logits, and equals
// decoding the same tokens one at a time.
TEST_P(TinyModelTest, ChainTreeEqualsCausalAndSequentialDecode) {
  std::mt19937 rng(11);
  const std::vector<int32_t> prompt = RandomTokens(rng, 9);
  const std::vector<int32_t> chain = RandomTokens(rng, 8);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), chain.begin(), chain.end());
  const torch::Tensor want = ReferenceCausalLogits(*reference_, all);

  auto cache = NewCache();
  ASSERT_TRUE(
      model_->Prefill(cache.get(), absl::MakeConstSpan(prompt).subspan(0, 8))
          .ok());
  DraftTree draft;
  draft.tokens.assign(chain.begin(), chain.end());
  for (int i = 0; i < 8; ++i) draft.parents.push_back(i - 1);
  auto logits = model_->VerifyTree(cache.get(), prompt[8], draft);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_LT(MaxAbsDiff(*logits, want.narrow(0, 8, 9)), kTol);

  auto seq = NewCache();
  ASSERT_TRUE(
      model_->Prefill(seq.get(), absl::MakeConstSpan(prompt).subspan(0, 8))
          .ok());
  for (int i = 8; i < 17; ++i) {
    auto one = model_->Prefill(seq.get(), absl::MakeConstSpan(&all[i], 1));
    ASSERT_TRUE(one.ok());
    EXPECT_LT(MaxAbsDiff(*one, (*logits)[i - 8]), kTol) << "position " << i;
  }
}

// Metamorphic (a): a root with k leaves equals k separate one-token decodes.
TEST_P(TinyModelTest, LeavesEqualSeparateDecodes) {
  std::mt19937 rng(13);
  const std::vector<int32_t> prompt = RandomTokens(rng, 20);
  const std::vector<int32_t> leaves = RandomTokens(rng, 12);
  auto cache = NewCache();
  ASSERT_TRUE(
      model_->Prefill(cache.get(), absl::MakeConstSpan(prompt).subspan(0, 19))
          .ok());
  DraftTree draft;
  draft.tokens = leaves;
  draft.parents.assign(leaves.size(), -1);
  auto logits = model_->VerifyTree(cache.get(), prompt[19], draft);
  ASSERT_TRUE(logits.ok()) << logits.status();
  for (size_t j = 0; j < leaves.size(); ++j) {
    auto single = NewCache();
    ASSERT_TRUE(model_->Prefill(single.get(), prompt).ok());
    auto one =
        model_->Prefill(single.get(), absl::MakeConstSpan(&leaves[j], 1));
    ASSERT_TRUE(one.ok());
    EXPECT_LT(MaxAbsDiff(*one, (*logits)[j + 1]), kTol) << "leaf " << j;
  }
}

// Every node of a random tree (forest allowed) sees exactly its ancestors:
// its logits equal the causal logits of prompt + root-to-node path.
TEST_P(TinyModelTest, RandomTreesMatchReferencePerPath) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 6; ++trial) {
    const std::vector<int32_t> prompt = RandomTokens(rng, 1 + trial * 5);
    const int n = 1 + static_cast<int>(rng() % 24);
    TreeInput in;
    auto cache = NewCache();
    ASSERT_TRUE(model_->Prefill(cache.get(), prompt).ok());
    in.cache = cache.get();
    in.tokens = RandomTokens(rng, n);
    in.parents = RandomParents(rng, n, /*forest=*/trial % 2 == 1);
    auto logits = model_->Forward(absl::MakeConstSpan(&in, 1));
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> path;
      for (int j = i; j >= 0; j = in.parents[j])
        path.insert(path.begin(), in.tokens[j]);
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), path.begin(), path.end());
      const torch::Tensor want = ReferenceCausalLogits(*reference_, all);
      EXPECT_LT(MaxAbsDiff((*logits)[0][i], want[all.size() - 1]), kTol)
          << "trial " << trial << " node " << i;
    }
  }
}

// A batch of sequences in one pass equals each sequence alone.
TEST_P(TinyModelTest, BatchEqualsSeparateForwards) {
  std::mt19937 rng(19);
  std::vector<std::unique_ptr<KvCache>> caches, solo_caches;
  std::vector<TreeInput> batch;
  for (int s = 0; s < 5; ++s) {
    const std::vector<int32_t> prompt = RandomTokens(rng, 3 + 4 * s);
    caches.push_back(NewCache());
    solo_caches.push_back(NewCache());
    ASSERT_TRUE(model_->Prefill(caches.back().get(), prompt).ok());
    ASSERT_TRUE(model_->Prefill(solo_caches.back().get(), prompt).ok());
    TreeInput in;
    in.cache = caches.back().get();
    const int n = 1 + s * 3;
    in.tokens = RandomTokens(rng, n);
    in.parents = RandomParents(rng, n, false);
    in.last_logits_only = s == 2;
    batch.push_back(in);
  }
  auto logits = model_->Forward(batch);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(logits->size(), batch.size());
  for (int s = 0; s < 5; ++s) {
    TreeInput in = batch[s];
    in.cache = solo_caches[s].get();
    auto solo = model_->Forward(absl::MakeConstSpan(&in, 1));
    ASSERT_TRUE(solo.ok());
    EXPECT_EQ((*logits)[s].size(0),
              s == 2 ? 1 : static_cast<int64_t>(in.tokens.size()));
    EXPECT_LT(MaxAbsDiff((*logits)[s], (*solo)[0]), kTol) << "sequence " << s;
    EXPECT_EQ(caches[s]->Pending(), static_cast<int>(in.tokens.size()));
  }
}

// (c) After committing a path, the cache equals the causal prefill of the
// same tokens, and decoding continues identically.
TEST_P(TinyModelTest, CommitPathEqualsCausalCache) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 8; ++trial) {
    const std::vector<int32_t> prompt = RandomTokens(rng, 5 + trial);
    auto cache = NewCache();
    ASSERT_TRUE(model_
                    ->Prefill(cache.get(), absl::MakeConstSpan(prompt).subspan(
                                               0, prompt.size() - 1))
                    .ok());
    DraftTree draft;
    const int n = 1 + static_cast<int>(rng() % 20);
    draft.tokens = RandomTokens(rng, n);
    for (int j = 0; j < n; ++j) {
      draft.parents.push_back(static_cast<int32_t>(rng() % (j + 1)) - 1);
    }
    ASSERT_TRUE(model_->VerifyTree(cache.get(), prompt.back(), draft).ok());
    // Path: root then a random descent.
    std::vector<int32_t> path = {0};
    std::vector<int32_t> tokens = prompt;
    for (int node = 0;;) {
      std::vector<int32_t> kids;
      for (int j = 0; j < n; ++j)
        if (draft.parents[j] + 1 == node) kids.push_back(j + 1);
      if (kids.empty() || rng() % 4 == 0) break;
      node = kids[rng() % kids.size()];
      path.push_back(node);
      tokens.push_back(draft.tokens[node - 1]);
    }
    const int before = cache->Length();
    ASSERT_TRUE(cache->CommitPath(path).ok());
    EXPECT_EQ(cache->Length(), before + static_cast<int>(path.size()));
    EXPECT_EQ(cache->Pending(), 0);
    auto causal = NewCache();
    ASSERT_TRUE(model_->Prefill(causal.get(), tokens).ok());
    ASSERT_EQ(causal->Length(), cache->Length());
    EXPECT_LT(MaxCommittedCacheDiff(*cache, *causal), kTol);
    const int32_t next = RandomTokens(rng, 1)[0];
    auto a = model_->Prefill(cache.get(), absl::MakeConstSpan(&next, 1));
    auto b = model_->Prefill(causal.get(), absl::MakeConstSpan(&next, 1));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_LT(MaxAbsDiff(*a, *b), kTol);
  }
}

// The scheduler's loop: several sequences verify random drafts in ONE
// Forward per step, each accepts and commits its own path; every sequence
// emits exactly its plain-decoding tokens (greedy and seeded sampling).
TEST_P(TinyModelTest, BatchedSpeculativeDecodingIsLossless) {
  std::mt19937 rng(29);
  constexpr int kSeqs = 4, kTokens = 40;
  for (bool greedy : {true, false}) {
    std::vector<std::vector<int32_t>> prompts, plain(kSeqs);
    std::vector<SamplingParams> params(kSeqs);
    for (int s = 0; s < kSeqs; ++s) {
      prompts.push_back(RandomTokens(rng, 2 + 3 * s));
      if (!greedy) {
        params[s].temperature = 0.9f;
        params[s].top_p = s % 2 ? 0.9f : 1.0f;
        params[s].seed = 100 + s;
      }
      auto cache = NewCache();
      ASSERT_TRUE(
          model_
              ->Prefill(cache.get(), absl::MakeConstSpan(prompts[s])
                                         .subspan(0, prompts[s].size() - 1))
              .ok());
      int32_t root = prompts[s].back();
      while (static_cast<int>(plain[s].size()) < kTokens) {
        auto step = model_->VerifyAndAccept(cache.get(), root, {}, params[s]);
        ASSERT_TRUE(step.ok()) << step.status();
        plain[s].push_back(root = step->back());
      }
    }
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<std::vector<int32_t>> out(kSeqs);
    std::vector<int32_t> roots;
    for (int s = 0; s < kSeqs; ++s) {
      caches.push_back(NewCache());
      ASSERT_TRUE(
          model_
              ->Prefill(caches[s].get(), absl::MakeConstSpan(prompts[s])
                                             .subspan(0, prompts[s].size() - 1))
              .ok());
      roots.push_back(prompts[s].back());
    }
    int accepted = 0;
    while (true) {
      std::vector<TreeInput> batch;
      std::vector<int> which;
      for (int s = 0; s < kSeqs; ++s) {
        if (static_cast<int>(out[s].size()) >= kTokens) continue;
        DraftTree draft;  // truth chain (maybe perturbed) plus random leaves
        const int depth = static_cast<int>(rng() % 6);
        for (int d = 0; d < depth && out[s].size() + d < plain[s].size(); ++d) {
          draft.tokens.push_back(rng() % 5 == 0 ? RandomTokens(rng, 1)[0]
                                                : plain[s][out[s].size() + d]);
          draft.parents.push_back(d - 1);
        }
        for (int extra = static_cast<int>(rng() % 4); extra > 0; --extra) {
          draft.parents.push_back(
              static_cast<int32_t>(rng() % (draft.tokens.size() + 1)) - 1);
          draft.tokens.push_back(RandomTokens(rng, 1)[0]);
        }
        batch.push_back(MakeVerifyInput(caches[s].get(), roots[s], draft));
        which.push_back(s);
      }
      if (batch.empty()) break;
      std::vector<int64_t> root_positions;
      for (const TreeInput& in : batch)
        root_positions.push_back(in.cache->Length());
      auto logits = model_->Forward(batch);
      ASSERT_TRUE(logits.ok()) << logits.status();
      for (size_t b = 0; b < batch.size(); ++b) {
        const int s = which[b];
        auto result =
            AcceptLongestPath(batch[b].tokens, batch[b].parents, (*logits)[b],
                              params[s], root_positions[b]);
        ASSERT_TRUE(result.ok()) << result.status();
        ASSERT_TRUE(caches[s]->CommitPath(result->path).ok());
        accepted += static_cast<int>(result->path.size()) - 1;
        out[s].insert(out[s].end(), result->tokens.begin(),
                      result->tokens.end());
        roots[s] = out[s].back();
      }
    }
    for (int s = 0; s < kSeqs; ++s) {
      out[s].resize(kTokens);
      EXPECT_EQ(out[s], plain[s])
          << "sequence " << s << (greedy ? " greedy" : " sampled");
    }
    EXPECT_GT(accepted, kSeqs * kTokens / 4);
  }
}

TinyModelSpec Qwen2Spec() {
  TinyModelSpec s;
  s.architecture = "qwen2";
  s.tied = false;
  s.heads = 8;
  s.kv_heads = 1;
  s.rope_base = 1e6f;
  return s;
}

TinyModelSpec MhaSpec() {
  TinyModelSpec s;
  s.kv_heads = 4;
  s.layers = 3;
  s.tied = false;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Specs, TinyModelTest,
    ::testing::Combine(
        ::testing::Values(TinyModelSpec{}, MhaSpec(), Qwen2Spec()),
        ::testing::Values(WeightFormat::kNative, WeightFormat::kF32)),
    [](const auto& info) {
      const TinyModelSpec& spec = std::get<0>(info.param);
      return absl::StrCat(spec.architecture, "_h", spec.heads, "_kv",
                          spec.kv_heads, "_",
                          WeightFormatName(std::get<1>(info.param)));
    });

// dtype is a config change: bfloat16 weights and cache give logits close
// to float32 (bf16 keeps ~3 significant digits).
TEST(DtypeTest, Bfloat16MatchesFloat32Loosely) {
  ModelOptions bf16;
  bf16.dtype = torch::kBFloat16;
  auto fp = LoadTinyModel(TinyModelSpec{});
  auto half = LoadTinyModel(TinyModelSpec{}, bf16);
  ASSERT_TRUE(fp.ok() && half.ok()) << half.status();
  auto c1 = (*fp)->NewCache(64);
  auto c2 = (*half)->NewCache(64);
  ASSERT_TRUE(c1.ok() && c2.ok());
  EXPECT_EQ((*c2)->k().scalar_type(), torch::kBFloat16);
  const std::vector<int32_t> prompt = {5, 17, 3, 99, 42, 8};
  auto a = (*fp)->Prefill(c1->get(), prompt);
  auto b = (*half)->Prefill(c2->get(), prompt);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ(b->scalar_type(), torch::kFloat);
  const double scale = a->abs().max().item<double>();
  EXPECT_LT(MaxAbsDiff(*a, *b), 0.1 * scale);
  EXPECT_GT(MaxAbsDiff(*a, *b), 0.0);  // really computed in bf16
}

// int8 activations are a different (lossy) model, so they are not compared
// with the reference bit for bit; what drafting needs is that they stay
// row-invariant: a chain verified as one tree gives the bits of decoding
// its tokens one at a time, and a root's leaves those of separate decodes.
// With a float32 and a float16 KV cache (verifysvc's default form: int8
// and float16).
class Int8FormTest : public ::testing::TestWithParam<bool> {};

TEST_P(Int8FormTest, RowInvariantAndCloseToFloat) {
  TinyModelSpec spec;
  spec.weight_type = GgmlType::kQ4_1;
  ModelOptions int8;
  int8.activations = LinearActivations::kInt8;
  int8.kv_f16 = GetParam();
  auto model = LoadTinyModel(spec, int8);
  auto f32 = LoadTinyModel(spec);
  ASSERT_TRUE(model.ok() && f32.ok()) << model.status();
  EXPECT_THAT((*model)->DescribeWeights(), HasSubstr("int8 activations"));
  EXPECT_THAT((*f32)->DescribeWeights(), Not(HasSubstr("int8")));

  std::mt19937 rng(21);
  std::uniform_int_distribution<int32_t> tok(0, spec.vocab - 1);
  std::vector<int32_t> all(17);
  for (int32_t& t : all) t = tok(rng);
  const absl::Span<const int32_t> prompt = absl::MakeConstSpan(all).first(8);
  auto tree = *(*model)->NewCache(64);
  ASSERT_TRUE((*model)->Prefill(tree.get(), prompt).ok());
  DraftTree chain;
  for (int i = 9; i < 17; ++i) {
    chain.tokens.push_back(all[i]);
    chain.parents.push_back(i - 10);
  }
  auto logits = (*model)->VerifyTree(tree.get(), all[8], chain);
  ASSERT_TRUE(logits.ok()) << logits.status();
  auto seq = *(*model)->NewCache(64);
  auto reference = *(*f32)->NewCache(64);
  ASSERT_TRUE((*model)->Prefill(seq.get(), prompt).ok());
  ASSERT_TRUE((*f32)->Prefill(reference.get(), prompt).ok());
  for (int i = 8; i < 17; ++i) {
    auto one = (*model)->Prefill(seq.get(), absl::MakeConstSpan(&all[i], 1));
    auto exact =
        (*f32)->Prefill(reference.get(), absl::MakeConstSpan(&all[i], 1));
    ASSERT_TRUE(one.ok() && exact.ok());
    EXPECT_EQ(MaxAbsDiff(*one, (*logits)[i - 8]), 0.0) << "position " << i;
    // Lossy, but the same model: near the logits' scale (random weights
    // amplify the rounding; measured up to 7% here, 0.8 of ~30 on the real
    // model), and really computed another way.
    const double scale = exact->abs().max().item<double>();
    EXPECT_LT(MaxAbsDiff(*one, *exact), 0.15 * scale) << "position " << i;
    EXPECT_GT(MaxAbsDiff(*one, *exact), 0.0) << "position " << i;
  }
  EXPECT_EQ(seq->k().scalar_type(),
            GetParam() ? torch::kHalf : torch::kFloat32);
}

INSTANTIATE_TEST_SUITE_P(KvCache, Int8FormTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "F16" : "F32";
                         });

TEST(Int8ActivationsTest, BadOptionsAreClearErrors) {
  ModelOptions options;
  options.weights = WeightFormat::kF32;
  options.activations = LinearActivations::kInt8;
  auto model = LoadTinyModel(TinyModelSpec{}, options);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(),
              HasSubstr("int8 activations need native weights"));
  auto parsed = ParseLinearActivations("bf16");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("use f32 or int8"));
  ModelOptions half_kv;
  half_kv.weights = WeightFormat::kF32;
  half_kv.kv_f16 = true;
  auto torch_half_kv = LoadTinyModel(TinyModelSpec{}, half_kv);
  ASSERT_FALSE(torch_half_kv.ok());
  EXPECT_EQ(torch_half_kv.status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(torch_half_kv.status().message(),
              HasSubstr("float16 KV cache needs native weights"));
  EXPECT_EQ(*ParseLinearActivations("int8"), LinearActivations::kInt8);
  EXPECT_EQ(LinearActivationsName(LinearActivations::kF32), "f32");
}

// (d) Bad input: every case returns a status naming the problem and leaves
// the cache untouched.
class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = LoadTinyModel(TinyModelSpec{});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    auto cache = model_->NewCache(16);
    ASSERT_TRUE(cache.ok());
    cache_ = *std::move(cache);
    const std::vector<int32_t> prompt = {1, 2, 3};
    ASSERT_TRUE(model_->Prefill(cache_.get(), prompt).ok());
  }
  absl::Status Run(std::vector<int32_t> tokens, std::vector<int32_t> parents) {
    TreeInput in;
    in.cache = cache_.get();
    in.tokens = std::move(tokens);
    in.parents = std::move(parents);
    absl::Status status = model_->Forward(absl::MakeConstSpan(&in, 1)).status();
    EXPECT_EQ(cache_->Length(), 3);
    EXPECT_EQ(cache_->Pending(), 0);
    return status;
  }
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KvCache> cache_;
};

TEST_F(BadInputTest, EmptyTokens) {
  absl::Status s = Run({}, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no tokens"));
  EXPECT_EQ(model_->Forward({}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model_->Prefill(cache_.get(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(BadInputTest, ParentOutOfRangeOrNotTopological) {
  absl::Status s = Run({1, 2, 3}, {-1, 0, 5});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("node 2 has parent 5"));
  s = Run({1, 2, 3}, {-1, 2, 0});  // parent after child
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("node 1 has parent 2"));
  s = Run({1, 2}, {-1, -2});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = Run({1, 2}, {-1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("2 tokens but 1 parents"));
  DraftTree draft{{4, 5}, {-1, 1}};
  s = model_->VerifyTree(cache_.get(), 1, draft).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("draft node 1 has parent 1"));
}

TEST_F(BadInputTest, TokenOutsideVocabulary) {
  absl::Status s = Run({1, 101}, {-1, 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("token id 101 at index 1"));
  EXPECT_THAT(s.message(), HasSubstr("[0, 101)"));
  s = Run({-1}, {-1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BadInputTest, CacheOverflow) {
  std::vector<int32_t> tokens(14, 7), parents;
  for (int i = 0; i < 14; ++i) parents.push_back(i - 1);
  absl::Status s = Run(tokens, parents);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(),
              HasSubstr("3 committed + 14 new tokens > capacity 16"));
  tokens.pop_back();
  parents.pop_back();
  TreeInput in{cache_.get(), tokens, parents};
  EXPECT_TRUE(model_->Forward(absl::MakeConstSpan(&in, 1)).ok());
}

TEST_F(BadInputTest, NullSharedOrForeignCache) {
  TreeInput in{nullptr, {1}, {-1}};
  EXPECT_THAT(model_->Forward(absl::MakeConstSpan(&in, 1)).status().message(),
              HasSubstr("null KV cache"));
  std::vector<TreeInput> twice = {{cache_.get(), {1}, {-1}},
                                  {cache_.get(), {2}, {-1}}};
  EXPECT_THAT(model_->Forward(twice).status().message(), HasSubstr("shared"));
  TinyModelSpec other;
  other.layers = 3;
  auto other_model = LoadTinyModel(other);
  ASSERT_TRUE(other_model.ok());
  auto foreign = (*other_model)->NewCache(8);
  ASSERT_TRUE(foreign.ok());
  in.cache = foreign->get();
  EXPECT_THAT(model_->Forward(absl::MakeConstSpan(&in, 1)).status().message(),
              HasSubstr("not made for this model"));
}

TEST(LoadTest, UnsupportedArchitectureIsClearError) {
  TinyModelSpec spec;
  spec.architecture = "gpt2";
  auto model = LoadTinyModel(spec);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(), HasSubstr("'gpt2'"));
}

// The native pass computes every GGUF type it keeps from the same
// dequantized values as the LibTorch path: logits agree up to the order of
// the sums.
TEST(WeightTypeTest, NativeMatchesF32OnEveryGgufType) {
  ASSERT_TRUE(ConfigureThreads({}).ok());
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                        GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1,
                        GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    SCOPED_TRACE(TypeName(type));
    TinyModelSpec spec;
    spec.dim = 256;
    spec.ffn = 512;
    spec.weight_type = type;
    auto native = LoadTinyModel(spec);
    ASSERT_TRUE(native.ok()) << native.status();
    ASSERT_TRUE((*native)->native());
    EXPECT_THAT((*native)->DescribeWeights(), HasSubstr(TypeName(type)));
    ModelOptions f32;
    f32.weights = WeightFormat::kF32;
    auto reference = LoadTinyModel(spec, f32);
    ASSERT_TRUE(reference.ok()) << reference.status();
    std::mt19937 rng(11);
    std::vector<int32_t> tokens(19);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % spec.vocab);
    std::vector<torch::Tensor> logits;
    for (LlamaModel* model : {native->get(), reference->get()}) {
      auto cache = model->NewCache();
      ASSERT_TRUE(cache.ok());
      TreeInput in = ChainInput(cache->get(), tokens);
      in.last_logits_only = false;
      auto out = model->Forward(absl::MakeConstSpan(&in, 1));
      ASSERT_TRUE(out.ok()) << out.status();
      logits.push_back((*out)[0]);
    }
    const double scale = logits[1].abs().max().item<double>();
    EXPECT_GT(scale, 0.1);
    EXPECT_LT(MaxAbsDiff(logits[0], logits[1]), 1e-4 * (1 + scale));
  }
}

TEST(LoadTest, MissingOrMisshapenTensor) {
  GgufWriter w;
  w.AddMetadata("general.architecture", GgufValue::String("llama"));
  for (const auto& [k, v] : std::vector<std::pair<std::string, uint32_t>>{
           {"llama.context_length", 64},
           {"llama.embedding_length", 8},
           {"llama.block_count", 1},
           {"llama.feed_forward_length", 16},
           {"llama.attention.head_count", 2}}) {
    w.AddMetadata(k, GgufValue::Uint32(v));
  }
  w.AddMetadata("llama.attention.layer_norm_rms_epsilon",
                GgufValue::Float32(1e-5f));
  std::vector<float> embd(8 * 10, 0.5f), norm(8, 1.0f), wrong(8 * 3, 0.1f);
  ASSERT_TRUE(w.AddTensor("token_embd.weight", {8, 10}, embd).ok());
  ASSERT_TRUE(w.AddTensor("output_norm.weight", {8}, norm).ok());
  ASSERT_TRUE(w.AddTensor("blk.0.attn_norm.weight", {8}, norm).ok());
  ASSERT_TRUE(w.AddTensor("blk.0.attn_q.weight", {8, 3}, wrong).ok());
  auto file = GgufFile::FromBuffer(w.WriteToString());
  ASSERT_TRUE(file.ok()) << file.status();
  auto model = LlamaModel::Load(**file, {});
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), HasSubstr("blk.0.attn_q.weight"));
  EXPECT_THAT(model.status().message(), HasSubstr("expected [8, 8]"));

  GgufWriter missing;
  missing.AddMetadata("general.architecture", GgufValue::String("llama"));
  auto f2 = GgufFile::FromBuffer(missing.WriteToString());
  ASSERT_TRUE(f2.ok());
  auto m2 = LlamaModel::Load(**f2, {});
  EXPECT_FALSE(m2.ok());
  EXPECT_THAT(m2.status().message(), HasSubstr("llama.embedding_length"));
}

}  // namespace
}  // namespace lookahead::engine
