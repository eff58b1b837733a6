#include "engine/model/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "engine/model/sampler.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> RandomLogits(int vocab, uint32_t seed, float scale = 4.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = normal(rng);
  return logits;
}

// The oracle: log-softmax of logits / t over `support` (every token if
// empty), straight from the definition in long double.
std::vector<long double> DirectLogSoftmax(const std::vector<float>& logits,
                                          double t,
                                          std::vector<int32_t> support) {
  if (support.empty()) {
    for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
      support.push_back(i);
    }
  }
  long double m = -INFINITY;
  for (int32_t i : support) m = std::max<long double>(m, logits[i]);
  long double sum = 0;
  for (int32_t i : support) sum += std::exp((logits[i] - m) / t);
  std::vector<long double> lp(logits.size(), -INFINITY);
  for (int32_t i : support) lp[i] = (logits[i] - m) / t - std::log(sum);
  return lp;
}

// A float logprob against the oracle: within float rounding.
void ExpectClose(float got, long double want) {
  const double w = static_cast<double>(want);
  EXPECT_NEAR(got, w, 1e-6 * std::max(1.0, std::abs(w)));
}

// Every token of `logits` by (logit desc, index asc).
std::vector<int32_t> Ranked(const std::vector<float>& logits) {
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return order;
}

TEST(TokenLogprobsTest, GreedyIsTheModelsLogSoftmax) {
  const std::vector<float> logits = RandomLogits(5000, 1);
  const std::vector<long double> want = DirectLogSoftmax(logits, 1.0, {});
  const int32_t top = ArgMax(logits);
  const ChoiceLogprobs got =
      LogprobsOfChoice(logits, SamplingParams{}, top, kMaxTopLogprobs);
  EXPECT_EQ(got.chosen.token, top);
  ExpectClose(got.chosen.logprob, want[top]);
  ASSERT_EQ(got.top.size(), static_cast<size_t>(kMaxTopLogprobs));
  const std::vector<int32_t> ranked = Ranked(logits);
  for (int k = 0; k < kMaxTopLogprobs; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(got.top[k].token, ranked[k]);
    ExpectClose(got.top[k].logprob, want[ranked[k]]);
    EXPECT_LE(got.top[k].logprob, 0.0f);
  }
  // Greedy: the chosen token ranks first with the same value.
  EXPECT_EQ(got.top[0].token, top);
  EXPECT_EQ(got.top[0].logprob, got.chosen.logprob);
  // Any other chosen token gets its own value; top_n 0 lists none.
  const ChoiceLogprobs other = LogprobsOfChoice(logits, {}, 17, 0);
  ExpectClose(other.chosen.logprob, want[17]);
  EXPECT_TRUE(other.top.empty());
}

TEST(TokenLogprobsTest, TiesGoToTheLowerIndex) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  const ChoiceLogprobs got = LogprobsOfChoice(logits, {}, 1, 4);
  ASSERT_EQ(got.top.size(), 4u);
  EXPECT_EQ(got.top[0].token, 1);
  EXPECT_EQ(got.top[1].token, 2);
  EXPECT_EQ(got.top[2].token, 4);
  EXPECT_EQ(got.top[3].token, 3);
  EXPECT_EQ(got.top[0].logprob, got.top[1].logprob);
  EXPECT_EQ(got.top[1].logprob, got.top[2].logprob);
  EXPECT_LT(got.top[3].logprob, got.top[2].logprob);
  // Equal logits, equal values: 3 x e^3 + e^2 + e^1 + e^-1.
  const double sum =
      3 * std::exp(3.0) + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_NEAR(got.chosen.logprob, 3.0 - std::log(sum), 1e-6);
}

