// The AVX2 packed matmul (this file alone is compiled with -mavx2 -mfma).
#include <immintrin.h>

#include "kernels/cpu/packed_matmul_isa.h"

namespace lookahead::kernels::internal {
namespace {

struct Isa {
  using Vec = __m256;
  static constexpr int kLanes = 8;
  // 3 rows x 4 columns = 12 accumulators of 16 registers; 1 weight + 3
  // broadcasts in flight.
  static constexpr int kRows = 3;
  static Vec Zero() { return _mm256_setzero_ps(); }
  static Vec Load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec Broadcast(float f) { return _mm256_set1_ps(f); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
};

#include "kernels/cpu/packed_matmul_kernel.inc"

static_assert(kPanel == kAvx2Panel);

}  // namespace

void PackedMatmulAvx2(const float* x, int64_t m, int64_t k,
                      const float* packed, int64_t panel_begin,
                      int64_t panel_end, float* y, int64_t ldy) {
  Run(x, m, k, packed, panel_begin, panel_end, y, ldy);
}

}  // namespace lookahead::kernels::internal
