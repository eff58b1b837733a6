#include "engine/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/counter_rng.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;

std::vector<double> Softmax(const std::vector<float>& logits, double t) {
  double m = -1e300;
  for (float x : logits) m = std::max<double>(m, x);
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < p.size(); ++i)
    z += p[i] = std::exp((logits[i] - m) / t);
  for (double& x : p) x /= z;
  return p;
}

TEST(CounterRngTest, DeterministicKeyedAndUniform) {
  EXPECT_EQ(CounterRandom(1, 2), CounterRandom(1, 2));
  EXPECT_NE(CounterRandom(1, 2), CounterRandom(1, 3));
  EXPECT_NE(CounterRandom(1, 2), CounterRandom(2, 2));
  EXPECT_EQ(CounterUniform(1, 2, 3), CounterUniform(1, 2, 3));
  EXPECT_NE(CounterUniform(1, 2, 3), CounterUniform(1, 2, 4));
  EXPECT_NE(CounterUniform(1, 2, 3), CounterUniform(1, 3, 3));
  // Buckets of 100k draws across positions and seeds: chi-square, 16 bins.
  std::vector<int> bins(16, 0);
  const int n = 100000;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const double u = CounterUniform(/*seed=*/i % 7, /*position=*/i / 70,
                                    /*token=*/i % 10);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++bins[static_cast<int>(u * 16)];
  }
  double chi2 = 0;
  for (int b : bins) chi2 += (b - n / 16.0) * (b - n / 16.0) / (n / 16.0);
  EXPECT_LT(chi2, 40.0);  // 15 dof: p < 1e-3 above 37.7
  EXPECT_NEAR(sum / n, 0.5, 0.01);
}

// Seeded outputs replay across versions only if the draws never change:
// values pinned from the first release's definition.
TEST(CounterRngTest, DrawsArePinned) {
  EXPECT_EQ(CounterRandom(1, 2), 9980714568481679326ULL);
  EXPECT_EQ(CounterRandom(0xdeadbeef, 12345), 4428713531793673904ULL);
  EXPECT_EQ(CounterUniform(1, 2, 3), 0x1.ab1736f140284p-4);
  EXPECT_EQ(CounterUniform(42, 1000, 49151), 0x1.e479a77404188p-1);
  // The sampler's per-position key gives the same draws.
  for (int32_t token : {0, 3, 49151}) {
    EXPECT_EQ(kernels::KeyedUniform(kernels::PositionKey(7, 99), token),
              CounterUniform(7, 99, token));
  }
}

TEST(SamplerTest, ArgMaxTiesAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ArgMax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(ArgMax(std::vector<float>{nan, -5, nan}), 1);
  EXPECT_EQ(ArgMax(std::vector<float>{7}), 0);
}

// ArgMax scans in blocks: the first index of the largest value, whatever
// the length, the block the ties fall in, NaN, infinities and signed zeros.
TEST(SamplerTest, ArgMaxEqualsTheFirstLargestInEveryLayout) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto first_largest = [](const std::vector<float>& x) {
    int32_t best = 0;
    for (size_t i = 1; i < x.size(); ++i) {
      const float b = std::isnan(x[best]) ? -INFINITY : x[best];
      if (x[i] > b) best = static_cast<int32_t>(i);
    }
    return best;
  };
  std::mt19937 rng(3);
  const float specials[] = {nan, inf, -inf, 0.0f, -0.0f, 2.0f};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<float> x(1 + rng() % 70);
    for (float& v : x) {
      v = static_cast<float>(static_cast<int>(rng() % 5) - 2);  // ties
      if (rng() % 4 == 0) v = specials[rng() % 6];
    }
    if (trial % 50 == 0) std::fill(x.begin(), x.end(), -inf);
    if (trial % 50 == 1) std::fill(x.begin(), x.end(), nan);
    ASSERT_EQ(ArgMax(x), first_largest(x)) << "trial " << trial;
  }
}

TEST(SamplerTest, GreedyAndTopK1AreArgMax) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(300);
    for (float& x : logits) x = normal(rng);
    const int32_t best = ArgMax(logits);
    EXPECT_EQ(SampleToken(logits, SamplingParams{}, trial), best);
    SamplingParams k1;
    k1.temperature = 1.5f;
    k1.top_k = 1;
    k1.seed = trial;
    EXPECT_EQ(SampleToken(logits, k1, trial), best);
    SamplingParams tiny_p;
    tiny_p.temperature = 1.0f;
    tiny_p.top_p = 1e-6f;
    EXPECT_EQ(SampleToken(logits, tiny_p, trial), best);
  }
}

