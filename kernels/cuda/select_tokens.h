// Fused acceptance on the device: the model's token at every tree node
// (greedy argmax or a seeded Gumbel-max draw) and the longest tree path
// that agrees with it, so only the accepted token ids return to the host.
//
// Same rules as engine/model/acceptance.h and engine/model/sampler.h for greedy
// and for pure-temperature sampling (no top-k, no top-p): NaN never wins,
// ties go to the lowest index, the draw at absolute position p is
// argmax_t (logit_t - max) / temperature + Gumbel(seed, p, t) with the noise
// of kernels/counter_rng.h, and among children with the chosen token the
// first wins. Asynchronous on `stream`; device pointers; returns cudaSuccess
// or the launch error.
#ifndef LOOKAHEAD_KERNELS_CUDA_SELECT_TOKENS_H_
#define LOOKAHEAD_KERNELS_CUDA_SELECT_TOKENS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace lookahead::kernels::cuda {

// out[r] = the token chosen from logits row r, for r < rows.
// logits: (rows, vocab) float32. temperatures, seeds, positions: (rows);
// temperature <= 0 means greedy (seed and position unused); positions are
// the absolute positions the chosen tokens will occupy.
cudaError_t LaunchSelectTokens(const float* logits, int32_t rows, int32_t vocab,
                               const float* temperatures, const uint64_t* seeds,
                               const int64_t* positions, int32_t* out,
                               cudaStream_t stream);

// Walks each sequence's verified tree from node 0: emits chosen[node]; if a
// child of node carries that token, descends into the first such child and
// repeats. Sequence s owns packed nodes [seq_offsets[s], seq_offsets[s+1]);
// parents are indices within the sequence (-1 for node 0).
// Writes, at the sequence's packed offset, path (node indices, root first)
// and emitted tokens, and counts[s] = their length (>= 1).
cudaError_t LaunchAcceptPaths(int32_t num_seqs, const int32_t* seq_offsets,
                              const int32_t* tokens, const int32_t* parents,
                              const int32_t* chosen, int32_t* paths,
                              int32_t* emitted, int32_t* counts,
                              cudaStream_t stream);

}  // namespace lookahead::kernels::cuda

#endif  // LOOKAHEAD_KERNELS_CUDA_SELECT_TOKENS_H_
