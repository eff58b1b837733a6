// Tree attention kernels; see tree_attention.h. Version 2 of the kernel in
// kernels/cuda/dev/ (tree_attention_v1.cu keeps version 1, the naive
// one-thread-per-query kernel; tree_attention_dev.cc times both).
#include <math.h>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/tree_attention.h"

namespace lookahead::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kKeyTile = 32;  // keys per shared-memory tile (one per lane)
constexpr int kMaxHeadDim = 128;
constexpr int kMaxWarps = 16;  // tokens_per_tile * group <= kMaxWarps

// One thread per (token, rotated pair or value element). Layout of the work
// index: for each token, H * R/2 query pairs, KV * R/2 key pairs, then
// (H + KV) * (hd - R) unrotated q/k tail elements and KV * hd value elements.
template <typename T>
__global__ void RopeAppendKernel(TreeBatch batch, AttentionShape shape,
                                 int32_t layer, const T* qkv,
                                 int64_t qkv_stride, const int32_t* positions,
                                 const double* inv_freq, int32_t rope_dim,
                                 RopeStyle style, T* q_out) {
  const int H = shape.heads, KV = shape.kv_heads, hd = shape.head_dim;
  const int half = rope_dim / 2, tail = hd - rope_dim;
  const int64_t per_token = static_cast<int64_t>(H + KV) * half +
                            static_cast<int64_t>(H + KV) * tail +
                            static_cast<int64_t>(KV) * hd;
  const int64_t total = per_token * batch.num_tokens;
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       w < total; w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int t = static_cast<int>(w / per_token);
    int64_t e = w % per_token;
    const int s = batch.token_seq[t];
    const int node = t - batch.seq_offsets[s];
    const int64_t cap = batch.capacities[s];
    const int64_t slot = batch.cache_lens[s] + node;
    const T* row = qkv + t * qkv_stride;
    // Cache row of (layer, kv head g, slot).
    auto cache_row = [&](void* const* caches, int g) {
      return static_cast<T*>(caches[s]) +
             ((static_cast<int64_t>(layer) * KV + g) * cap + slot) * hd;
    };
    if (e < static_cast<int64_t>(H + KV) * half) {
      const int head = static_cast<int>(e / half),
                i = static_cast<int>(e % half);
      // Angles in float64, as the LibTorch path computes them, rounded to
      // the storage type like its cos/sin tensors.
      const double angle = static_cast<double>(positions[t]) * inv_freq[i];
      const float c = ToFloat(FromFloat<T>(static_cast<float>(cos(angle))));
      const float sn = ToFloat(FromFloat<T>(static_cast<float>(sin(angle))));
      const int a = style == RopeStyle::kHalves ? i : 2 * i;
      const int b = style == RopeStyle::kHalves ? i + half : 2 * i + 1;
      const T* src = row + static_cast<int64_t>(head) * hd;  // q then k heads
      const float x0 = ToFloat(src[a]), x1 = ToFloat(src[b]);
      const float y0 = x0 * c - x1 * sn, y1 = x1 * c + x0 * sn;
      T* dst = head < H ? q_out + (static_cast<int64_t>(t) * H + head) * hd
                        : cache_row(batch.k_caches, head - H);
      dst[a] = FromFloat<T>(y0);
      dst[b] = FromFloat<T>(y1);
      continue;
    }
    e -= static_cast<int64_t>(H + KV) * half;
    if (e < static_cast<int64_t>(H + KV) * tail) {
      const int head = static_cast<int>(e / tail);
      const int d = rope_dim + static_cast<int>(e % tail);
      const T x = row[static_cast<int64_t>(head) * hd + d];
      if (head < H) {
        q_out[(static_cast<int64_t>(t) * H + head) * hd + d] = x;
      } else {
        cache_row(batch.k_caches, head - H)[d] = x;
      }
      continue;
    }
    e -= static_cast<int64_t>(H + KV) * tail;
    const int g = static_cast<int>(e / hd), d = static_cast<int>(e % hd);
    cache_row(batch.v_caches, g)[d] =
        row[static_cast<int64_t>(H + KV + g) * hd + d];
  }
}

