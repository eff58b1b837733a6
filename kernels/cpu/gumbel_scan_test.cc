// Tests for kernels/cpu/gumbel_scan: the bound, the skip test's soundness,
// and the vectorized scan against the scalar test token by token.
#include "kernels/cpu/gumbel_scan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/counter_rng.h"

namespace lookahead::kernels {
namespace {

TEST(ExpNegBound, BoundsExpFromAboveWithinTwo) {
  for (double x = 1e-9; x <= 38.0; x += 0.0037) {
    const double bound = ExpNegBound(x);
    EXPECT_GE(bound, std::exp(-x)) << x;
    EXPECT_LE(bound, std::max(1.0, 2.0 * std::exp(-x) * 1.0000001)) << x;
  }
  // Just below and above the points where the exponent steps.
  for (int n = 1; n <= 54; ++n) {
    const double at = n / 1.4426950408889634;
    for (double x : {std::nextafter(at, 0.0), at, std::nextafter(at, 99.0)}) {
      EXPECT_GE(ExpNegBound(x), std::exp(-x)) << x;
    }
  }
}

// Whenever the test skips a token, its noise cannot reach the margin.
TEST(GumbelSkips, SkipsOnlyTokensThatLose) {
  std::mt19937_64 rng(3);
  int skipped = 0;
  for (int i = 0; i < 200000; ++i) {
    const double d = std::uniform_real_distribution<double>(-2.0, 45.0)(rng);
    // Uniforms near 1 too: that is where the noise is large.
    const double u = i % 2 ? KeyedUniform(rng(), i)
                           : 1.0 - std::ldexp(1.0, -static_cast<int>(rng() % 54));
    if (!GumbelSkips(d, u)) continue;
    ++skipped;
    ASSERT_LT(-std::log(-std::log(u)), d) << "d " << d << " u " << u;
  }
  EXPECT_GT(skipped, 100000);
}

// The scan returns exactly the tokens the scalar test keeps, in order, on
// rows with NaN and infinities, at lengths around the 8-token blocks.
TEST(GumbelSurvivors, EqualsTheScalarTestTokenByToken) {
  std::mt19937 rng(9);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  int64_t kept = 0, total = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int32_t n = trial < 40 ? trial : 1 + static_cast<int32_t>(rng() % 3000);
    std::normal_distribution<float> normal(0.0f, 0.5f + trial % 6);
    std::vector<float> logits(n);
    float max_logit = -inf;
    for (float& x : logits) {
      x = normal(rng);
      if (rng() % 100 == 0) x = nan;
      if (rng() % 100 == 0) x = -inf;
      if (x > max_logit) max_logit = x;
    }
    if (n == 0 || max_logit == -inf) max_logit = 0.0f;
    const double inv_t = 1.0 / (0.2 + 0.3 * (trial % 6));
    // A best score between "everything may win" and "nothing may".
    const double best = 0.5 * (trial % 20) - 3.0;
    const uint64_t key = PositionKey(trial, 7 * trial);
    // A range that starts off the 8-token grid too.
    const int32_t begin = trial % 3 == 0 ? std::min<int32_t>(n, trial % 11) : 0;
    std::vector<int32_t> want;
    for (int32_t i = begin; i < n; ++i) {
      const float x = std::isnan(logits[i]) ? -inf : logits[i];
      const double z = (static_cast<double>(x) - max_logit) * inv_t;
      if (!GumbelSkips(best - z, KeyedUniform(key, i))) want.push_back(i);
    }
    std::vector<int32_t> got(n + 1, -1);
    got.resize(GumbelSurvivors(logits.data(), begin, n, max_logit, inv_t,
                               best, key, got.data()));
    ASSERT_EQ(got, want) << "trial " << trial << " n " << n;
    kept += static_cast<int64_t>(want.size());
    total += n;
  }
  // Both outcomes occur often enough to matter.
  EXPECT_GT(kept, total / 200);
  EXPECT_LT(kept, total * 9 / 10);
}

}  // namespace
}  // namespace lookahead::kernels
