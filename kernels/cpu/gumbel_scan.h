// The Gumbel-max sampler's vocabulary scan (engine/model/sampler.cc): which
// tokens' noise can be skipped without computing it, one at a time or 8
// at a time (AVX-512). Pure functions; thread-safe.
//
// Sampling picks argmax_i z_i + g_i, g_i = -log(-log(u_i)). A token whose
// margin d = best - z_i is large enough loses whatever its noise, and the
// test below proves it from u_i alone, with no logarithm.
#ifndef LOOKAHEAD_KERNELS_CPU_GUMBEL_SCAN_H_
#define LOOKAHEAD_KERNELS_CPU_GUMBEL_SCAN_H_

#include <cstdint>

namespace lookahead::kernels {

// An upper bound of exp(-x) for 0 < x <= 38, within a factor of 2, without
// libm: 2^-n for the integer n <= x * log2(e). 1.0 where x * log2(e) < 1.
double ExpNegBound(double x);

// Returns true iff a token with margin d and uniform draw u cannot reach
// the best score (g(u) < d for certain): d > 38 (g <= 38 always, as
// u <= 1 - 2^-54), or d > 0 and u < 1 - ExpNegBound(d) - 1e-9 (g >= d
// needs u >= exp(-exp(-d)) >= 1 - exp(-d); the margin covers rounding).
// Monotone: if it holds for d, it holds for every larger d.
bool GumbelSkips(double d, double u);

// Writes to out, in increasing order, every token i in [begin, end) for
// which GumbelSkips(best_score - z_i, KeyedUniform(position_key, i)) is
// false, where z_i = (double(logits[i]) - max_logit) * inv_t (a NaN logit
// counts as -inf); returns how many. The same tokens on every CPU.
// REQUIRES: 0 <= begin <= end; out has room for end - begin; max_logit and
// inv_t finite.
int32_t GumbelSurvivors(const float* logits, int32_t begin, int32_t end,
                        double max_logit, double inv_t, double best_score,
                        uint64_t position_key, int32_t* out);

}  // namespace lookahead::kernels

#endif  // LOOKAHEAD_KERNELS_CPU_GUMBEL_SCAN_H_
