// The non-matmul kernels of a decoder layer on the CPU, for the native
// forward pass: RMSNorm, RoPE, SwiGLU's gate, and one query head's softmax
// attention over a KV cache and tree rows. fp32 throughout, torch-free.
//
// Every kernel computes each output from its own inputs only, in an order
// fixed by the code (sums in 16 lanes, then a fixed tree), never by the
// batch it sits in or the instruction set: results are bit for bit the same
// for every QuantIsa (the per-ISA builds compile one source with
// -ffp-contract=off), and a query's attention depends only on its query and
// the sequence of keys it sees. That is what makes a token's logits the same
// alone, inside a draft tree, and after a prefix-cache hit.
//
// exp is our own (Cody-Waite reduction and a degree-5 polynomial, ~2 ulp in
// float), the same on every ISA; inputs are clamped to [-87, 88].
//
// Thread-safe: pure functions of their arguments.
#ifndef LOOKAHEAD_KERNELS_CPU_DECODER_OPS_H_
#define LOOKAHEAD_KERNELS_CPU_DECODER_OPS_H_

#include <cstdint>

#include "kernels/cpu/quant_matmul.h"

namespace lookahead::kernels {

// For m rows of d values: y[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * w.
// y may equal x. REQUIRES: d >= 1; the CPU runs `isa`.
void RmsNorm(QuantIsa isa, const float* x, int64_t m, int64_t d, const float* w,
             float eps, float* y);

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i],
// for i < n. out may equal gate or up.
void SiluMul(QuantIsa isa, const float* gate, const float* up, int64_t n,
             float* out);

// Rotates in place the first rope_dim values of each of `heads` heads (one
// row; head h at x + h * head_dim) by angle i's cos[i], sin[i], i <
// rope_dim / 2: adjacent pairs (x[2i], x[2i+1]) (ggml mode 0) or halves
// (x[i], x[i + rope_dim/2]) (NeoX). Cheap; scalar on every ISA.
void Rope(float* x, int heads, int head_dim, int rope_dim, bool adjacent_pairs,
          const float* cos, const float* sin);

// The keys and values one query sees, in order: slots [0, prefix) of its
// KV head, then slots extra[0..n_extra). Slot s's key is at k + s *
// head_dim, its value at v + s * head_dim.
struct AttentionKeys {
  const float* k = nullptr;
  const float* v = nullptr;
  int32_t prefix = 0;
  const int32_t* extra = nullptr;
  int32_t n_extra = 0;
  // If set, the keys and values are IEEE halves here instead (a float16 KV
  // cache; k and v unused), widened exactly: the result is the one float
  // keys of the same values give.
  const uint16_t* k_half = nullptr;
  const uint16_t* v_half = nullptr;
  int32_t size() const { return prefix + n_extra; }
};

// Split attention: a query's keys are cut into blocks (by key index; the
// caller fixes the cuts, e.g. every 256 keys, so a query's result depends
// on its keys only), each block gives an AttentionPartial, and
// CombineBlocks merges them in order.
struct AttentionPartial {
  float* out = nullptr;  // (head_dim) sum_j exp(s_j - max) v_j
  float* max = nullptr;  // max_j s_j
  float* sum = nullptr;  // sum_j exp(s_j - max)
};

// `heads` query heads that share these keys (a grouped-query attention
// group; q holds them back to back, head_dim apart) over keys [begin, end)
// of `keys` (indices into the sequence above), s_j = scale * q_h . k_j;
// partials[h] gets head h's part. Each head's bits are those it gets alone
// (heads = 1); a group reads each key's K and V once. scores: scratch of
// heads * (end - begin) floats.
// REQUIRES: 0 <= begin < end <= keys.size(); heads >= 1; head_dim >= 1.
void AttendBlock(QuantIsa isa, const float* q, int heads, int head_dim,
                 const AttentionKeys& keys, int32_t begin, int32_t end,
                 float scale, float* scores, const AttentionPartial* partials);

// out = softmax attention from n >= 1 blocks' partials, merged in order.
// out may be blocks[0].out iff n == 1; else it overlaps no partial.
void CombineBlocks(QuantIsa isa, const AttentionPartial* blocks, int n,
                   int head_dim, float* out);

// One query head over all its keys in one block: out = sum_j p_j v_j with
// p = softmax(scale * q . k_j). scores: scratch of keys.size() floats.
// REQUIRES: keys.size() >= 1; head_dim >= 1; out does not overlap q.
void AttendHead(QuantIsa isa, const float* q, int head_dim,
                const AttentionKeys& keys, float scale, float* scores,
                float* out);

}  // namespace lookahead::kernels

#endif  // LOOKAHEAD_KERNELS_CPU_DECODER_OPS_H_
