// The AVX-512 packed matmul (this file alone is compiled with -mavx512f).
#include <immintrin.h>

#include "kernels/cpu/packed_matmul_isa.h"

namespace lookahead::kernels::internal {
namespace {

struct Isa {
  using Vec = __m512;
  static constexpr int kLanes = 16;
  // 6 rows x 4 columns = 24 accumulators of 32 registers; 4 weights + 1
  // broadcast in flight.
  static constexpr int kRows = 6;
  static Vec Zero() { return _mm512_setzero_ps(); }
  static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec Broadcast(float f) { return _mm512_set1_ps(f); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
};

#include "kernels/cpu/packed_matmul_kernel.inc"

static_assert(kPanel == kAvx512Panel);

}  // namespace

void PackedMatmulAvx512(const float* x, int64_t m, int64_t k,
                        const float* packed, int64_t panel_begin,
                        int64_t panel_end, float* y, int64_t ldy) {
  Run(x, m, k, packed, panel_begin, panel_end, y, ldy);
}

}  // namespace lookahead::kernels::internal
