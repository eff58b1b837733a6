// Tree attention, version 1: one thread per (token, query head), keys read
// straight from global memory, two passes (max, then softmax-weighted sum)
// in float32. Slow and simple: the first correct version, kept to time the
// production kernel (version 2, kernels/cuda/tree_attention.cu) against.
#include <math.h>

#include "kernels/cuda/dev/tree_attention_dev.h"
#include "kernels/cuda/dtype.cuh"

namespace lookahead::kernels::cuda::dev {
namespace {

template <typename T>
__global__ void TreeAttentionV1Kernel(TreeBatch batch, AttentionShape shape,
                                      int32_t layer, const T* q, float scale,
                                      T* out) {
  const int H = shape.heads, KV = shape.kv_heads, hd = shape.head_dim;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= batch.num_tokens * H) return;
  const int t = idx / H, h = idx % H, g = h / (H / KV);
  const int s = batch.token_seq[t];
  const int n = batch.seq_offsets[s + 1] - batch.seq_offsets[s];
  const int node = t - batch.seq_offsets[s];
  const int len = batch.cache_lens[s];
  const int64_t cap = batch.capacities[s];
  const uint64_t* mask = batch.masks + batch.mask_offsets[s] +
                         static_cast<int64_t>(node) * ((n + 63) / 64);
  const T* k = static_cast<const T*>(batch.k_caches[s]) +
               (static_cast<int64_t>(layer) * KV + g) * cap * hd;
  const T* v = static_cast<const T*>(batch.v_caches[s]) +
               (static_cast<int64_t>(layer) * KV + g) * cap * hd;
  const T* qv = q + static_cast<int64_t>(idx) * hd;
  auto visible = [&](int slot) {
    if (slot < len) return true;
    const int j = slot - len;
    return ((mask[j / 64] >> (j % 64)) & 1u) != 0;
  };
  auto score = [&](int slot) {
    float dot = 0.0f;
    for (int d = 0; d < hd; ++d) {
      dot += ToFloat(qv[d]) * ToFloat(k[static_cast<int64_t>(slot) * hd + d]);
    }
    return dot * scale;
  };
  float m = -INFINITY;
  for (int slot = 0; slot <= len + node; ++slot) {
    if (visible(slot)) m = fmaxf(m, score(slot));
  }
  float l = 0.0f;
  float acc[128];
  for (int d = 0; d < hd; ++d) acc[d] = 0.0f;
  for (int slot = 0; slot <= len + node; ++slot) {
    if (!visible(slot)) continue;
    const float p = expf(score(slot) - m);
    l += p;
    for (int d = 0; d < hd; ++d) {
      acc[d] += p * ToFloat(v[static_cast<int64_t>(slot) * hd + d]);
    }
  }
  T* o = out + static_cast<int64_t>(idx) * hd;
  for (int d = 0; d < hd; ++d) o[d] = FromFloat<T>(acc[d] / l);
}

}  // namespace

cudaError_t LaunchTreeAttentionV1(const TreeBatch& batch,
                                  const AttentionShape& shape, int32_t layer,
                                  DType dtype, const void* q, float scale,
                                  void* out, cudaStream_t stream) {
  if (shape.head_dim > 128) return cudaErrorInvalidValue;
  return DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int threads = 128;
    const int work = batch.num_tokens * shape.heads;
    TreeAttentionV1Kernel<T>
        <<<(work + threads - 1) / threads, threads, 0, stream>>>(
            batch, shape, layer, static_cast<const T*>(q), scale,
            static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace lookahead::kernels::cuda::dev