// Empirical frequencies over many positions follow the (truncated) softmax.
void CheckDistribution(const SamplingParams& base,
                       const std::vector<float>& logits,
                       const std::vector<double>& want) {
  const int n = 60000;
  std::vector<int> counts(logits.size(), 0);
  SamplingParams p = base;
  for (int i = 0; i < n; ++i) ++counts[SampleToken(logits, p, i)];
  for (size_t t = 0; t < logits.size(); ++t) {
    const double sd = std::sqrt(n * want[t] * (1 - want[t])) + 1;
    EXPECT_NEAR(counts[t], n * want[t], 5 * sd) << "token " << t;
    if (want[t] == 0) {
      EXPECT_EQ(counts[t], 0);
    }
  }
}

TEST(SamplerTest, FollowsTemperatureTopKTopP) {
  const std::vector<float> logits = {2.0f,  1.0f, 0.5f, 0.4f,
                                     -1.0f, 3.0f, 0.0f, 1.2f};
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 42;
  CheckDistribution(p, logits, Softmax(logits, 0.8));

  // top_k = 3 keeps tokens 5, 0, 7.
  p.top_k = 3;
  std::vector<double> want(8, 0.0);
  {
    std::vector<float> kept = {logits[5], logits[0], logits[7]};
    auto s = Softmax(kept, 0.8);
    want[5] = s[0];
    want[0] = s[1];
    want[7] = s[2];
  }
  CheckDistribution(p, logits, want);

  // top_p: smallest prefix (by prob) reaching 0.8.
  p.top_k = 0;
  p.top_p = 0.8f;
  auto full = Softmax(logits, 0.8);
  std::vector<int> order = {5, 0, 7, 1, 2, 3, 6, 4};
  std::fill(want.begin(), want.end(), 0.0);
  double cum = 0;
  std::vector<int> kept;
  for (int t : order) {
    kept.push_back(t);
    cum += full[t];
    if (cum >= 0.8) break;
  }
  for (int t : kept) want[t] = full[t] / cum;
  CheckDistribution(p, logits, want);
}

TEST(SamplerTest, ReplaysBitForBitAndDependsOnSeed) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 2);
  std::vector<float> logits(49152);
  for (float& x : logits) x = normal(rng);
  SamplingParams a;
  a.temperature = 1.0f;
  a.top_p = 0.95f;
  a.top_k = 40;
  a.seed = 7;
  std::vector<int32_t> first, again;
  for (int pos = 0; pos < 200; ++pos)
    first.push_back(SampleToken(logits, a, pos));
  for (int pos = 0; pos < 200; ++pos)
    again.push_back(SampleToken(logits, a, pos));
  EXPECT_EQ(first, again);
  SamplingParams b = a;
  b.seed = 8;
  std::vector<int32_t> other;
  for (int pos = 0; pos < 200; ++pos)
    other.push_back(SampleToken(logits, b, pos));
  EXPECT_NE(first, other);
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 5u);
}

// Brute force: full sort, top-k, top-p prefix, Gumbel-max over all kept.
int32_t ReferenceSample(const std::vector<float>& raw, const SamplingParams& p,
                        int64_t position) {
  std::vector<float> logits = raw;
  for (float& x : logits) {
    if (std::isnan(x)) x = -std::numeric_limits<float>::infinity();
  }
  const int n = static_cast<int>(logits.size());
  std::vector<int32_t> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double max = logits[order[0]];
  auto z = [&](int32_t i) { return (logits[i] - max) / double(p.temperature); };
  int keep = p.top_k > 0 ? std::min(p.top_k, n) : n;
  if (p.top_p < 1.0f) {
    double denom = 0;
    for (int j = 0; j < keep; ++j) denom += std::exp(z(order[j]));
    double cum = 0;
    for (int j = 0; j < keep; ++j) {
      cum += std::exp(z(order[j]));
      if (cum >= p.top_p * denom) {
        keep = j + 1;
        break;
      }
    }
  }
  int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < keep; ++j) {
    const int32_t i = order[j];
    const double s =
        z(i) - std::log(-std::log(CounterUniform(p.seed, position, i)));
    if (best < 0 || s > best_score || (s == best_score && i < best)) {
      best = i;
      best_score = s;
    }
  }
  return best;
}

