#include "kernels/cpu/packed_matmul.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/packed_matmul_isa.h"

namespace lookahead::kernels {

PackedIsa BestPackedIsa() {
  static const PackedIsa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return PackedIsa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      return PackedIsa::kAvx2;
    }
    return PackedIsa::kNone;
  }();
  return best;
}

int64_t PanelWidth(PackedIsa isa) {
  switch (isa) {
    case PackedIsa::kAvx2:
      return internal::kAvx2Panel;
    case PackedIsa::kAvx512:
      return internal::kAvx512Panel;
    case PackedIsa::kNone:
      break;
  }
  return 0;
}

void PackWeight(const float* w, int64_t k, int64_t n, int64_t panel,
                float* packed) {
  const int64_t panels = (n + panel - 1) / panel;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t c0 = p * panel, width = std::min(panel, n - c0);
    for (int64_t j = 0; j < k; ++j) {
      float* dst = packed + (p * k + j) * panel;
      std::memcpy(dst, w + j * n + c0, width * sizeof(float));
      std::fill(dst + width, dst + panel, 0.0f);
    }
  }
}

void PackedMatmul(PackedIsa isa, const float* x, int64_t m, int64_t k,
                  const float* packed, int64_t panel_begin, int64_t panel_end,
                  float* y, int64_t ldy) {
  switch (isa) {
    case PackedIsa::kAvx2:
      internal::PackedMatmulAvx2(x, m, k, packed, panel_begin, panel_end, y,
                                 ldy);
      return;
    case PackedIsa::kAvx512:
      internal::PackedMatmulAvx512(x, m, k, packed, panel_begin, panel_end, y,
                                   ldy);
      return;
    case PackedIsa::kNone:
      return;
  }
}

}  // namespace lookahead::kernels
