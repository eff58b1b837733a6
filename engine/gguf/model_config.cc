#include "engine/gguf/model_config.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lookahead::engine {
namespace {

absl::StatusOr<int> GetPositiveInt(const GgufFile& file,
                                   const std::string& key) {
  ASSIGN_OR_RETURN(int64_t value, file.GetInt64(key));
  if (value < 1 || value > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata ", key, " = ", value, " is out of range"));
  }
  return static_cast<int>(value);
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromGguf(const GgufFile& file) {
  ModelConfig c;
  ASSIGN_OR_RETURN(c.architecture, file.GetString("general.architecture"));
  if (c.architecture == "llama") {
    c.rope_style = RopeStyle::kAdjacentPairs;
  } else if (c.architecture == "qwen2") {
    c.rope_style = RopeStyle::kHalves;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("unsupported model architecture '", c.architecture,
                     "' (supported: llama, qwen2)"));
  }
  const std::string a = c.architecture + ".";
  ASSIGN_OR_RETURN(c.embedding_length,
                   GetPositiveInt(file, a + "embedding_length"));
  ASSIGN_OR_RETURN(c.block_count, GetPositiveInt(file, a + "block_count"));
  ASSIGN_OR_RETURN(c.head_count,
                   GetPositiveInt(file, a + "attention.head_count"));
  if (file.FindValue(a + "attention.head_count_kv") != nullptr) {
    ASSIGN_OR_RETURN(c.head_count_kv,
                     GetPositiveInt(file, a + "attention.head_count_kv"));
  } else {
    c.head_count_kv = c.head_count;
  }
  if (file.FindValue(a + "attention.key_length") != nullptr) {
    ASSIGN_OR_RETURN(c.head_dim,
                     GetPositiveInt(file, a + "attention.key_length"));
  } else {
    if (c.embedding_length % c.head_count != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding_length ", c.embedding_length,
                       " is not divisible by head_count ", c.head_count));
    }
    c.head_dim = c.embedding_length / c.head_count;
  }
  ASSIGN_OR_RETURN(c.feed_forward_length,
                   GetPositiveInt(file, a + "feed_forward_length"));
  ASSIGN_OR_RETURN(c.context_length,
                   GetPositiveInt(file, a + "context_length"));
  ASSIGN_OR_RETURN(c.rms_norm_eps,
                   file.GetFloat(a + "attention.layer_norm_rms_epsilon"));
  ASSIGN_OR_RETURN(c.rope_freq_base,
                   file.GetFloatOr(a + "rope.freq_base", 10000.0f));
  if (file.FindValue(a + "rope.dimension_count") != nullptr) {
    ASSIGN_OR_RETURN(c.rope_dim,
                     GetPositiveInt(file, a + "rope.dimension_count"));
  } else {
    c.rope_dim = c.head_dim;
  }

  ASSIGN_OR_RETURN(std::string scaling,
                   file.GetStringOr(a + "rope.scaling.type", "none"));
  ASSIGN_OR_RETURN(float factor,
                   file.GetFloatOr(a + "rope.scaling.factor", 0.0f));
  ASSIGN_OR_RETURN(float scale_linear,  // older files
                   file.GetFloatOr(a + "rope.scale_linear", 0.0f));
  if (scaling == "linear" ||
      (scaling == "none" && scale_linear > 0.0f && scale_linear != 1.0f)) {
    c.rope_scaling = RopeScaling::kLinear;
    c.rope_scaling_factor = factor > 0.0f ? factor : scale_linear;
    if (!(c.rope_scaling_factor > 0.0f)) {
      return absl::InvalidArgumentError(
          "linear rope scaling without a positive rope.scaling.factor");
    }
  } else if (scaling != "none") {
    return absl::UnimplementedError(absl::StrCat(
        "unsupported rope scaling '", scaling, "' in ", a,
        "rope.scaling.type (supported: none, linear, and llama3 as tensor "
        "rope_freqs.weight)"));
  }
  c.has_rope_freq_factors = file.FindTensor("rope_freqs.weight") != nullptr;

  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return absl::NotFoundError("tensor token_embd.weight is missing");
  }
  if (embd->dims.size() != 2 || embd->dims[0] != c.embedding_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_embd.weight must have dims [", c.embedding_length,
                     ", vocab], got ", embd->dims.size(), " dims"));
  }
  c.vocab_size = static_cast<int>(embd->dims[1]);
  c.tied_output = file.FindTensor("output.weight") == nullptr;
  c.qkv_bias = file.FindTensor("blk.0.attn_q.bias") != nullptr;
  RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::StatusOr<std::vector<double>> RopeInvFreq(const GgufFile& file,
                                                const ModelConfig& c) {
  std::vector<double> inv_freq(c.rope_dim / 2);
  for (int i = 0; i < c.rope_dim / 2; ++i) {
    inv_freq[i] =
        std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / c.rope_dim);
    if (c.rope_scaling == RopeScaling::kLinear) {
      inv_freq[i] /= c.rope_scaling_factor;
    }
  }
  if (!c.has_rope_freq_factors) return inv_freq;
  ASSIGN_OR_RETURN(std::vector<float> factors,
                   file.DequantizeTensor("rope_freqs.weight"));
  if (factors.size() != inv_freq.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_freqs.weight has ", factors.size(),
                     " elements, expected rope_dim / 2 = ", inv_freq.size()));
  }
  for (size_t i = 0; i < factors.size(); ++i) {
    if (!(factors[i] > 0.0f) || !std::isfinite(factors[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope_freqs.weight[", i, "] = ", factors[i],
                       " is not a positive frequency divisor"));
    }
    inv_freq[i] /= factors[i];
  }
  return inv_freq;
}

absl::Status ModelConfig::Validate() const {
  if (vocab_size < 1 || embedding_length < 1 || block_count < 1 ||
      head_count < 1 || head_count_kv < 1 || head_dim < 1 ||
      feed_forward_length < 1 || context_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model sizes must be positive: vocab=", vocab_size,
        " embedding_length=", embedding_length, " block_count=", block_count,
        " head_count=", head_count, " head_count_kv=", head_count_kv,
        " head_dim=", head_dim, " feed_forward_length=", feed_forward_length,
        " context_length=", context_length));
  }
  if (head_count % head_count_kv != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_count ", head_count,
                     " is not a multiple of head_count_kv ", head_count_kv));
  }
  if (rope_dim < 2 || rope_dim % 2 != 0 || rope_dim > head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope dimension ", rope_dim,
                     " must be even and in [2, head_dim=", head_dim, "]"));
  }
  if (!(rms_norm_eps > 0.0f) || !std::isfinite(rms_norm_eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms epsilon must be positive, got ", rms_norm_eps));
  }
  if (!(rope_freq_base > 0.0f) || !std::isfinite(rope_freq_base)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope freq_base must be positive, got ", rope_freq_base));
  }
  return absl::OkStatus();
}

}  // namespace lookahead::engine