TEST(SamplerTest, MatchesBruteForceReference) {
  std::mt19937 rng(8);
  int disagreements = 0, trials = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int vocab = 1 + static_cast<int>(rng() % 3000);
    std::normal_distribution<float> normal(0, 1 + trial % 5);
    std::vector<float> logits(vocab);
    for (float& x : logits) {
      x = normal(rng);
      if (rng() % 50 == 0) x = std::round(x);  // ties
      if (rng() % 200 == 0) x = -std::numeric_limits<float>::infinity();
      if (rng() % 300 == 0) x = std::numeric_limits<float>::quiet_NaN();
    }
    SamplingParams p;
    p.temperature = 0.3f + 0.2f * (trial % 6);
    p.top_k = trial % 3 == 0 ? 1 + static_cast<int>(rng() % 100) : 0;
    p.top_p = trial % 2 == 0 ? 0.5f + 0.1f * (trial % 5) : 1.0f;
    p.seed = trial;
    ++trials;
    disagreements +=
        SampleToken(logits, p, trial) != ReferenceSample(logits, p, trial);
  }
  // Only a top-p cut landing within rounding of a token boundary may differ.
  EXPECT_LE(disagreements, 1) << "of " << trials;
}

// top_k alone has no rounding at all: the draw must equal the brute force's
// on every row. Few distinct values (with -0 and +0, NaN and -inf among them)
// put ties across the k-th place, where the lowest indices must be kept.
TEST(SamplerTest, TopKAloneMatchesBruteForceExactly) {
  std::mt19937 rng(11);
  const float kValues[] = {-0.0f,
                           0.0f,
                           std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::infinity(),
                           -2.5f,
                           -1.0f,
                           0.5f,
                           1.0f,
                           2.0f};
  for (int trial = 0; trial < 300; ++trial) {
    const int vocab = 2 + static_cast<int>(rng() % 5000);
    std::vector<float> logits(vocab);
    for (float& x : logits) {
      x = kValues[rng() % (sizeof(kValues) / sizeof(kValues[0]))];
      if (trial % 3 == 0) x += static_cast<float>(rng() % 4) * 1e-3f;
    }
    SamplingParams p;
    p.temperature = 0.5f + 0.5f * static_cast<float>(trial % 5);
    p.top_k = 1 + static_cast<int>(rng() % (vocab - 1));
    if (trial % 4 == 0) p.top_k = 1 + static_cast<int>(rng() % 8);
    p.seed = 1000 + trial;
    for (int64_t position = 0; position < 16; ++position) {
      ASSERT_EQ(SampleToken(logits, p, position),
                ReferenceSample(logits, p, position))
          << "vocab " << vocab << ", top_k " << p.top_k << ", temperature "
          << p.temperature << ", position " << position;
    }
  }
}

// Tree-verified and plain-decoded logits differ by float32 noise (~1e-5);
// the draw must almost never notice.
TEST(SamplerTest, RobustToTinyLogitNoise) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0, 3);
  std::uniform_real_distribution<float> jitter(-2e-5f, 2e-5f);
  int flips = 0;
  const int n = 1000;
  for (int pos = 0; pos < n; ++pos) {
    std::vector<float> logits(4096), noisy(4096);
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] = normal(rng);
      noisy[i] = logits[i] + jitter(rng);
    }
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_p = pos % 2 ? 1.0f : 0.9f;
    p.seed = 5;
    flips += SampleToken(logits, p, pos) != SampleToken(noisy, p, pos);
  }
  EXPECT_LE(flips, 1) << "of " << n;
}

TEST(SamplerTest, ValidateRejectsBadParams) {
  SamplingParams p;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
  p.top_p = 0.0f;
  EXPECT_THAT(ValidateSamplingParams(p).message(), HasSubstr("top_p"));
  p.top_p = 1.5f;
  EXPECT_EQ(ValidateSamplingParams(p).code(),
            absl::StatusCode::kInvalidArgument);
  p.top_p = 1.0f;
  p.top_k = -1;
  EXPECT_THAT(ValidateSamplingParams(p).message(), HasSubstr("top_k"));
  p.top_k = 0;
  p.temperature = std::numeric_limits<float>::infinity();
  EXPECT_THAT(ValidateSamplingParams(p).message(), HasSubstr("temperature"));
}

}  // namespace
}  // namespace lookahead::engine
