// Per-instruction-set entry points of decoder_ops (internal: each set is
// defined in a file compiled for its instruction set only).
#ifndef LOOKAHEAD_KERNELS_CPU_DECODER_OPS_ISA_H_
#define LOOKAHEAD_KERNELS_CPU_DECODER_OPS_ISA_H_

#include <cstdint>

#include "kernels/cpu/decoder_ops.h"

// clang-format off
#define LOOKAHEAD_DECODER_OPS_DECLARE(ns)                                     \
  namespace ns {                                                              \
  void RmsNorm(const float* x, int64_t m, int64_t d, const float* w,          \
               float eps, float* y);                                          \
  void SiluMul(const float* gate, const float* up, int64_t n, float* out);    \
  void AttendBlock(const float* q, int heads, int head_dim,                   \
                   const AttentionKeys& keys, int32_t begin, int32_t end,     \
                   float scale, float* scores,                                \
                   const AttentionPartial* partials);                         \
  void CombineBlocks(const AttentionPartial* blocks, int n, int head_dim,     \
                     float* out);                                             \
  }
// clang-format on

namespace lookahead::kernels::internal {
LOOKAHEAD_DECODER_OPS_DECLARE(ops_scalar)
LOOKAHEAD_DECODER_OPS_DECLARE(ops_avx2)
LOOKAHEAD_DECODER_OPS_DECLARE(ops_avx512)
}  // namespace lookahead::kernels::internal

#undef LOOKAHEAD_DECODER_OPS_DECLARE

#endif  // LOOKAHEAD_KERNELS_CPU_DECODER_OPS_ISA_H_
