// Tree attention for the verify step: RoPE by tree depth, K/V append, and
// masked grouped-query attention of every tree node against its sequence's
// KV cache and its own ancestors, for a whole TreeBatch in one launch each.
//
// Launchers are asynchronous on `stream`, take device pointers, and return
// cudaSuccess or the launch error (cudaErrorInvalidValue for shapes they do
// not support). Thread-compatible: concurrent launches must not write the
// same cache rows.
#ifndef LOOKAHEAD_KERNELS_CUDA_TREE_ATTENTION_H_
#define LOOKAHEAD_KERNELS_CUDA_TREE_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/tree_batch.h"

namespace lookahead::kernels::cuda {

// Rotates each token's query and key by its position and writes the rotated
// key and the value to cache slot cache_lens[s] + i of `layer`.
// qkv: (T, qkv_stride) rows of dtype; columns [0, H*hd) are q,
//   [H*hd, (H+KV)*hd) k, [(H+KV)*hd, (H+2KV)*hd) v (as the fused projection
//   writes them).
// positions: (T) absolute positions (cache_lens[s] + depth of the node).
// inv_freq: (rope_dim / 2) float64 angle per position of each pair.
// q_out: (T, H, hd) dtype, the rotated queries.
// REQUIRES: 0 < rope_dim <= hd, rope_dim even; every slot < capacity.
cudaError_t LaunchRopeAppend(const TreeBatch& batch,
                             const AttentionShape& shape, int32_t layer,
                             DType dtype, const void* qkv, int64_t qkv_stride,
                             const int32_t* positions, const double* inv_freq,
                             int32_t rope_dim, RopeStyle style, void* q_out,
                             cudaStream_t stream);

// Returns true iff LaunchTreeAttention supports `shape`: hd a multiple of
// 32 in [32, 128], H a multiple of KV, and a GQA group H / KV <= 16.
bool TreeAttentionSupports(const AttentionShape& shape);

// Tokens per tile for `shape`: as many as keep (H / KV) * tokens <= 16 warps,
// at least 1.
int32_t TokensPerTile(const AttentionShape& shape);

// Upper bound of HostTreeTiles' result: ceil(T / tokens_per_tile) + S.
int32_t MaxTreeTiles(int32_t num_tokens, int32_t num_seqs,
                     int32_t tokens_per_tile);

// Fills host arrays first/count (MaxTreeTiles entries) from host
// seq_offsets (S + 1); returns the number of tiles. The caller copies them
// to the device for TreeTiles.
int32_t HostTreeTiles(const int32_t* seq_offsets, int32_t num_seqs,
                      int32_t tokens_per_tile, int32_t* first, int32_t* count);

// out[t, h] = softmax(scale * q[t, h] . K^T + mask) V over the keys of token
// t's sequence at `layer`: every committed slot, and the tree slots its mask
// row allows. KV head of query head h is h / (H / KV). One block per (tile,
// KV head): the group's query heads of the tile's tokens share each K/V tile
// loaded into shared memory.
// q: (T, H, hd) dtype (already rotated); out: (T, H, hd) dtype.
// Float32 accumulation with an online softmax over 32-key tiles at fixed
// slot offsets, so a query's result does not depend on how many other
// nodes the tree has. cudaErrorInvalidValue iff !TreeAttentionSupports(shape)
// or tiles.tokens_per_tile * (H / KV) > 16.
cudaError_t LaunchTreeAttention(const TreeBatch& batch, const TreeTiles& tiles,
                                const AttentionShape& shape, int32_t layer,
                                DType dtype, const void* q, float scale,
                                void* out, cudaStream_t stream);

}  // namespace lookahead::kernels::cuda

#endif  // LOOKAHEAD_KERNELS_CUDA_TREE_ATTENTION_H_
