// NativeForward: the CPU forward pass without LibTorch in the hot loop.
//
// Weights stay as the GGUF stores them (NativeLinear); each layer is RMSNorm,
// one QKV matmul, RoPE, K/V written straight into the sequences' caches,
// tree attention one query head at a time (kernels/cpu/decoder_ops: the
// mask is read as each row's list of visible rows, no mask tensor), one
// output matmul plus the residual, RMSNorm, one gate-and-up matmul, SwiGLU,
// the down matmul plus the residual. The matmuls and the attention heads
// are shared out over one PanelPool (the model's; no OpenMP, no BLAS);
// activations live in workspaces reused from pass to pass, so a step
// allocates nothing but the logits it returns.
//
// Every kernel is row-invariant and reads a query's keys in position order,
// so a token's logits and K/V are bit for bit the same whether it is
// decoded alone, verified inside a draft tree, or prefilled in a chunk of
// any size: drafts and the prefix cache cannot change a single bit.
//
// Thread-safety: immutable after Load; concurrent Forward calls are safe on
// distinct caches (each takes its own workspace; PanelPool serializes them).
#ifndef LOOKAHEAD_ENGINE_MODEL_NATIVE_FORWARD_H_
#define LOOKAHEAD_ENGINE_MODEL_NATIVE_FORWARD_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/model_config.h"
#include "engine/model/batch.h"
#include "engine/model/native_linear.h"
#include "kernels/cpu/panel_pool.h"
#include "kernels/cpu/quant_matmul.h"

namespace lookahead::engine {

class WeightArena;

struct NativeLayer {
  std::vector<float> attn_norm;  // (D)
  NativeLinear wqkv;             // q, k, v stacked: out H*hd + 2*KV*hd
  std::vector<float> bqkv;       // (H*hd + 2*KV*hd) or empty
  NativeLinear wo;               // out D
  std::vector<float> ffn_norm;   // (D)
  NativeLinear w_gate_up;        // gate, up stacked: out 2F
  NativeLinear w_down;           // out D
};

class NativeForward {
 public:
  // The weights of `file` for `config`, in their stored types. rope_inv_freq:
  // (rope_dim / 2) angles per position, scaling applied. Errors as
  // NativeLinear::Create, and INVALID_ARGUMENT for a norm of the wrong size.
  // `file_layers` (empty: 0, 1, ...): layer l of the pass reads the file's
  // blk.file_layers[l]; REQUIRES: empty or config.block_count entries.
  // `activations`: every matmul's (the LM head's included). `head_tokens`
  // in (0, vocab_size): the LM head scores only ids below it and the
  // others' logits are -infinity (ModelOptions::head_tokens); 0: all.
  static absl::StatusOr<std::unique_ptr<NativeForward>> Load(
      const GgufFile& file, const ModelConfig& config,
      std::vector<double> rope_inv_freq, absl::Span<const int> file_layers = {},
      LinearActivations activations = LinearActivations::kF32,
      int64_t head_tokens = 0);

  // The pass of LlamaModel::ForwardRows on CPU float32 caches: returns per
  // sequence float32 logits (n, vocab), or (1, vocab) if last_logits_only;
  // writes every row's K/V to its cache's slots [length, length + n).
  // REQUIRES: `batch` passed LlamaModel's validation; caches are contiguous
  // float32 CPU tensors. May throw c10::Error (allocating the logits).
  std::vector<torch::Tensor> Forward(absl::Span<const SequenceRows> batch,
                                     kernels::PanelPool* pool) const;

  // Bytes of weights held, and "Q4_1+Q8_0"-style type names for logs.
  int64_t weight_bytes() const;
  std::string Describe() const;
  // MiB of the weights the kernel backs with 2 MiB pages now (0 where
  // transparent huge pages are off or it cannot tell; see WeightArena).
  int64_t HugePageMiB() const;

 private:
  // One pass's activations, (rows, width) row-major, reused across passes:
  // vectors only grow, so a pass of a size seen before allocates nothing.
  struct Workspace {
    std::vector<float> x, h, qkv, attn, tmp, gate_up, act, cos, sin;
    // Per row: its sequence, and the keys it sees beyond the cache prefix.
    std::vector<int32_t> row_seq, row_prefix, extra_begin, extra;
    std::vector<int64_t> seq_first;  // first row of each sequence
    // Per sequence: its cache's K and V (layers, KV, capacity, hd) and
    // capacity, read once per pass instead of once per row and layer.
    std::vector<float*> seq_k, seq_v;            // float32 caches, or
    std::vector<uint16_t*> seq_k_half, seq_v_half;  // float16 ones (else null)
    std::vector<int64_t> seq_capacity;
    std::vector<int64_t> logit_rows;  // rows whose logits are returned
    // Split attention: per row its first key block (row_block[r] ..
    // row_block[r + 1]); per block and query head an AttentionPartial's
    // (out, max, sum); the (row, KV head, block) units of work.
    std::vector<int32_t> row_block;
    std::vector<float> part_out, part_max, part_sum;
    struct Unit {
      int32_t row, kv_head, block;
    };
    std::vector<Unit> units;
  };
  NativeForward(const ModelConfig& config, std::vector<double> rope_inv_freq)
      : config_(config),
        rope_inv_freq_(std::move(rope_inv_freq)),
        isa_(kernels::BestQuantIsa()) {}

  std::unique_ptr<Workspace> TakeWorkspace() const;
  void ReturnWorkspace(std::unique_ptr<Workspace> ws) const;
  // The attention block's middle: RoPE, K/V append, tree attention.
  void Attend(int layer, absl::Span<const SequenceRows> batch, Workspace* ws,
              kernels::PanelPool* pool) const;

  const ModelConfig config_;
  const std::vector<double> rope_inv_freq_;
  const kernels::QuantIsa isa_;
  NativeLinear token_embd_;  // out V rows of D: the embedding lookup
  std::vector<NativeLayer> layers_;
  std::vector<float> output_norm_;
  // out V (or head_tokens); if tied, a copy of token_embd_ (shared bytes),
  // or with int8 activations or head_tokens the same tensor (its first
  // rows) packed for them.
  NativeLinear output_;
  // The mapping the weights live in (null: they are on the heap), kept for
  // Describe; the weights hold it alive themselves.
  std::shared_ptr<WeightArena> arena_;

  mutable absl::Mutex mu_;
  mutable std::vector<std::unique_ptr<Workspace>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_NATIVE_FORWARD_H_
