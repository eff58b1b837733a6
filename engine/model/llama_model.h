// LlamaModel: a Llama-family decoder (RMSNorm, RoPE, grouped-query attention,
// SwiGLU) loaded from a GGUF file, whose forward pass evaluates rows of
// tokens (token trees, prefill chunks, lookahead rows) for a batch of
// sequences at once.
//
// Thread-safety: the weights are immutable after Load, so concurrent Forward
// calls are safe as long as no KvCache is used by two calls at once. Each
// call mutates only the caches named in its inputs.
#ifndef LOOKAHEAD_ENGINE_MODEL_LLAMA_MODEL_H_
#define LOOKAHEAD_ENGINE_MODEL_LLAMA_MODEL_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/model_config.h"
#include "engine/model/acceptance.h"
#include "engine/model/attention.h"
#include "engine/model/batch.h"
#include "engine/model/draft_tree.h"
#include "engine/model/kv_cache.h"
#include "engine/model/linear_weight.h"
#include "engine/model/native_forward.h"
#include "engine/model/sampler.h"

namespace lookahead::engine {

// How the weights are held and computed.
enum class WeightFormat {
  // On CPU in float32 (else as kF32): every matmul weight stays in its GGUF
  // type and the pass is NativeForward (kernels/cpu, no LibTorch in the hot
  // loop; ~6x less memory than fp32 for Q4_1). The default.
  kNative,
  // Dequantized to ModelOptions::dtype on ModelOptions::device and run
  // through LibTorch: the reference, and the only form on CUDA.
  kF32,
};

// "native" or "f32"; parsed back by ParseWeightFormat (INVALID_ARGUMENT
// naming the choices otherwise).
std::string WeightFormatName(WeightFormat format);
absl::StatusOr<WeightFormat> ParseWeightFormat(absl::string_view name);

struct ModelOptions {
  WeightFormat weights = WeightFormat::kNative;
  // Weight, activation and KV-cache dtype. float32 (default) on CPU;
  // bfloat16/float16 halve memory and suit CUDA. Logits are always float32.
  torch::Dtype dtype = torch::kFloat32;
  // Where weights, caches and activations live. Default CPU.
  torch::Device device = torch::kCPU;
  // Slots of a cache made by NewCache(0). 0 (default) means
  // min(context_length, 2048); bigger costs memory per sequence.
  int max_cache_tokens = 0;
  // Prefill splits prompts into chains of at most this many tokens (bounds
  // the activation memory of one pass). Default 256.
  int prefill_chunk_tokens = 256;
  // Matmuls through kernels/cpu/packed_matmul when on CPU in float32 with
  // AVX2 or AVX-512 (see LinearWeight): 2x cheaper 16-token passes than
  // OpenBLAS here, and a token's logits do not depend on the rest of the
  // batch. false: dense weights and torch::mm (a reference to compare with).
  bool packed_linear = true;
  // Threads (the caller included) that share out packed matmuls. 0
  // (default): one per core this process may run on (AvailableCores()).
  // Set the CPU limit in a container, where every node core is visible.
  int matmul_threads = 0;
  // Pin those threads' workers to distinct cores (PanelPool). Default true.
  bool pin_threads = true;
  // On CUDA, in the CUDA build: RoPE, K/V append and tree attention through
  // kernels/cuda (one launch each per layer for the whole batch) where the
  // shape allows (SupportsTreeAttention). false: LibTorch attention, the
  // reference to compare with. Ignored on CPU.
  bool cuda_kernels = true;
  // Layers of the file to run, by their GGUF index (blk.N), strictly
  // increasing; empty (default) runs all. A subset is a cheaper, lossy form
  // of the same model (early exit / layer skipping), used by draftsvc's
  // self-drafting assistant; config().block_count becomes its size. Load
  // fails with INVALID_ARGUMENT for an index outside [0, block_count) or out
  // of order. Never set it for the verifier.
  std::vector<int> keep_layers;
  // With kNative weights: the matmuls' activations (see LinearActivations).
  // kF32 (default) matches HF transformers; kInt8 is ~2x cheaper per
  // matmul with AVX-512 VNNI and lossy, a slightly different model. Plain
  // decoding and drafted decoding in one form give identical tokens.
  LinearActivations activations = LinearActivations::kF32;
  // With kNative weights on the CPU in float32: keep the KV cache in IEEE
  // float16 (llama.cpp's default), half the memory of float32 and half the
  // bytes attention reads. K and V are rounded to float16 as they are
  // written, the same for a token alone or in a tree, so drafting stays
  // lossless against plain decoding with the same setting; a slightly
  // different model than the float32 cache (false, the default and the
  // exact form's).
  bool kv_f16 = false;
  // With kNative weights on the CPU in float32: if in (0, vocab_size), the
  // LM head scores only the ids below it and every other logit is
  // -infinity. A lossy, draft-only form for an assistant (draftsvc's
  // --assistant_head_tokens): BPE vocabularies put frequent tokens at low
  // ids, and a head of 151936 rows is over a third of a small model's
  // bytes. 0 (default): every id. Never set it for the verifier.
  int64_t head_tokens = 0;
};

// Float weights of one layer. Matmul weights are input-major, (in, out)
// contiguous, so a layer computes y = x @ w (OpenBLAS is fastest that way).
struct LayerWeights {
  torch::Tensor attn_norm;  // (D)
  LinearWeight wqkv;        // (D, H*hd + 2*KV*hd): q, k, v columns stacked
  torch::Tensor bqkv;       // (H*hd + 2*KV*hd) or undefined (no bias)
  LinearWeight wo;          // (H*hd, D)
  torch::Tensor ffn_norm;   // (D)
  LinearWeight w_gate_up;   // (D, 2*F): gate columns then up columns
  LinearWeight w_down;      // (F, D)
};

struct LlamaWeights {
  torch::Tensor token_embd;  // (V, D)
  std::vector<LayerWeights> layers;
  torch::Tensor output_norm;    // (D)
  LinearWeight output;          // (D, V): token_embd transposed if tied
  torch::Tensor rope_inv_freq;  // (rope_dim/2) float64, scaling applied
};

class LlamaModel {
 public:
  // Reads the config and dequantizes every weight of `file` to
  // options.dtype on options.device (one contiguous tensor per weight).
  // UNIMPLEMENTED for architectures other than llama/qwen2; NOT_FOUND naming
  // a missing tensor; INVALID_ARGUMENT naming a tensor of the wrong shape.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(
      const GgufFile& file, const ModelOptions& options);

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  // The KV cache's element type: float16 with options().kv_f16, else
  // options().dtype. NewCache makes caches of it; a PrefixCache for this
  // model stores it.
  torch::Dtype KvDtype() const {
    return options_.kv_f16 ? torch::kHalf : options_.dtype;
  }
  // The LibTorch weights: empty when native() (load with
  // WeightFormat::kF32 for references that read them).
  const LlamaWeights& weights() const { return weights_; }
  // True iff the pass is NativeForward (WeightFormat::kNative on CPU in
  // float32).
  bool native() const { return native_ != nullptr; }
  // How the weights are held, for logs and ModelInfo: "native Q4_1
  // (embedding Q8_0), 98 MiB, kernels AVX-512" or "f32 float32 on cpu".
  std::string DescribeWeights() const;

