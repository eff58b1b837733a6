// Per-instruction-set entry points of quant_matmul (internal: each is
// defined in a file compiled for its instruction set only).
#ifndef LOOKAHEAD_KERNELS_CPU_QUANT_MATMUL_ISA_H_
#define LOOKAHEAD_KERNELS_CPU_QUANT_MATMUL_ISA_H_

#include <cstdint>

#include "kernels/cpu/quant_matmul.h"

namespace lookahead::kernels::internal {

// IEEE half -> float, exact (engine/gguf/dequant.cc's HalfToFloat).
float HalfToFloat(uint16_t h);

// As QuantMatmul, for one instruction set.
void QuantMatmulScalar(QuantType type, const float* x, int64_t m, int64_t k,
                       const uint8_t* w, int64_t n_begin, int64_t n_end,
                       float* y, int64_t ldy);
void QuantMatmulAvx2(QuantType type, const float* x, int64_t m, int64_t k,
                     const uint8_t* w, int64_t n_begin, int64_t n_end, float* y,
                     int64_t ldy);
void QuantMatmulAvx512(QuantType type, const float* x, int64_t m, int64_t k,
                       const uint8_t* w, int64_t n_begin, int64_t n_end,
                       float* y, int64_t ldy);

}  // namespace lookahead::kernels::internal

#endif  // LOOKAHEAD_KERNELS_CPU_QUANT_MATMUL_ISA_H_
