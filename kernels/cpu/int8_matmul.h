// y = x · Wᵀ with int8 activations: each row of x is quantized per 32
// values to int8 (scale d = max|x| / 127, round to nearest even), and each
// block's dot product with a Q4_0, Q4_1 or Q8_0 weight block is one exact
// integer sum (AVX-512 VNNI, or AVX2), scaled in float. This is llama.cpp's compute
// form for these weights: cheaper per row than quant_matmul's float32
// multiply-adds, and lossy against them (a different model output, close
// but not bit-identical to the float32 path or HF transformers).
//
// The sum (the same for every Int8Isa, so kScalar is an exact reference):
// for output (r, n), acc = +0, then for each block b in increasing order,
//   p = sum of q_w[i] * q_x[i] over the block (int32, exact),
//   Q4_0: p -= 8 * sum(q_x);  acc = fma(float(p), d_w * d_x, acc)
//   Q4_1:                     acc = fma(float(p), d_w * d_x, acc);
//                             acc = fma(m_w, d_x * float(sum(q_x)), acc)
//   Q8_0:                     acc = fma(float(p), d_w * d_x, acc)
// and y[r, n] = acc. Every row is quantized on its own, so the result is
// row-invariant: one token's output is bit for bit the same alone and
// inside a batch, which lossless drafting needs (see quant_matmul.h).
//
// Weights are repacked once (PackInt8Weights) into tiles of 16 output
// columns, each block's 16 columns interleaved 4 values at a time, so one
// VNNI instruction adds 4 products to each of 16 columns.
//
// Thread-safe: pure functions of their arguments; calls writing disjoint
// column ranges of y may run concurrently.
#ifndef LOOKAHEAD_KERNELS_CPU_INT8_MATMUL_H_
#define LOOKAHEAD_KERNELS_CPU_INT8_MATMUL_H_

#include <cstdint>

#include "kernels/cpu/quant_matmul.h"

namespace lookahead::kernels {

// Ordered: a CPU that runs one runs those before it.
enum class Int8Isa : uint8_t {
  kScalar,      // Portable reference over the packed layout.
  kAvx2,        // AVX2 + FMA + F16C (vpmaddubsw, vpmaddwd).
  kAvx512Vnni,  // AVX-512F + BW + VNNI.
};

// The fastest Int8Isa this CPU runs (checked once): the CPU runs `isa` iff
// BestInt8Isa() >= isa.
Int8Isa BestInt8Isa();

// "scalar", "AVX2", "AVX-512 VNNI".
const char* Int8IsaName(Int8Isa isa);

// Returns true iff int8 activations compute weights of `type` (Q4_0, Q4_1,
// Q8_0).
bool Int8Computes(QuantType type);

// Bytes of one quantized row of k values (k int8, k uint8 = int8 + 128, and
// per block a float scale, a float scale * sum and an int32 sum).
// REQUIRES: k >= 0, k % 32 == 0.
int64_t Int8RowBytes(int64_t k);

// Quantizes rows r < m of x (m, k) into out (m rows of Int8RowBytes(k)
// bytes). A block whose largest |x| is 0, or not finite, quantizes to 0
// with scale 0 (NaN and Inf do not propagate; they are not model values).
// The same bytes on every Int8Isa. REQUIRES: k % 32 == 0; out is 4-byte
// aligned; the CPU runs `isa`.
void QuantizeInt8Rows(Int8Isa isa, const float* x, int64_t m, int64_t k,
                      uint8_t* out);

// Bytes of `n` rows of k values of `type` packed for Int8Matmul (n rounded
// up to a multiple of 16 with zero columns). REQUIRES: Int8Computes(type),
// k % 32 == 0.
int64_t Int8PackedBytes(QuantType type, int64_t k, int64_t n);

// Packs w (n GGUF rows of QuantRowBytes(type, k) bytes) into out
// (Int8PackedBytes(type, k, n) bytes).
void PackInt8Weights(QuantType type, const uint8_t* w, int64_t k, int64_t n,
                     uint8_t* out);

// For rows r < m and columns n in [n_begin, n_end):
//   y[r * ldy + n] = the sum at the top, of row r of xq and column n of
//   `packed` (from PackInt8Weights with the same type and k).
// Other columns of y are not touched.
// REQUIRES: Int8Computes(type); k % 32 == 0, k > 0; 0 <= n_begin <= n_end
// <= the packed n; the CPU runs `isa`; y overlaps neither input.
void Int8Matmul(Int8Isa isa, QuantType type, const uint8_t* xq, int64_t m,
                int64_t k, const uint8_t* packed, int64_t n_begin,
                int64_t n_end, float* y, int64_t ldy);

}  // namespace lookahead::kernels

#endif  // LOOKAHEAD_KERNELS_CPU_INT8_MATMUL_H_
