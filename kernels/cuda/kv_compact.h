// KV compaction after acceptance: moves the accepted path's K/V rows of each
// sequence to contiguous cache slots, in place, for every layer and head.
//
// Asynchronous on `stream`; device pointers; returns cudaSuccess or the
// launch error. Thread-compatible.
#ifndef LOOKAHEAD_KERNELS_CUDA_KV_COMPACT_H_
#define LOOKAHEAD_KERNELS_CUDA_KV_COMPACT_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/tree_batch.h"

namespace lookahead::kernels::cuda {

// For each sequence s and i < path_counts[s]: cache row
// cache_lens[s] + paths[path_offsets[s] + i] moves to cache_lens[s] + i, in
// K and V, every layer and KV head. Paths are strictly increasing node
// indices starting at 0 (a root-to-node path in topological order), so a
// row never overwrites one still to be read.
// Uses batch.num_seqs, cache_lens, capacities, k_caches, v_caches.
// paths: concatenated node indices; path_offsets, path_counts: (S).
cudaError_t LaunchCompactKv(const TreeBatch& batch, const AttentionShape& shape,
                            DType dtype, const int32_t* paths,
                            const int32_t* path_offsets,
                            const int32_t* path_counts, cudaStream_t stream);

}  // namespace lookahead::kernels::cuda

#endif  // LOOKAHEAD_KERNELS_CUDA_KV_COMPACT_H_
