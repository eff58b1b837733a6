// The scalar scan and the dispatch (compiled with -ffp-contract=off: every
// product and difference below is one rounding, as in the AVX-512 file).
#include "kernels/cpu/gumbel_scan.h"

#include <cmath>
#include <cstring>

#include "kernels/counter_rng.h"

namespace lookahead::kernels {
namespace internal {
int32_t GumbelSurvivorsAvx512(const float* logits, int32_t begin,
                              int32_t end, double max_logit, double inv_t,
                              double best_score, uint64_t position_key,
                              int32_t* out);
}  // namespace internal

namespace {

bool HasAvx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512dq");
  }();
  return has;
}

}  // namespace

double ExpNegBound(double x) {
  // The 1e-6 covers the product's rounding (< 1e-14 for x <= 38), so that
  // 2^-n >= 2^-(x log2 e) = exp(-x) always holds.
  const double t = x * 1.4426950408889634 - 1e-6;
  if (!(t >= 1.0)) return 1.0;
  const int n = static_cast<int>(t);  // floor: t > 0; n <= 55
  const uint64_t bits = static_cast<uint64_t>(1023 - n) << 52;
  double bound;
  std::memcpy(&bound, &bits, sizeof(bound));
  return bound;
}

bool GumbelSkips(double d, double u) {
  return d > 38.0 || (d > 0.0 && u < 1.0 - ExpNegBound(d) - 1e-9);
}

int32_t GumbelSurvivors(const float* logits, int32_t begin, int32_t end,
                        double max_logit, double inv_t, double best_score,
                        uint64_t position_key, int32_t* out) {
  int32_t count = 0, i = begin;
  if (HasAvx512()) {
    i = begin + (end - begin) / 8 * 8;
    count = internal::GumbelSurvivorsAvx512(logits, begin, i, max_logit, inv_t,
                                            best_score, position_key, out);
  }
  for (; i < end; ++i) {
    const float x = std::isnan(logits[i]) ? -INFINITY : logits[i];
    const double z = (static_cast<double>(x) - max_logit) * inv_t;
    if (!GumbelSkips(best_score - z, KeyedUniform(position_key, i))) {
      out[count++] = i;
    }
  }
  return count;
}

}  // namespace lookahead::kernels
