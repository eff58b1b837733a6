// y = x · Wᵀ straight from a GGUF weight, dequantizing in registers.
//
// W is the tensor exactly as stored in the file: ggml dims [K, N], i.e. N
// rows of K values, each row a run of blocks along K (F32/F16/BF16: plain
// values; Q4_0/Q4_1/Q5_0/Q5_1/Q8_0: 32-element blocks; Q2_K/Q3_K/Q4_K/
// Q5_K/Q6_K: 256-element super-blocks, layouts as ggml-common.h).
// Activations and sums stay float32; every weight value used is bit for bit
// what engine/gguf's Dequantize gives for that element (its float
// operations; a multiply-add is fused only where the product is exact, so
// it rounds the same), so the result differs from dequantize-then-matmul
// only by the order of the sum.
//
// The sum (the same for every ISA, so kScalar is an exact reference): lane
// j < 16 accumulates fma(x[k], w[k], lane) over k ≡ j (mod 16) in increasing
// k from +0; the lanes then add as a fixed tree, lane i + lane i+8, then
// i + i+4, then i + i+2, then 0 + 1.
//
// Row invariance: every y[r, n] is that sequence of operations whatever m
// is, whatever the other rows of x hold and however [n_begin, n_end) is
// split, so one token's output is bit for bit the same alone and inside a
// batch (see packed_matmul.h for why decoding needs this). Results are also
// identical across QuantIsa values, except that a NaN's payload may differ.
//
// Each weight byte is read from memory once per call (per 64 rows of x). On
// the 2-core Zen 4 machine, one thread, SmolLM2-135M's shapes: Q4_1 streams
// ~10 GB/s and Q8_0 ~19 GB/s for 1 row; from 16 rows on, Q4_1 and Q8_0 take
// PackedMatmul's F32 time (quant_matmul_bench).
//
// Thread-safe: pure functions of their arguments; calls writing disjoint
// column ranges of y may run concurrently (split [0, N) across threads).
#ifndef LOOKAHEAD_KERNELS_CPU_QUANT_MATMUL_H_
#define LOOKAHEAD_KERNELS_CPU_QUANT_MATMUL_H_

#include <cstdint>

namespace lookahead::kernels {

// Weight element types, valued as the ggml type ids of the GGUF spec (a
// GGUF tensor's type id casts to this). Persisted ids: DO NOT CHANGE.
enum class QuantType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// Returns true iff `ggml_id` is one of the QuantType values above.
bool IsQuantType(uint32_t ggml_id);

enum class QuantIsa : uint8_t {
  kScalar,  // Portable reference: decodes a row, then 16 scalar lanes.
  kAvx2,    // AVX2 + FMA + F16C.
  kAvx512,  // AVX-512F (+ F16C).
};

// The fastest QuantIsa this CPU runs (checked once, at the first call).
QuantIsa BestQuantIsa();

// Elements per block: 1 (F32, F16, BF16), 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)
// or 256 (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K). REQUIRES: IsQuantType(type).
int64_t QuantBlockSize(QuantType type);

// Bytes of one row of k elements (k / QuantBlockSize(type) blocks).
// REQUIRES: IsQuantType(type), k >= 0, k % QuantBlockSize(type) == 0.
int64_t QuantRowBytes(QuantType type, int64_t k);

// For rows r < m and columns n in [n_begin, n_end):
//   y[r * ldy + n] = sum over j < k of x[r * k + j] * W[n][j]
// summed as described at the top; columns outside the range and y's
// padding are not touched.
//   x: (m, k) float32, row-major.
//   w: the weight's N rows of QuantRowBytes(type, k) bytes each (only rows
//      [n_begin, n_end) are read); no alignment needed.
//   y: (m, ldy) float32; ldy >= n_end.
// k == 0 writes zeros. Uses up to 32 KiB of stack.
// REQUIRES: IsQuantType(type); k >= 0 and k % QuantBlockSize(type) == 0;
// m >= 0; 0 <= n_begin <= n_end; the CPU runs `isa` (BestQuantIsa() >= isa);
// y does not overlap x or w.
void QuantMatmul(QuantIsa isa, QuantType type, const float* x, int64_t m,
                 int64_t k, const uint8_t* w, int64_t n_begin, int64_t n_end,
                 float* y, int64_t ldy);

}  // namespace lookahead::kernels

#endif  // LOOKAHEAD_KERNELS_CPU_QUANT_MATMUL_H_
