// ChooseAttention of the CUDA build: kernels/cuda (RoPE + K/V append and
// tree attention, one launch each per layer for the whole batch) where the
// device, dtype and shape allow, else LibTorch.
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "engine/model/attention.h"
#include "engine/model/cuda_ops.h"

namespace lookahead::engine {
namespace {

class CudaAttentionPass : public AttentionPass {
 public:
  CudaAttentionPass(const ModelConfig& config, torch::Tensor rope_inv_freq,
                    cuda_ops::DeviceTreeBatch batch)
      : c_(config),
        rope_inv_freq_(std::move(rope_inv_freq)),
        batch_(std::move(batch)) {}

  absl::StatusOr<torch::Tensor> Attend(int layer,
                                       const torch::Tensor& qkv) override {
    const float scale =
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(c_.head_dim)));
    ASSIGN_OR_RETURN(torch::Tensor q_rot,
                     cuda_ops::RopeAppend(batch_, layer, qkv, rope_inv_freq_,
                                          c_.rope_dim, c_.rope_style));
    return cuda_ops::TreeAttention(batch_, layer, q_rot, scale);
  }

 private:
  const ModelConfig& c_;
  const torch::Tensor rope_inv_freq_;
  const cuda_ops::DeviceTreeBatch batch_;
};

class CudaAttention : public AttentionBackend {
 public:
  CudaAttention(const ModelConfig& config, torch::Tensor rope_inv_freq)
      : config_(config), rope_inv_freq_(std::move(rope_inv_freq)) {}

  absl::StatusOr<std::unique_ptr<AttentionPass>> Prepare(
      absl::Span<const SequenceRows> batch) const override {
    // The batch's offsets, caches and masks on the device, for every layer.
    std::vector<cuda_ops::DeviceTreeBatch::Cache> caches;
    for (const SequenceRows& rows : batch) {
      caches.push_back({&rows.cache->k(), &rows.cache->v(),
                        rows.cache->Length(), &rows.mask,
                        absl::MakeConstSpan(rows.positions)});
    }
    ASSIGN_OR_RETURN(cuda_ops::DeviceTreeBatch device_batch,
                     cuda_ops::DeviceTreeBatch::Build(config_, caches));
    return std::unique_ptr<AttentionPass>(new CudaAttentionPass(
        config_, rope_inv_freq_, std::move(device_batch)));
  }
  std::string name() const override { return "cuda-kernels"; }

 private:
  const ModelConfig config_;
  const torch::Tensor rope_inv_freq_;  // (R/2) float64 on the device
};

}  // namespace

std::unique_ptr<AttentionBackend> ChooseAttention(
    const ModelConfig& config, torch::Tensor rope_inv_freq,
    const AttentionOptions& options) {
  if (options.device.is_cuda() && options.cuda_kernels &&
      cuda_ops::SupportsTreeAttention(config, options.dtype)) {
    return std::make_unique<CudaAttention>(config, std::move(rope_inv_freq));
  }
  return NewTorchAttention(config, std::move(rope_inv_freq), options);
}

}  // namespace lookahead::engine
