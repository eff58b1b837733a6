// ModelConfig: the hyper-parameters of a Llama-family decoder, read from GGUF
// metadata so that any Llama-architecture GGUF (and Qwen2) loads without code
// changes. A plain value; safe to copy and share.
#ifndef LOOKAHEAD_ENGINE_GGUF_MODEL_CONFIG_H_
#define LOOKAHEAD_ENGINE_GGUF_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"

namespace lookahead::engine {

// How RoPE pairs the dimensions of a head.
enum class RopeStyle {
  // (x[2i], x[2i+1]): ggml rope mode 0. llama.cpp's converter permutes the
  // rows of HF's q_proj/k_proj so that this equals HF's rotate_half on the
  // original weights; so this is right for GGUF "llama" files.
  kAdjacentPairs,
  // (x[i], x[i + d/2]): ggml NEOX mode = HF rotate_half on unpermuted
  // weights (GGUF "qwen2").
  kHalves,
};

// {arch}.rope.scaling.type. Llama 3.1's "llama3" scaling has no type here:
// llama.cpp's converter writes no rope.scaling keys for it, only tensor
// rope_freqs.weight (ModelConfig::has_rope_freq_factors).
enum class RopeScaling {
  kNone,
  kLinear,  // positions divided by rope_scaling_factor
};

struct ModelConfig {
  std::string architecture;     // general.architecture: "llama" or "qwen2"
  int vocab_size = 0;           // token_embd.weight dims[1]
  int embedding_length = 0;     // {arch}.embedding_length (model width D)
  int block_count = 0;          // {arch}.block_count (layers)
  int head_count = 0;           // {arch}.attention.head_count (query heads H)
  int head_count_kv = 0;        // {arch}.attention.head_count_kv (KV heads)
  int head_dim = 0;             // {arch}.attention.key_length, or D / H
  int feed_forward_length = 0;  // {arch}.feed_forward_length (F)
  int context_length = 0;       // {arch}.context_length
  float rms_norm_eps = 1e-5f;   // {arch}.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;  // {arch}.rope.freq_base
  int rope_dim = 0;  // {arch}.rope.dimension_count, default head_dim
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  RopeScaling rope_scaling = RopeScaling::kNone;  // {arch}.rope.scaling.type
  float rope_scaling_factor = 1.0f;               // {arch}.rope.scaling.factor
  // Tensor rope_freqs.weight is present: rope_dim / 2 per-frequency divisors
  // (llama3-style rope scaling as llama.cpp's converter stores it; see
  // RopeInvFreq); false if absent.
  bool has_rope_freq_factors = false;
  bool tied_output = false;  // no output.weight: logits use token_embd
  bool qkv_bias = false;     // blk.N.attn_{q,k,v}.bias present (Qwen2)

  // Returns the config of `file`: UNIMPLEMENTED naming the architecture or
  // the rope scaling type iff it is not llama/qwen2 or the scaling is
  // neither none nor linear (yarn, longrope, ...);
  // NOT_FOUND/INVALID_ARGUMENT naming the key iff a required key is missing
  // or mistyped; INVALID_ARGUMENT iff values are inconsistent (Validate).
  static absl::StatusOr<ModelConfig> FromGguf(const GgufFile& file);

  // Returns OK iff all sizes are positive and consistent (H divisible by the
  // KV heads, rope_dim even and <= head_dim, ...); else INVALID_ARGUMENT.
  absl::Status Validate() const;

  int q_dim() const { return head_count * head_dim; }
  int kv_dim() const { return head_count_kv * head_dim; }
};

// Returns the RoPE inverse frequencies (rope_dim / 2) of `config`, read from
// `file`, in float64 so that angles stay exact at large positions:
//   inv_freq[i] = rope_freq_base^(-2i / rope_dim)
//                 / rope_scaling_factor        (linear scaling only)
//                 / rope_freqs.weight[i]       (iff has_rope_freq_factors)
// The divisors are what llama.cpp's converter writes for HF rope_type
// "llama3" (1 for high frequencies, factor for low ones, a blend between),
// so this equals transformers' _compute_llama3_parameters up to float32
// rounding. INVALID_ARGUMENT naming rope_freqs.weight iff it has the wrong
// size or a divisor that is not finite and positive.
// REQUIRES: `config` comes from ModelConfig::FromGguf(file).
absl::StatusOr<std::vector<double>> RopeInvFreq(const GgufFile& file,
                                                const ModelConfig& config);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_GGUF_MODEL_CONFIG_H_
