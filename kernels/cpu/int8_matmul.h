// y = x · Wᵀ with int8 activations: each row of x is quantized to int8
// per block (scale d = max|x| / 127, round to nearest even), and each
// block's dot product with the weight's stored codes is one exact integer
// sum (AVX-512 VNNI, or AVX2), scaled in float. This is llama.cpp's compute
// form: cheaper per row than quant_matmul's float32 multiply-adds, and
// lossy against them (a different model output, close but not
// bit-identical to the float32 path or HF transformers). As llama.cpp
// does, the 32-value types take activations quantized per 32 values (its
// Q8_0 / Q8_1) and the K types per 256 (its Q8_K).
//
// The sum (the same for every Int8Isa, so kScalar is an exact reference),
// with q_w the weight's stored (unsigned; Q8_0 signed) codes and q_x, d_x
// the activation's: for output (r, n), acc = +0, then for each weight block
// b in increasing order:
//   Q4_0, Q5_0, Q8_0 (32 values): p = sum q_w * q_x - o * sum(q_x), o = 8,
//     16 or 0;  acc = fma(float(p), d_w * d_x, acc)
//   Q4_1, Q5_1: p = sum q_w * q_x;  acc = fma(float(p), d_w * d_x, acc);
//     acc = fma(m_w, d_x * float(sum(q_x)), acc)
//   Q4_K, Q5_K (256 values, 8 sub-blocks j of 32): p_j = sum q_w * q_x
//     over sub-block j; s = sum_j sc_j * p_j, t = sum_j mn_j * sum_j(q_x)
//     (int32, exact);  acc = fma(float(s), d_w * d_x, acc);
//     acc = fma(float(t), -(dmin_w * d_x), acc)
//   Q2_K (16 groups g of 16): as Q4_K over groups of 16 (sc_g, mn_g the
//     4-bit scale and min)
//   Q3_K, Q6_K (16 groups g of 16): s = sum_g sc_g * (sum q_w * q_x - o *
//     sum_g(q_x)), o = 4 or 32 (int32, exact);
//     acc = fma(float(s), d_w * d_x, acc)
// and y[r, n] = acc. Every row is quantized on its own, so the result is
// row-invariant: one token's output is bit for bit the same alone and
// inside a batch, which lossless drafting needs (see quant_matmul.h).
//
// Weights are repacked once (PackInt8Weights) into tiles of 16 output
// columns, each block's 16 columns interleaved 4 values at a time, so one
// VNNI instruction adds 4 products to each of 16 columns. The packed bytes
// are the GGUF bytes give or take the K types' unpacked 6-bit scales (Q4_K
// 148 bytes a column-block instead of 144, Q5_K 180 instead of 176, Q3_K
// 114 instead of 110).
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
// Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
bool Int8Computes(QuantType type);

// How a row of activations is quantized: per 32 values (for Q4_0 .. Q8_0)
// or per 256 (for the K types).
enum class Int8Activations : uint8_t { kBlock32, kBlock256 };

// The activation form `type` multiplies. REQUIRES: Int8Computes(type).
Int8Activations Int8ActivationsFor(QuantType type);

// Values per quantized activation block: 32 or 256.
int64_t Int8BlockSize(Int8Activations form);

// Bytes of one quantized row of k values (kBlock32: k int8, k uint8 = int8
// + 128, and per block a float scale, a float scale * sum and an int32
// sum; kBlock256: k int8, per block a float scale, and per 16 values an
// int32 sum). REQUIRES: k >= 0, k % Int8BlockSize(form) == 0.
int64_t Int8RowBytes(Int8Activations form, int64_t k);

// Quantizes rows r < m of x (m, k) into out (m rows of
// Int8RowBytes(form, k) bytes). A block whose largest |x| is 0, or not
// finite, quantizes to 0 with scale 0 (NaN and Inf do not propagate; they
// are not model values). The same bytes on every Int8Isa. REQUIRES:
// k % Int8BlockSize(form) == 0; out is 4-byte aligned; the CPU runs `isa`.
void QuantizeInt8Rows(Int8Isa isa, Int8Activations form, const float* x,
                      int64_t m, int64_t k, uint8_t* out);

// Bytes of `n` rows of k values of `type` packed for Int8Matmul (n rounded
// up to a multiple of 16 with zero columns). REQUIRES: Int8Computes(type),
// k % QuantBlockSize(type) == 0 and k % 32 == 0.
int64_t Int8PackedBytes(QuantType type, int64_t k, int64_t n);

// Packs w (n GGUF rows of QuantRowBytes(type, k) bytes) into out
// (Int8PackedBytes(type, k, n) bytes).
void PackInt8Weights(QuantType type, const uint8_t* w, int64_t k, int64_t n,
                     uint8_t* out);

// For rows r < m and columns n in [n_begin, n_end):
//   y[r * ldy + n] = the sum at the top, of row r of xq (quantized in
//   Int8ActivationsFor(type)) and column n of `packed` (from
//   PackInt8Weights with the same type and k).
// Other columns of y are not touched.
// REQUIRES: Int8Computes(type); k as for Int8PackedBytes, k > 0;
// 0 <= n_begin <= n_end <= the packed n; the CPU runs `isa`; y overlaps
// neither input.
void Int8Matmul(Int8Isa isa, QuantType type, const uint8_t* xq, int64_t m,
                int64_t k, const uint8_t* packed, int64_t n_begin,
                int64_t n_end, float* y, int64_t ldy);

}  // namespace lookahead::kernels

#endif  // LOOKAHEAD_KERNELS_CPU_INT8_MATMUL_H_
