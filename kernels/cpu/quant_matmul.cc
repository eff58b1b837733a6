#include "kernels/cpu/quant_matmul.h"

#include <cpuid.h>

#include <algorithm>

#include "kernels/cpu/quant_matmul_isa.h"

namespace lookahead::kernels {
namespace {

struct TypeTraits {
  int64_t block_size;  // 0: not a QuantType
  int64_t block_bytes;
};

TypeTraits Traits(QuantType type) {
  switch (type) {
    case QuantType::kF32:
      return {1, 4};
    case QuantType::kF16:
    case QuantType::kBF16:
      return {1, 2};
    case QuantType::kQ4_0:
      return {32, 2 + 16};
    case QuantType::kQ4_1:
      return {32, 4 + 16};
    case QuantType::kQ5_0:
      return {32, 2 + 4 + 16};
    case QuantType::kQ5_1:
      return {32, 4 + 4 + 16};
    case QuantType::kQ8_0:
      return {32, 2 + 32};
    case QuantType::kQ2_K:
      return {256, 16 + 64 + 4};
    case QuantType::kQ3_K:
      return {256, 32 + 64 + 12 + 2};
    case QuantType::kQ4_K:
      return {256, 4 + 12 + 128};
    case QuantType::kQ5_K:
      return {256, 4 + 12 + 32 + 128};
    case QuantType::kQ6_K:
      return {256, 128 + 64 + 16 + 2};
  }
  return {0, 0};
}

}  // namespace

bool IsQuantType(uint32_t ggml_id) {
  return Traits(static_cast<QuantType>(ggml_id)).block_size != 0;
}

int64_t QuantBlockSize(QuantType type) { return Traits(type).block_size; }

int64_t QuantRowBytes(QuantType type, int64_t k) {
  const TypeTraits t = Traits(type);
  return k / t.block_size * t.block_bytes;
}

QuantIsa BestQuantIsa() {
  static const QuantIsa best = [] {
    __builtin_cpu_init();
    // F16C from CPUID leaf 1 (clang's __builtin_cpu_supports lacks "f16c").
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c =
        __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    if (!__builtin_cpu_supports("fma") || !f16c) return QuantIsa::kScalar;
    if (__builtin_cpu_supports("avx512f")) return QuantIsa::kAvx512;
    if (__builtin_cpu_supports("avx2")) return QuantIsa::kAvx2;
    return QuantIsa::kScalar;
  }();
  return best;
}

void QuantMatmul(QuantIsa isa, QuantType type, const float* x, int64_t m,
                 int64_t k, const uint8_t* w, int64_t n_begin, int64_t n_end,
                 float* y, int64_t ldy) {
  if (m <= 0 || n_begin >= n_end) return;
  if (k == 0) {  // empty sums
    for (int64_t r = 0; r < m; ++r) {
      std::fill(y + r * ldy + n_begin, y + r * ldy + n_end, 0.0f);
    }
    return;
  }
  switch (isa) {
    case QuantIsa::kScalar:
      internal::QuantMatmulScalar(type, x, m, k, w, n_begin, n_end, y, ldy);
      return;
    case QuantIsa::kAvx2:
      internal::QuantMatmulAvx2(type, x, m, k, w, n_begin, n_end, y, ldy);
      return;
    case QuantIsa::kAvx512:
      internal::QuantMatmulAvx512(type, x, m, k, w, n_begin, n_end, y, ldy);
      return;
  }
}

}  // namespace lookahead::kernels
