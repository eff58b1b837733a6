// KV compaction; see kv_compact.h.
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/kv_compact.h"

namespace lookahead::kernels::cuda {
namespace {

// Block (sequence s, layer * KV + head); thread d owns column d of every
// row and moves rows in path order. Row i's destination (slot len + i) is
// never the source of a later row (sources len + path[j] >= len + j > len
// + i for j > i), so one thread per column needs no barrier.
template <typename T>
__global__ void CompactKvKernel(TreeBatch batch, AttentionShape shape,
                                const int32_t* paths,
                                const int32_t* path_offsets,
                                const int32_t* path_counts) {
  const int s = blockIdx.x;
  const int64_t row_block = blockIdx.y;  // layer * KV + head
  const int hd = shape.head_dim;
  const int64_t cap = batch.capacities[s];
  const int64_t len = batch.cache_lens[s];
  const int32_t* path = paths + path_offsets[s];
  const int count = path_counts[s];
  T* k = static_cast<T*>(batch.k_caches[s]) + row_block * cap * hd;
  T* v = static_cast<T*>(batch.v_caches[s]) + row_block * cap * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    for (int i = 0; i < count; ++i) {
      if (path[i] == i) continue;
      const int64_t src = (len + path[i]) * hd + d, dst = (len + i) * hd + d;
      k[dst] = k[src];
      v[dst] = v[src];
    }
  }
}

}  // namespace

cudaError_t LaunchCompactKv(const TreeBatch& batch, const AttentionShape& shape,
                            DType dtype, const int32_t* paths,
                            const int32_t* path_offsets,
                            const int32_t* path_counts, cudaStream_t stream) {
  if (batch.num_seqs < 1 || shape.layers < 1 || shape.kv_heads < 1 ||
      shape.head_dim < 1) {
    return cudaErrorInvalidValue;
  }
  return DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(batch.num_seqs, shape.layers * shape.kv_heads);
    const int threads = shape.head_dim < 256 ? shape.head_dim : 256;
    CompactKvKernel<T><<<grid, threads, 0, stream>>>(batch, shape, paths,
                                                     path_offsets, path_counts);
    return cudaGetLastError();
  });
}

}  // namespace lookahead::kernels::cuda