  // A fresh empty cache for one sequence; capacity 0 means the default
  // (ModelOptions::max_cache_tokens).
  absl::StatusOr<std::unique_ptr<KvCache>> NewCache(int capacity = 0) const;
  // Replaces *cache (null: none yet) with a cache of `capacity` slots that
  // holds its committed tokens (a copy; any provisional tree is dropped):
  // how a sequence's cache grows. INVALID_ARGUMENT if capacity is below
  // the committed length; on error *cache is unchanged.
  absl::Status GrowCache(std::unique_ptr<KvCache>* cache, int capacity) const;

  // Evaluates every sequence's rows in ONE pass (linear layers over all
  // packed rows, attention per sequence against its cache and mask).
  // Returns per sequence the float32 logits (n, vocab), or (1, vocab) if
  // last_logits_only, on options.device; each cache then holds the kept
  // rows' tree provisionally (commit with CommitPath); scratch rows' K/V
  // are gone. INVALID_ARGUMENT (naming the input and row) if ValidateRows
  // fails, for a token id outside [0, vocab) or a null/foreign/shared cache;
  // RESOURCE_EXHAUSTED if the rows do not fit their cache. On error no cache
  // is changed. On CUDA, returns once the logits are computed (the device is
  // synchronized).
  absl::StatusOr<std::vector<torch::Tensor>> ForwardRows(
      absl::Span<const SequenceRows> batch) const;

  // ForwardRows of every input's tree (RowsFromTree): the verify and
  // prefill form. The same errors, and INVALID_ARGUMENT for a malformed tree.
  absl::StatusOr<std::vector<torch::Tensor>> Forward(
      absl::Span<const TreeInput> batch) const;

  // Appends `tokens` to `cache` as committed context in chains of at most
  // prefill_chunk_tokens; returns the float32 logits (vocab) of the last one.
  absl::StatusOr<torch::Tensor> Prefill(KvCache* cache,
                                        absl::Span<const int32_t> tokens) const;

  // Forward of MakeVerifyInput(cache, root_token, draft) for one sequence.
  // Returns logits (1 + draft size, vocab); the tree stays provisional.
  absl::StatusOr<torch::Tensor> VerifyTree(KvCache* cache, int32_t root_token,
                                           const DraftTree& draft) const;

  // VerifyTree + AcceptLongestPath + CommitPath: returns the emitted tokens
  // (accepted draft tokens + bonus); the cache grows by tokens.size() (the
  // root and the accepted draft tokens; the bonus becomes the next root).
  // An empty draft is one step of plain decoding.
  absl::StatusOr<std::vector<int32_t>> VerifyAndAccept(
      KvCache* cache, int32_t root_token, const DraftTree& draft,
      const SamplingParams& params) const;

 private:
  LlamaModel(ModelConfig config, ModelOptions options, LlamaWeights weights,
             std::unique_ptr<NativeForward> native,
             std::unique_ptr<kernels::PanelPool> pool,
             std::unique_ptr<AttentionBackend> attention)
      : config_(std::move(config)),
        options_(options),
        weights_(std::move(weights)),
        native_(std::move(native)),
        pool_(std::move(pool)),
        attention_(std::move(attention)) {}

  absl::Status ValidateBatch(absl::Span<const SequenceRows> batch) const;
  // REQUIRES: ValidateBatch(batch).ok(). May throw c10::Error.
  absl::StatusOr<std::vector<torch::Tensor>> ForwardUnchecked(
      absl::Span<const SequenceRows> batch) const;

  const ModelConfig config_;
  const ModelOptions options_;
  const LlamaWeights weights_;
  // Set iff the native pass runs (then weights_ holds only rope_inv_freq).
  const std::unique_ptr<NativeForward> native_;
  const std::unique_ptr<kernels::PanelPool> pool_;  // Thread-safe.
  // Chosen once at Load: LibTorch or kernels/cuda. Thread-safe.
  const std::unique_ptr<AttentionBackend> attention_;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_LLAMA_MODEL_H_
