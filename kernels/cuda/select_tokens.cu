// Token selection and path acceptance; see select_tokens.h.
#include <math.h>

#include "kernels/counter_rng.h"
#include "kernels/cuda/select_tokens.h"

namespace lookahead::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Clean(float x) {
  return isnan(x) ? -INFINITY : x;
}

// (value, index) with "larger value, then lower index" wins.
struct Best {
  double value;
  int32_t index;
};

__device__ __forceinline__ Best Better(Best a, Best b) {
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

// Block-wide reduction of every thread's Best; the result is valid in all
// threads. REQUIRES: blockDim.x == kThreads.
__device__ Best BlockBest(Best mine) {
  __shared__ double values[kThreads / 32];
  __shared__ int32_t indices[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) {
    Best other{__shfl_xor_sync(0xffffffffu, mine.value, o),
               __shfl_xor_sync(0xffffffffu, mine.index, o)};
    mine = Better(mine, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // the arrays may still be read from an earlier call
  if (lane == 0) {
    values[warp] = mine.value;
    indices[warp] = mine.index;
  }
  __syncthreads();
  Best best{values[0], indices[0]};
  for (int w = 1; w < kThreads / 32; ++w) {
    best = Better(best, Best{values[w], indices[w]});
  }
  return best;
}

// Block per row: the argmax (clean logits), then for a sampled row the
// Gumbel-max winner in float64.
__global__ void SelectTokensKernel(const float* logits, int32_t vocab,
                                   const float* temperatures,
                                   const uint64_t* seeds,
                                   const int64_t* positions, int32_t* out) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * vocab;
  Best mine{-INFINITY, vocab};
  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    mine = Better(mine, Best{Clean(row[i]), i});
  }
  const Best top = BlockBest(mine);
  const float temperature = temperatures[r];
  if (!(temperature > 0.0f) || isinf(top.value)) {
    if (threadIdx.x == 0) out[r] = top.index;
    return;
  }
  const double inv_t = 1.0 / static_cast<double>(temperature);
  const uint64_t seed = seeds[r];
  const int64_t position = positions[r];
  Best drawn{-INFINITY, vocab};
  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    // z - log(-log(u)), rounded step by step as the CPU sampler does (no
    // fused multiply-adds), so both pick the same token.
    const double z = __dmul_rn(
        __dsub_rn(static_cast<double>(Clean(row[i])), top.value), inv_t);
    const double score =
        __dsub_rn(z, log(-log(CounterUniform(seed, position, i))));
    drawn = Better(drawn, Best{score, i});
  }
  const Best winner = BlockBest(drawn);
  if (threadIdx.x == 0) out[r] = winner.index;
}

// Thread per sequence; trees are small (a few dozen nodes).
__global__ void AcceptPathsKernel(int32_t num_seqs, const int32_t* seq_offsets,
                                  const int32_t* tokens, const int32_t* parents,
                                  const int32_t* chosen, int32_t* paths,
                                  int32_t* emitted, int32_t* counts) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= num_seqs) return;
  const int32_t begin = seq_offsets[s], n = seq_offsets[s + 1] - begin;
  int32_t node = 0, count = 0;
  while (true) {
    const int32_t token = chosen[begin + node];
    paths[begin + count] = node;
    emitted[begin + count] = token;
    ++count;
    int32_t next = -1;
    for (int32_t j = node + 1; j < n; ++j) {
      if (parents[begin + j] == node && tokens[begin + j] == token) {
        next = j;
        break;
      }
    }
    if (next < 0) break;
    node = next;
  }
  counts[s] = count;
}

}  // namespace

cudaError_t LaunchSelectTokens(const float* logits, int32_t rows, int32_t vocab,
                               const float* temperatures, const uint64_t* seeds,
                               const int64_t* positions, int32_t* out,
                               cudaStream_t stream) {
  if (rows < 1 || vocab < 1) return cudaErrorInvalidValue;
  SelectTokensKernel<<<rows, kThreads, 0, stream>>>(logits, vocab, temperatures,
                                                    seeds, positions, out);
  return cudaGetLastError();
}

cudaError_t LaunchAcceptPaths(int32_t num_seqs, const int32_t* seq_offsets,
                              const int32_t* tokens, const int32_t* parents,
                              const int32_t* chosen, int32_t* paths,
                              int32_t* emitted, int32_t* counts,
                              cudaStream_t stream) {
  if (num_seqs < 1) return cudaErrorInvalidValue;
  const int threads = 64;
  AcceptPathsKernel<<<(num_seqs + threads - 1) / threads, threads, 0, stream>>>(
      num_seqs, seq_offsets, tokens, parents, chosen, paths, emitted, counts);
  return cudaGetLastError();
}

}  // namespace lookahead::kernels::cuda
