#include "engine/gguf/model_config.h"

#include <string>
#include <vector>

#include "engine/testing/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;

// A minimal llama header; `skip` omits a key, `extra` adds keys.
absl::StatusOr<ModelConfig> Parse(
    const std::string& arch, const std::string& skip = "",
    std::vector<std::pair<std::string, GgufValue>> extra = {},
    bool rope_freqs = false) {
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
  if (rope_freqs) {
    std::vector<float> f(4, 1.0f);
    EXPECT_TRUE(w.AddTensor("rope_freqs.weight", {4}, f).ok());
  }
  auto file = GgufFile::FromBuffer(w.WriteToString());
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
  auto freqs = Parse("llama", "", {}, /*rope_freqs=*/true);
  ASSERT_TRUE(freqs.ok());
  EXPECT_TRUE(freqs->has_rope_freq_factors);
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
