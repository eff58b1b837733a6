// AttentionBackend: the attention of a forward pass (RoPE on q and k by row
// position, K/V append to each sequence's cache, masked attention against
// cache + rows), chosen once when the model loads: LibTorch on any device,
// or kernels/cuda on a GPU in the CUDA build. The forward pass calls the
// one it was given and never asks which.
//
// Thread-safety: a backend is immutable and may Prepare concurrent passes;
// a Pass belongs to one forward pass on one thread.
#ifndef LOOKAHEAD_ENGINE_MODEL_ATTENTION_H_
#define LOOKAHEAD_ENGINE_MODEL_ATTENTION_H_

#include <torch/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/gguf/model_config.h"
#include "engine/model/batch.h"

namespace lookahead::engine {

// One forward pass's attention, prepared once for all its layers.
class AttentionPass {
 public:
  virtual ~AttentionPass() = default;
  // qkv: (T, (H + 2 KV) * hd), the pass's rows packed sequence after
  // sequence. Rotates q and k by position, writes every row's K/V to its
  // cache's slots [length, length + n) at `layer`, and returns the attention
  // output (T, H * hd).
  virtual absl::StatusOr<torch::Tensor> Attend(int layer,
                                               const torch::Tensor& qkv) = 0;
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  // REQUIRES: every SequenceRows of `batch` passed the model's validation.
  // `batch` must outlive the returned pass. May throw c10::Error.
  virtual absl::StatusOr<std::unique_ptr<AttentionPass>> Prepare(
      absl::Span<const SequenceRows> batch) const = 0;
  // "libtorch" or "cuda-kernels", for logs and ModelInfo.
  virtual std::string name() const = 0;
};

// Where the back-end runs and how.
struct AttentionOptions {
  torch::Dtype dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  // On CUDA in the CUDA build: kernels/cuda where the shape allows.
  bool cuda_kernels = true;
};

// LibTorch attention on any device. rope_inv_freq: (rope_dim / 2) float64
// on options.device.
std::unique_ptr<AttentionBackend> NewTorchAttention(
    const ModelConfig& config, torch::Tensor rope_inv_freq,
    const AttentionOptions& options);

// The back-end for `options`: kernels/cuda in the CUDA build on a CUDA
// device with options.cuda_kernels and a supported shape, else LibTorch.
// Defined once per build (attention_select_cpu.cc, attention_cuda.cc).
std::unique_ptr<AttentionBackend> ChooseAttention(
    const ModelConfig& config, torch::Tensor rope_inv_freq,
    const AttentionOptions& options);

// x: (T, heads, head_dim); cos, sin: (T, R/2) with R = rope_dim. Rotates the
// first rope_dim dims of every head in `style`.
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin, int rope_dim,
                        RopeStyle style);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_ATTENTION_H_
