#include "engine/gguf/model_config.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/testing/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;

// A minimal llama header; `skip` omits a key, `extra` adds keys,
// `rope_freqs` (if not empty) becomes tensor rope_freqs.weight.
absl::StatusOr<std::unique_ptr<GgufFile>> Open(
    const std::string& arch, const std::string& skip = "",
    std::vector<std::pair<std::string, GgufValue>> extra = {},
    const std::vector<float>& rope_freqs = {}) {
  GgufWriter w;
  w.AddMetadata("general.architecture", GgufValue::String(arch));
  const std::vector<std::pair<std::string, GgufValue>> keys = {
      {arch + ".context_length", GgufValue::Uint32(4096)},
      {arch + ".embedding_length", GgufValue::Uint32(64)},
      {arch + ".block_count", GgufValue::Uint32(2)},
      {arch + ".feed_forward_length", GgufValue::Uint32(128)},
      {arch + ".attention.head_count", GgufValue::Uint32(8)},
      {arch + ".attention.layer_norm_rms_epsilon", GgufValue::Float32(1e-6f)},
  };
  for (const auto& [k, v] : keys) {
    if (k != arch + "." + skip) w.AddMetadata(k, v);
  }
  for (auto& [k, v] : extra) w.AddMetadata(k, v);
  std::vector<float> embd(64 * 10, 0.0f);
  EXPECT_TRUE(w.AddTensor("token_embd.weight", {64, 10}, embd).ok());
  if (!rope_freqs.empty()) {
    EXPECT_TRUE(w.AddTensor("rope_freqs.weight",
                            {static_cast<int64_t>(rope_freqs.size())},
                            rope_freqs)
                    .ok());
  }
  return GgufFile::FromBuffer(w.WriteToString());
}

absl::StatusOr<ModelConfig> Parse(
    const std::string& arch, const std::string& skip = "",
    std::vector<std::pair<std::string, GgufValue>> extra = {},
    const std::vector<float>& rope_freqs = {}) {
  auto file = Open(arch, skip, std::move(extra), rope_freqs);
  if (!file.ok()) return file.status();
  return ModelConfig::FromGguf(**file);
}

TEST(ModelConfigTest, DefaultsFromMinimalHeader) {
  auto c = Parse("llama");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 10);
  EXPECT_EQ(c->head_count_kv, 8);  // absent: multi-head attention
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->rope_dim, 8);
  EXPECT_FLOAT_EQ(c->rope_freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_EQ(c->rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_EQ(c->rope_scaling, RopeScaling::kNone);
  EXPECT_TRUE(c->tied_output);
  EXPECT_FALSE(c->has_rope_freq_factors);
  auto q = Parse("qwen2");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->rope_style, RopeStyle::kHalves);
}