// Block (tile b, KV head g); warp w serves token first[b] + w / group and
// query head g * group + w % group. Each 32-key tile of the sequence's
// slots is staged in shared memory as float: K with a padded row (lane j
// reads row j conflict-free), V unpadded (lane reads column d). Lane j
// scores key j, the warp runs an online softmax, and lane l accumulates
// output dims l, l + 32, ...
template <typename T>
__global__ void TreeAttentionKernel(TreeBatch batch, TreeTiles tiles,
                                    AttentionShape shape, int32_t layer,
                                    const T* q, float scale, T* out) {
  extern __shared__ float smem[];
  const int H = shape.heads, KV = shape.kv_heads, hd = shape.head_dim;
  const int group = H / KV, dims = hd / kWarp;
  const int g = blockIdx.y;
  const int first = tiles.first[blockIdx.x], count = tiles.count[blockIdx.x];
  const int s = batch.token_seq[first];
  const int n = batch.seq_offsets[s + 1] - batch.seq_offsets[s];
  const int node0 = first - batch.seq_offsets[s];
  const int len = batch.cache_lens[s];
  const int64_t cap = batch.capacities[s];
  const int words = (n + 63) / 64;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;

  float* k_tile = smem;                          // (kKeyTile, hd + 1)
  float* v_tile = k_tile + kKeyTile * (hd + 1);  // (kKeyTile, hd)
  float* q_rows = v_tile + kKeyTile * hd;        // (warps, hd)

  const int local = warp / group;  // token of this warp within the tile
  const bool active = local < count;
  const int node = node0 + local;
  const int t = first + local;
  const int head = g * group + warp % group;
  if (active) {
    for (int d = lane; d < hd; d += kWarp) {
      q_rows[warp * hd + d] =
          ToFloat(q[(static_cast<int64_t>(t) * H + head) * hd + d]);
    }
  }
  const uint64_t* mask_row =
      batch.masks + batch.mask_offsets[s] + static_cast<int64_t>(node) * words;

  const T* k_base = static_cast<const T*>(batch.k_caches[s]) +
                    (static_cast<int64_t>(layer) * KV + g) * cap * hd;
  const T* v_base = static_cast<const T*>(batch.v_caches[s]) +
                    (static_cast<int64_t>(layer) * KV + g) * cap * hd;
  // Keys past the tile's last node are masked for every query in it.
  const int span = len + node0 + count;

  float m = -INFINITY, l = 0.0f;
  float acc[kMaxHeadDim / kWarp];
#pragma unroll
  for (int r = 0; r < kMaxHeadDim / kWarp; ++r) acc[r] = 0.0f;

  for (int start = 0; start < span; start += kKeyTile) {
    __syncthreads();  // the previous tile is consumed (and q_rows written)
    for (int e = threadIdx.x; e < kKeyTile * hd; e += blockDim.x) {
      const int j = e / hd, d = e % hd;
      const int slot = start + j;
      float kv = 0.0f, vv = 0.0f;
      if (slot < span) {
        kv = ToFloat(k_base[static_cast<int64_t>(slot) * hd + d]);
        vv = ToFloat(v_base[static_cast<int64_t>(slot) * hd + d]);
      }
      k_tile[j * (hd + 1) + d] = kv;
      v_tile[j * hd + d] = vv;
    }
    __syncthreads();
    if (!active) continue;
    const int slot = start + lane;
    bool allowed = slot < len;
    if (!allowed && slot < span) {
      const int j = slot - len;
      allowed = (mask_row[j / 64] >> (j % 64)) & 1u;
    }
    float score = -INFINITY;
    if (allowed) {
      float dot = 0.0f;
      const float* qr = q_rows + warp * hd;
      const float* kr = k_tile + lane * (hd + 1);
      for (int d = 0; d < hd; ++d) dot += qr[d] * kr[d];
      score = dot * scale;
    }
    float tile_max = score;
    for (int o = kWarp / 2; o > 0; o /= 2) {
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;    // nothing visible yet
    const float corr = expf(m - m_new);  // 0 on the first visible tile
    const float p = allowed ? expf(score - m_new) : 0.0f;
    float p_sum = p;
    for (int o = kWarp / 2; o > 0; o /= 2) {
      p_sum += __shfl_xor_sync(0xffffffffu, p_sum, o);
    }
    l = l * corr + p_sum;
#pragma unroll
    for (int r = 0; r < kMaxHeadDim / kWarp; ++r) acc[r] *= corr;
    for (int j = 0; j < kKeyTile; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      if (pj == 0.0f) continue;  // uniform across the warp
      const float* vr = v_tile + j * hd;
#pragma unroll
      for (int r = 0; r < kMaxHeadDim / kWarp; ++r) {
        if (r < dims) acc[r] += pj * vr[lane + r * kWarp];
      }
    }
    m = m_new;
  }
  if (!active) return;
  const float inv_l = 1.0f / l;  // l > 0: a node always sees itself
  T* o = out + (static_cast<int64_t>(t) * H + head) * hd;
#pragma unroll
  for (int r = 0; r < kMaxHeadDim / kWarp; ++r) {
    if (r < dims) o[lane + r * kWarp] = FromFloat<T>(acc[r] * inv_l);
  }
}

}  // namespace

