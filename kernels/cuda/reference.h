// CPU references for the CUDA kernels in this directory: the same contracts
// on host memory, float32 storage and float64 arithmetic, written to be
// obviously right rather than fast. They are the oracle of kernels_test.cu
// and the dev file; reference_test.cc checks them against direct formulas
// and verifysvc's sampler. Pure functions of their arguments; thread-safe.
#ifndef LOOKAHEAD_KERNELS_CUDA_REFERENCE_H_
#define LOOKAHEAD_KERNELS_CUDA_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "kernels/cuda/tree_batch.h"

namespace lookahead::kernels::cuda {

// One sequence of a host batch: its KV cache and its token tree.
struct HostSequence {
  int32_t cache_len = 0;
  int32_t capacity = 0;
  std::vector<float> k;          // (layers, KV, capacity, hd)
  std::vector<float> v;          // (layers, KV, capacity, hd)
  std::vector<int32_t> parents;  // tree of n nodes, parents[i] in [-1, i)
};

// Returns the tree's depth of every node (a root has depth 0).
std::vector<int32_t> TreeDepths(const std::vector<int32_t>& parents);

// Returns true iff node j is node i or one of its ancestors.
bool IsAncestorOrSelf(const std::vector<int32_t>& parents, int32_t i,
                      int32_t j);

// LaunchRopeAppend on the host. qkv: (T, qkv_stride) packed over `seqs` in
// order; positions: (T); q_out: (T, H, hd).
void ReferenceRopeAppend(std::vector<HostSequence>* seqs,
                         const AttentionShape& shape, int32_t layer,
                         const float* qkv, int64_t qkv_stride,
                         const int32_t* positions,
                         const std::vector<double>& inv_freq, int32_t rope_dim,
                         RopeStyle style, float* q_out);

// LaunchTreeAttention on the host; the mask comes from each sequence's
// parents. q, out: (T, H, hd).
void ReferenceTreeAttention(const std::vector<HostSequence>& seqs,
                            const AttentionShape& shape, int32_t layer,
                            const float* q, float scale, float* out);

// LaunchCompactKv on the host: paths[s] is sequence s's accepted path.
void ReferenceCompactKv(std::vector<HostSequence>* seqs,
                        const AttentionShape& shape,
                        const std::vector<std::vector<int32_t>>& paths);

// LaunchSelectTokens on the host for one row.
int32_t ReferenceSelectToken(const float* row, int32_t vocab, float temperature,
                             uint64_t seed, int64_t position);

// LaunchAcceptPaths on the host for one sequence's tree.
void ReferenceAcceptPath(const std::vector<int32_t>& tokens,
                         const std::vector<int32_t>& parents,
                         const std::vector<int32_t>& chosen,
                         std::vector<int32_t>* path,
                         std::vector<int32_t>* emitted);

}  // namespace lookahead::kernels::cuda

#endif  // LOOKAHEAD_KERNELS_CUDA_REFERENCE_H_