TEST(ModelConfigTest, RopeScaling) {
  auto linear =
      Parse("llama", "",
            {{"llama.rope.scaling.type", GgufValue::String("linear")},
             {"llama.rope.scaling.factor", GgufValue::Float32(4.0f)}});
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ(linear->rope_scaling, RopeScaling::kLinear);
  EXPECT_FLOAT_EQ(linear->rope_scaling_factor, 4.0f);
  auto yarn = Parse("llama", "",
                    {{"llama.rope.scaling.type", GgufValue::String("yarn")}});
  EXPECT_EQ(yarn.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(yarn.status().message(), HasSubstr("'yarn'"));
  EXPECT_THAT(yarn.status().message(), HasSubstr("llama.rope.scaling.type"));
  auto longrope =
      Parse("llama", "",
            {{"llama.rope.scaling.type", GgufValue::String("longrope")}});
  EXPECT_EQ(longrope.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(longrope.status().message(), HasSubstr("'longrope'"));
  auto freqs = Parse("llama", "", {}, /*rope_freqs=*/{1, 1, 1, 1});
  ASSERT_TRUE(freqs.ok());
  EXPECT_TRUE(freqs->has_rope_freq_factors);
}

// RopeInvFreq of Open("llama", "", extra, rope_freqs), or the error.
absl::StatusOr<std::vector<double>> InvFreq(
    std::vector<std::pair<std::string, GgufValue>> extra = {},
    const std::vector<float>& rope_freqs = {}) {
  auto file = Open("llama", "", std::move(extra), rope_freqs);
  if (!file.ok()) return file.status();
  auto config = ModelConfig::FromGguf(**file);
  if (!config.ok()) return config.status();
  return RopeInvFreq(**file, *config);
}

TEST(RopeInvFreqTest, PlainAndLinear) {
  auto plain = InvFreq();  // rope_dim 8, base 10000
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ(plain->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ((*plain)[i], std::pow(10000.0, -2.0 * i / 8)) << i;
  }
  auto linear =
      InvFreq({{"llama.rope.scaling.type", GgufValue::String("linear")},
               {"llama.rope.scaling.factor", GgufValue::Float32(4.0f)}});
  ASSERT_TRUE(linear.ok()) << linear.status();
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ((*linear)[i], std::pow(10000.0, -2.0 * i / 8) / 4) << i;
  }
}

// Llama 3.1 scaling: the divisors llama.cpp's converter writes for HF
// rope_type "llama3" must give transformers' frequencies
// (_compute_llama3_parameters, restated here in float64).
TEST(RopeInvFreqTest, Llama3DivisorsGiveTransformersFrequencies) {
  const double base = 500000, factor = 8, low_freq_factor = 1,
               high_freq_factor = 4, old_context = 256;
  const int dim = 8;  // wavelengths 6.3, 167, 4443, 118000
  const double low_freq_wavelen = old_context / low_freq_factor;
  const double high_freq_wavelen = old_context / high_freq_factor;
  std::vector<float> divisors;  // convert_hf_to_gguf.py's rope_factors
  std::vector<double> want;     // transformers' inv_freq_llama
  for (int i = 0; i < dim / 2; ++i) {
    const double inv = std::pow(base, -2.0 * i / dim);
    const double wavelen = 2 * M_PI / inv;
    const double smooth = (old_context / wavelen - low_freq_factor) /
                          (high_freq_factor - low_freq_factor);
    if (wavelen < high_freq_wavelen) {
      divisors.push_back(1);
      want.push_back(inv);
    } else if (wavelen > low_freq_wavelen) {
      divisors.push_back(factor);
      want.push_back(inv / factor);
    } else {
      divisors.push_back(1 / ((1 - smooth) / factor + smooth));
      want.push_back((1 - smooth) * inv / factor + smooth * inv);
    }
  }
  ASSERT_EQ(divisors[0], 1.0f);  // every branch is taken
  ASSERT_GT(divisors[1], 1.0f);
  ASSERT_LT(divisors[1], factor);
  ASSERT_EQ(divisors[2], factor);
  auto inv_freq =
      InvFreq({{"llama.rope.freq_base", GgufValue::Float32(base)}}, divisors);
  ASSERT_TRUE(inv_freq.ok()) << inv_freq.status();
  ASSERT_EQ(inv_freq->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR((*inv_freq)[i], want[i], 1e-7 * want[i]) << i;  // float32
  }
}

TEST(RopeInvFreqTest, BadDivisors) {
  auto size = InvFreq({}, {1, 1, 1});
  EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(size.status().message(),
              HasSubstr("rope_freqs.weight has 3 elements, expected"));
  for (float bad : {0.0f, -2.0f, std::nanf(""), INFINITY}) {
    auto f = InvFreq({}, {1, bad, 1, 1});
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(f.status().message(), HasSubstr("rope_freqs.weight[1]"));
  }
}

TEST(ModelConfigTest, BadHeaders) {
  auto arch = Parse("mamba");
  EXPECT_EQ(arch.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(arch.status().message(), HasSubstr("'mamba'"));
  auto missing = Parse("llama", "attention.layer_norm_rms_epsilon");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("llama.attention.layer_norm_rms_epsilon"));
  auto gqa = Parse("llama", "",
                   {{"llama.attention.head_count_kv", GgufValue::Uint32(3)}});
  EXPECT_EQ(gqa.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gqa.status().message(), HasSubstr("multiple of head_count_kv 3"));
  auto rope = Parse("llama", "",
                    {{"llama.rope.dimension_count", GgufValue::Uint32(12)}});
  EXPECT_THAT(rope.status().message(), HasSubstr("rope dimension 12"));
  auto typed =
      Parse("llama", "", {{"llama.rope.freq_base", GgufValue::String("x")}});
  EXPECT_EQ(typed.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lookahead::engine
