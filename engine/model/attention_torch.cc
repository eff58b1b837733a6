// The LibTorch attention back-end: per sequence one masked attention over
// its cache and rows, for any device and dtype.
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "engine/model/attention.h"

namespace lookahead::engine {
namespace {

class TorchAttentionPass : public AttentionPass {
 public:
  TorchAttentionPass(const ModelConfig& config,
                     absl::Span<const SequenceRows> batch,
                     const torch::Tensor& rope_inv_freq,
                     const AttentionOptions& options)
      : c_(config), batch_(batch), dtype_(options.dtype) {
    std::vector<int64_t> positions;
    offsets_.push_back(0);
    masks_.resize(batch.size());
    for (size_t s = 0; s < batch.size(); ++s) {
      const SequenceRows& rows = batch[s];
      const int64_t n = rows.size();
      const int64_t len = rows.cache->Length();
      offsets_.push_back(offsets_.back() + n);
      positions.insert(positions.end(), rows.positions.begin(),
                       rows.positions.end());
      if (n == 1) continue;  // One row sees the cache and itself: no mask.
      // mask: (n, len + n); 0 = may attend, -inf = may not.
      std::vector<uint8_t> dense = rows.mask.Unpack();
      torch::Tensor allowed =
          torch::from_blob(dense.data(), {n, n}, torch::kUInt8)
              .to(torch::kBool);
      torch::Tensor row_part =
          torch::zeros({n, n}, torch::kFloat)
              .masked_fill(allowed.logical_not(),
                           -std::numeric_limits<float>::infinity());
      masks_[s] =
          torch::cat({torch::zeros({n, len}, torch::kFloat), row_part}, 1)
              .to(options.device, dtype_);
    }
    // angles: (T, R/2), float64 so that large positions stay exact.
    torch::Tensor angles = torch::tensor(positions, torch::kDouble)
                               .to(options.device)
                               .unsqueeze(1) *
                           rope_inv_freq.unsqueeze(0);
    cos_ = angles.cos().to(dtype_);
    sin_ = angles.sin().to(dtype_);
  }

  absl::StatusOr<torch::Tensor> Attend(int layer,
                                       const torch::Tensor& qkv) override {
    const int64_t total = offsets_.back();
    const int64_t heads = c_.head_count, kv_heads = c_.head_count_kv,
                  head_dim = c_.head_dim, group = heads / kv_heads,
                  qd = c_.q_dim(), kvd = c_.kv_dim();
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    // q: (T, H, hd); k, v: (T, KV, hd)
    torch::Tensor q =
        ApplyRope(qkv.narrow(1, 0, qd).view({total, heads, head_dim}), cos_,
                  sin_, c_.rope_dim, c_.rope_style);
    torch::Tensor k =
        ApplyRope(qkv.narrow(1, qd, kvd).view({total, kv_heads, head_dim}),
                  cos_, sin_, c_.rope_dim, c_.rope_style);
    torch::Tensor v =
        qkv.narrow(1, qd + kvd, kvd).view({total, kv_heads, head_dim});
    torch::Tensor attn = torch::empty({total, qd}, qkv.options());
    for (size_t s = 0; s < batch_.size(); ++s) {
      KvCache* cache = batch_[s].cache;
      const int64_t off = offsets_[s], n = offsets_[s + 1] - offsets_[s];
      const int64_t len = cache->Length(), span = len + n;
      torch::Tensor k_layer = cache->k_layer(layer);  // (KV, cap, hd)
      torch::Tensor v_layer = cache->v_layer(layer);  // (KV, cap, hd)
      k_layer.narrow(1, len, n).copy_(k.narrow(0, off, n).transpose(0, 1));
      v_layer.narrow(1, len, n).copy_(v.narrow(0, off, n).transpose(0, 1));
      torch::Tensor keys = k_layer.narrow(1, 0, span);    // (KV, L, hd)
      torch::Tensor values = v_layer.narrow(1, 0, span);  // (KV, L, hd)
      // qh: (KV, G*n, hd); query head h uses KV head h / G.
      torch::Tensor qh = q.narrow(0, off, n)
                             .view({n, kv_heads, group, head_dim})
                             .permute({1, 2, 0, 3})
                             .reshape({kv_heads, group * n, head_dim});
      torch::Tensor scores =
          torch::matmul(qh, keys.transpose(1, 2)).mul_(scale);  // (KV, G*n, L)
      if (masks_[s].defined()) {
        scores = scores.view({kv_heads, group, n, span}).add_(masks_[s]);
      }
      torch::Tensor probs = torch::softmax(scores, -1, torch::kFloat)
                                .to(dtype_)
                                .view({kv_heads, group * n, span});
      torch::Tensor out = torch::matmul(probs, values);  // (KV, G*n, hd)
      attn.narrow(0, off, n).copy_(out.view({kv_heads, group, n, head_dim})
                                       .permute({2, 0, 1, 3})
                                       .reshape({n, qd}));
    }
    return attn;
  }

 private:
  const ModelConfig& c_;
  const absl::Span<const SequenceRows> batch_;
  const torch::Dtype dtype_;
  std::vector<int64_t> offsets_;      // (S + 1) row offsets per sequence
  std::vector<torch::Tensor> masks_;  // per sequence (n, len + n) or none
  torch::Tensor cos_, sin_;           // (T, R/2)
};

class TorchAttention : public AttentionBackend {
 public:
  TorchAttention(const ModelConfig& config, torch::Tensor rope_inv_freq,
                 const AttentionOptions& options)
      : config_(config),
        rope_inv_freq_(std::move(rope_inv_freq)),
        options_(options) {}

  absl::StatusOr<std::unique_ptr<AttentionPass>> Prepare(
      absl::Span<const SequenceRows> batch) const override {
    return std::make_unique<TorchAttentionPass>(config_, batch, rope_inv_freq_,
                                                options_);
  }
  std::string name() const override { return "libtorch"; }

 private:
  const ModelConfig config_;
  const torch::Tensor rope_inv_freq_;  // (R/2) float64
  const AttentionOptions options_;
};

}  // namespace

torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin, int rope_dim,
                        RopeStyle style) {
  const int64_t t = x.size(0), heads = x.size(1), head_dim = x.size(2);
  const int64_t half = rope_dim / 2;
  torch::Tensor c = cos.unsqueeze(1);  // (T, 1, R/2)
  torch::Tensor s = sin.unsqueeze(1);  // (T, 1, R/2)
  torch::Tensor rotated;               // (T, heads, R)
  torch::Tensor xr = x.narrow(2, 0, rope_dim);
  if (style == RopeStyle::kAdjacentPairs) {
    torch::Tensor pairs = xr.reshape({t, heads, half, 2});
    torch::Tensor x0 = pairs.select(3, 0), x1 = pairs.select(3, 1);
    rotated = torch::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1)
                  .reshape({t, heads, rope_dim});
  } else {
    torch::Tensor x1 = xr.narrow(2, 0, half), x2 = xr.narrow(2, half, half);
    rotated = torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
  }
  if (rope_dim == head_dim) return rotated;
  return torch::cat({rotated, x.narrow(2, rope_dim, head_dim - rope_dim)}, -1);
}

std::unique_ptr<AttentionBackend> NewTorchAttention(
    const ModelConfig& config, torch::Tensor rope_inv_freq,
    const AttentionOptions& options) {
  return std::make_unique<TorchAttention>(config, std::move(rope_inv_freq),
                                          options);
}

}  // namespace lookahead::engine