TEST(TokenLogprobsTest, SampledIsTheRenormalizedCandidateSet) {
  const std::vector<float> logits = RandomLogits(3000, 2);
  struct Case {
    float temperature;
    int top_k;
    float top_p;
  };
  for (const Case& c : {Case{0.7f, 0, 1.0f}, Case{1.3f, 5, 1.0f},
                        Case{0.9f, 0, 0.6f}, Case{0.8f, 40, 0.95f}}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.temperature << " k "
                                      << c.top_k << " p " << c.top_p);
    SamplingParams params;
    params.temperature = c.temperature;
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.seed = 99;
    const std::vector<int32_t> support = SamplingCandidates(logits, params);
    const std::set<int32_t> in(support.begin(), support.end());
    if (c.top_k > 0) {
      EXPECT_LE(support.size(), static_cast<size_t>(c.top_k));
    }
    if (c.top_k == 0 && c.top_p == 1.0f) {
      EXPECT_TRUE(support.empty());
    }
    const std::vector<long double> want =
        DirectLogSoftmax(logits, c.temperature, support);
    for (int64_t position = 0; position < 50; ++position) {
      const int32_t token = SampleToken(logits, params, position);
      if (!support.empty()) {
        ASSERT_TRUE(in.count(token)) << token;
      }
      const ChoiceLogprobs got =
          LogprobsOfChoice(logits, params, token, kMaxTopLogprobs);
      ExpectClose(got.chosen.logprob, want[token]);
      EXPECT_TRUE(std::isfinite(got.chosen.logprob));
    }
    const ChoiceLogprobs got = LogprobsOfChoice(
        logits, params, support.empty() ? 0 : support[0], kMaxTopLogprobs);
    // Alternatives only from the set, best first, each as the oracle says.
    EXPECT_EQ(got.top.size(),
              std::min<size_t>(kMaxTopLogprobs,
                               support.empty() ? logits.size() : in.size()));
    for (size_t k = 0; k < got.top.size(); ++k) {
      if (!support.empty()) {
        EXPECT_TRUE(in.count(got.top[k].token));
      }
      ExpectClose(got.top[k].logprob, want[got.top[k].token]);
      if (k > 0) {
        EXPECT_GE(got.top[k - 1].logprob, got.top[k].logprob);
      }
    }
    // The set's probabilities sum to 1.
    if (!support.empty() && support.size() <= kMaxTopLogprobs) {
      double total = 0;
      for (const TokenLogprob& t : got.top) total += std::exp(t.logprob);
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
    // A token outside the set has probability 0.
    for (int32_t i = 0; !support.empty() && i < 3000; ++i) {
      if (in.count(i)) continue;
      EXPECT_EQ(LogprobsOfChoice(logits, params, i, 0).chosen.logprob, -kInf);
      break;
    }
  }
}

TEST(TokenLogprobsTest, AFunctionOfTheRowAlone) {
  // The same row at another address, inside a larger buffer: same bits.
  const std::vector<float> logits = RandomLogits(4097, 3);
  std::vector<float> buffer(3 * logits.size());
  std::copy(logits.begin(), logits.end(), buffer.begin() + logits.size());
  const absl::Span<const float> row(buffer.data() + logits.size(),
                                    logits.size());
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.95f;
  for (const SamplingParams& params : {SamplingParams{}, sampled}) {
    const ChoiceLogprobs a = LogprobsOfChoice(logits, params, 5, 7);
    const ChoiceLogprobs b = LogprobsOfChoice(row, params, 5, 7);
    EXPECT_EQ(a.chosen.logprob, b.chosen.logprob);
    ASSERT_EQ(a.top.size(), b.top.size());
    for (size_t k = 0; k < a.top.size(); ++k) {
      EXPECT_EQ(a.top[k].token, b.top[k].token);
      EXPECT_EQ(a.top[k].logprob, b.top[k].logprob);
    }
  }
}

TEST(TokenLogprobsTest, NonFiniteLogits) {
  // NaN and -inf get probability 0 and are never listed.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> some = {nan, 0.0f, -kInf, 0.0f};
  const ChoiceLogprobs got = LogprobsOfChoice(some, {}, 1, 4);
  EXPECT_NEAR(got.chosen.logprob, -std::log(2.0), 1e-7);
  ASSERT_EQ(got.top.size(), 2u);
  EXPECT_EQ(got.top[0].token, 1);
  EXPECT_EQ(got.top[1].token, 3);
  EXPECT_EQ(LogprobsOfChoice(some, {}, 0, 0).chosen.logprob, -kInf);
  // An infinite largest logit is a point mass on ArgMax.
  const std::vector<float> inf = {1.0f, kInf, kInf};
  const ChoiceLogprobs mass = LogprobsOfChoice(inf, {}, 1, 3);
  EXPECT_EQ(mass.chosen.logprob, 0.0f);
  ASSERT_EQ(mass.top.size(), 1u);
  EXPECT_EQ(mass.top[0].token, 1);
  EXPECT_EQ(LogprobsOfChoice(inf, {}, 2, 0).chosen.logprob, -kInf);
  const std::vector<float> none = {nan, -kInf};
  EXPECT_EQ(LogprobsOfChoice(none, {}, 0, 1).chosen.logprob, 0.0f);
}

}  // namespace
}  // namespace lookahead::engine
