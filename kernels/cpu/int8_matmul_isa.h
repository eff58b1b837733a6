// The packed layouts of int8_matmul and its per-instruction-set entry
// points (internal: each is defined in a file compiled for its set only).
//
// A quantized row of k values (Int8RowBytes(k) bytes, nb = k / 32 blocks):
//   int8  q[k];   uint8 u[k] (q + 128);
//   float d[nb];  float ds[nb] (d * float(sum));  int32 sum[nb].
// Packed weights: tiles of 16 columns, each nb tile-blocks of
// kPackedBlockBytes(type), tile t's block b at (t * nb + b) * bytes. In a
// tile-block, "step s" is the 64 bytes whose bytes 4c .. 4c + 3 are
// elements 4s .. 4s + 3 of column c's block:
//   Q4_0, Q4_1: 4 x 64 nibble bytes, byte j of group g holding step g in
//               its low nibble and step g + 4 in its high nibble; then 16
//               IEEE halves d (Q4_1: and 16 halves m).
//   Q8_0:       8 steps of int8; 16 halves d; 16 int32 128 * sum(q_w).
// Zero columns past n have zero bytes (d = 0: they add +0).
#ifndef LOOKAHEAD_KERNELS_CPU_INT8_MATMUL_ISA_H_
#define LOOKAHEAD_KERNELS_CPU_INT8_MATMUL_ISA_H_

#include <cstdint>

#include "kernels/cpu/quant_matmul.h"

namespace lookahead::kernels::internal {

constexpr int64_t kInt8Tile = 16;

// Bytes of one tile-block; 0 for a type int8_matmul does not compute.
constexpr int64_t Int8PackedBlockBytes(QuantType type) {
  return type == QuantType::kQ4_0   ? 256 + 32
         : type == QuantType::kQ4_1 ? 256 + 32 + 32
         : type == QuantType::kQ8_0 ? 512 + 32 + 64
                                    : 0;
}

// A quantized row's parts.
struct Int8Row {
  const int8_t* q;
  const uint8_t* u;
  const float* d;
  const float* ds;
  const int32_t* sum;
};
inline Int8Row Int8RowAt(const uint8_t* xq, int64_t r, int64_t k) {
  const uint8_t* p = xq + r * (2 * k + 12 * (k / 32));
  const int64_t nb = k / 32;
  return {reinterpret_cast<const int8_t*>(p), p + k,
          reinterpret_cast<const float*>(p + 2 * k),
          reinterpret_cast<const float*>(p + 2 * k) + nb,
          reinterpret_cast<const int32_t*>(p + 2 * k) + 2 * nb};
}

// As QuantizeInt8Rows and Int8Matmul, for one instruction set.
void QuantizeInt8RowsScalar(const float* x, int64_t m, int64_t k,
                            uint8_t* out);
void QuantizeInt8RowsAvx512Vnni(const float* x, int64_t m, int64_t k,
                                uint8_t* out);
void Int8MatmulScalar(QuantType type, const uint8_t* xq, int64_t m, int64_t k,
                      const uint8_t* packed, int64_t n_begin, int64_t n_end,
                      float* y, int64_t ldy);
void Int8MatmulAvx2(QuantType type, const uint8_t* xq, int64_t m, int64_t k,
                    const uint8_t* packed, int64_t n_begin, int64_t n_end,
                    float* y, int64_t ldy);
void Int8MatmulAvx512Vnni(QuantType type, const uint8_t* xq, int64_t m,
                          int64_t k, const uint8_t* packed, int64_t n_begin,
                          int64_t n_end, float* y, int64_t ldy);

}  // namespace lookahead::kernels::internal

#endif  // LOOKAHEAD_KERNELS_CPU_INT8_MATMUL_ISA_H_
