// Development versions of the tree-attention kernel (see README.md here):
// the same contract as kernels/cuda/tree_attention.h's LaunchTreeAttention.
#ifndef LOOKAHEAD_KERNELS_CUDA_DEV_TREE_ATTENTION_DEV_H_
#define LOOKAHEAD_KERNELS_CUDA_DEV_TREE_ATTENTION_DEV_H_

#include <cuda_runtime_api.h>

#include "kernels/cuda/tree_batch.h"

namespace lookahead::kernels::cuda::dev {

// Version 1: one thread per (token, query head), no shared memory.
cudaError_t LaunchTreeAttentionV1(const TreeBatch& batch,
                                  const AttentionShape& shape, int32_t layer,
                                  DType dtype, const void* q, float scale,
                                  void* out, cudaStream_t stream);

}  // namespace lookahead::kernels::cuda::dev

#endif  // LOOKAHEAD_KERNELS_CUDA_DEV_TREE_ATTENTION_DEV_H_
