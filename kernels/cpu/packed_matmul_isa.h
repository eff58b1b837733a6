// Per-instruction-set entry points of packed_matmul (internal: each is
// defined in a file compiled for its instruction set only).
#ifndef LOOKAHEAD_KERNELS_CPU_PACKED_MATMUL_ISA_H_
#define LOOKAHEAD_KERNELS_CPU_PACKED_MATMUL_ISA_H_

#include <cstdint>

namespace lookahead::kernels::internal {

constexpr int64_t kAvx2Panel = 32;
constexpr int64_t kAvx512Panel = 64;

// As PackedMatmul, for one instruction set.
void PackedMatmulAvx2(const float* x, int64_t m, int64_t k,
                      const float* packed, int64_t panel_begin,
                      int64_t panel_end, float* y, int64_t ldy);
void PackedMatmulAvx512(const float* x, int64_t m, int64_t k,
                        const float* packed, int64_t panel_begin,
                        int64_t panel_end, float* y, int64_t ldy);

}  // namespace lookahead::kernels::internal

#endif  // LOOKAHEAD_KERNELS_CPU_PACKED_MATMUL_ISA_H_