bool TreeAttentionSupports(const AttentionShape& shape) {
  const int hd = shape.head_dim;
  return hd % kWarp == 0 && hd >= kWarp && hd <= kMaxHeadDim &&
         shape.kv_heads >= 1 && shape.heads % shape.kv_heads == 0 &&
         shape.heads / shape.kv_heads <= kMaxWarps;
}

int32_t TokensPerTile(const AttentionShape& shape) {
  const int group = shape.kv_heads > 0 ? shape.heads / shape.kv_heads : 1;
  return group >= kMaxWarps ? 1 : kMaxWarps / (group > 0 ? group : 1);
}

int32_t MaxTreeTiles(int32_t num_tokens, int32_t num_seqs,
                     int32_t tokens_per_tile) {
  return (num_tokens + tokens_per_tile - 1) / tokens_per_tile + num_seqs;
}

int32_t HostTreeTiles(const int32_t* seq_offsets, int32_t num_seqs,
                      int32_t tokens_per_tile, int32_t* first, int32_t* count) {
  int32_t tiles = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = seq_offsets[s]; t < seq_offsets[s + 1];
         t += tokens_per_tile) {
      first[tiles] = t;
      count[tiles] = seq_offsets[s + 1] - t < tokens_per_tile
                         ? seq_offsets[s + 1] - t
                         : tokens_per_tile;
      ++tiles;
    }
  }
  return tiles;
}

cudaError_t LaunchRopeAppend(const TreeBatch& batch,
                             const AttentionShape& shape, int32_t layer,
                             DType dtype, const void* qkv, int64_t qkv_stride,
                             const int32_t* positions, const double* inv_freq,
                             int32_t rope_dim, RopeStyle style, void* q_out,
                             cudaStream_t stream) {
  if (batch.num_tokens < 1 || rope_dim < 2 || rope_dim % 2 != 0 ||
      rope_dim > shape.head_dim || shape.kv_heads < 1 ||
      shape.heads % shape.kv_heads != 0 || layer < 0 || layer >= shape.layers) {
    return cudaErrorInvalidValue;
  }
  return DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int threads = 256;
    const int64_t work = static_cast<int64_t>(batch.num_tokens) *
                         ((shape.heads + shape.kv_heads) * shape.head_dim +
                          shape.kv_heads * shape.head_dim);
    const int blocks = static_cast<int>((work + threads - 1) / threads < 65535
                                            ? (work + threads - 1) / threads
                                            : 65535);
    RopeAppendKernel<T><<<blocks, threads, 0, stream>>>(
        batch, shape, layer, static_cast<const T*>(qkv), qkv_stride, positions,
        inv_freq, rope_dim, style, static_cast<T*>(q_out));
    return cudaGetLastError();
  });
}

cudaError_t LaunchTreeAttention(const TreeBatch& batch, const TreeTiles& tiles,
                                const AttentionShape& shape, int32_t layer,
                                DType dtype, const void* q, float scale,
                                void* out, cudaStream_t stream) {
  const int hd = shape.head_dim;
  if (!TreeAttentionSupports(shape) || tiles.num_tiles < 1 ||
      tiles.tokens_per_tile < 1 ||
      tiles.tokens_per_tile * (shape.heads / shape.kv_heads) > kMaxWarps ||
      layer < 0 || layer >= shape.layers) {
    return cudaErrorInvalidValue;
  }
  const int warps = tiles.tokens_per_tile * (shape.heads / shape.kv_heads);
  const size_t smem =
      sizeof(float) * (kKeyTile * (hd + 1) + kKeyTile * hd + warps * hd);
  return DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(tiles.num_tiles, shape.kv_heads);
    TreeAttentionKernel<T><<<grid, warps * kWarp, smem, stream>>>(
        batch, tiles, shape, layer, static_cast<const T*>(q), scale,
        static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace lookahead::kernels::cuda
