// Thin bindings from LibTorch tensors to the CUDA kernels in kernels/cuda:
// each checks devices, dtypes, shapes and contiguity, launches on the
// current CUDA stream and turns a cudaError_t into an absl::Status.
// Compiled only in the CUDA build (bazel --config=cuda), which defines
// LOOKAHEAD_CUDA. Thread-compatible: callers serialize use of one cache.
#ifndef LOOKAHEAD_ENGINE_MODEL_CUDA_OPS_H_
#define LOOKAHEAD_ENGINE_MODEL_CUDA_OPS_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/gguf/model_config.h"
#include "engine/model/sampler.h"
#include "engine/model/tree_mask.h"
#include "kernels/cuda/tree_batch.h"

namespace lookahead::engine {
namespace cuda_ops {

// Returns true iff the tree-attention kernel supports `config` (head_dim a
// multiple of 32 in [32, 128], a GQA group of at most 16) in `dtype`.
bool SupportsTreeAttention(const ModelConfig& config, torch::Dtype dtype);

// The ragged batch of one forward pass, uploaded once and used by every
// layer: offsets, cache pointers, packed masks, query tiles and positions
// (cache length + node depth). Immutable after Build.
class DeviceTreeBatch {
 public:
  // One sequence of the pass: its KV cache k, v (layers, KV, capacity, hd)
  // on CUDA and committed length, and its rows' (n, n) mask and positions.
  // Not owned.
  struct Cache {
    const torch::Tensor* k = nullptr;
    const torch::Tensor* v = nullptr;
    int32_t length = 0;
    const PackedTreeMask* mask = nullptr;
    absl::Span<const int32_t> positions;
  };

  // caches[s] holds sequence s (config's shape and a kernel dtype).
  // INVALID_ARGUMENT for empty input, a mask that is not (n, n) for n
  // positions, or a cache that is not on CUDA.
  static absl::StatusOr<DeviceTreeBatch> Build(const ModelConfig& config,
                                               absl::Span<const Cache> caches);

  const kernels::cuda::TreeBatch& batch() const { return batch_; }
  const kernels::cuda::TreeTiles& tiles() const { return tiles_; }
  const kernels::cuda::AttentionShape& shape() const { return shape_; }
  kernels::cuda::DType dtype() const { return dtype_; }
  const torch::Device& device() const { return device_; }
  // positions: (T) int32 on the device.
  const int32_t* positions() const { return positions_; }

 private:
  kernels::cuda::TreeBatch batch_;
  kernels::cuda::TreeTiles tiles_;
  kernels::cuda::AttentionShape shape_;
  kernels::cuda::DType dtype_ = kernels::cuda::DType::kFloat32;
  const int32_t* positions_ = nullptr;
  torch::Device device_ = torch::kCPU;
  torch::Tensor storage_;  // owns every device array above
};

// Rotates q and k of `qkv` (T, (H + 2 KV) * hd) by position and appends k
// and v to the caches at `layer`; returns the rotated queries (T, H, hd).
// inv_freq: (rope_dim / 2) float64 on the device.
absl::StatusOr<torch::Tensor> RopeAppend(const DeviceTreeBatch& batch,
                                         int layer, const torch::Tensor& qkv,
                                         const torch::Tensor& inv_freq,
                                         int rope_dim, RopeStyle style);

// Tree attention of the rotated queries q (T, H, hd) at `layer`; returns
// (T, H * hd).
absl::StatusOr<torch::Tensor> TreeAttention(const DeviceTreeBatch& batch,
                                            int layer, const torch::Tensor& q,
                                            float scale);

// Moves the rows of `path` (node indices from slot `length`) to slots
// length, length + 1, ... in every layer of k and v (CUDA tensors of
// (layers, KV, capacity, hd)). `path` is validated by the caller.
absl::Status CompactKv(torch::Tensor& k, torch::Tensor& v, int length,
                       absl::Span<const int32_t> path);

// Returns true iff AcceptOnDevice handles `params` (greedy, or temperature
// sampling without top-k and top-p).
bool SupportsDeviceAcceptance(const SamplingParams& params);

// AcceptLongestPath (engine/model/acceptance.h) with the token choice and the
// walk on the device; `logits` (n, vocab) contiguous float32 on CUDA. Only
// the accepted path and tokens come back to the host.
// REQUIRES: SupportsDeviceAcceptance(params); a valid tree.
absl::Status AcceptOnDevice(absl::Span<const int32_t> tokens,
                            absl::Span<const int32_t> parents,
                            const torch::Tensor& logits,
                            const SamplingParams& params, int64_t root_position,
                            std::vector<int32_t>* path,
                            std::vector<int32_t>* emitted);

}  // namespace cuda_ops
}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_CUDA_OPS_H_
