#include "verifysvc/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lookahead {
namespace verifysvc {
namespace {

uint64_t SplitMix64Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// NaN sorts as -infinity so it never wins nor gets probability.
float Clean(float x) {
  return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& params) {
  if (!std::isfinite(params.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite, got ", params.temperature));
  }
  if (params.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be >= 0, got ", params.top_k));
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p must be in (0, 1], got ", params.top_p));
  }
  return absl::OkStatus();
}

uint64_t CounterRandom(uint64_t seed, uint64_t counter) {
  // Two rounds: the seed is whitened first so that nearby seeds give
  // unrelated streams, then combined with the counter's golden-ratio step.
  const uint64_t key = SplitMix64Finalize(seed + 0x9e3779b97f4a7c15ULL);
  return SplitMix64Finalize(
      key ^ (counter * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
}

double CounterUniform(uint64_t seed, int64_t position, int32_t token) {
  const uint64_t stream = CounterRandom(seed, static_cast<uint64_t>(position));
  const uint64_t bits = CounterRandom(
      stream, static_cast<uint64_t>(static_cast<uint32_t>(token)));
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

int32_t ArgMax(absl::Span<const float> logits) {
  int32_t best = 0;
  float best_value = Clean(logits[0]);
  for (size_t i = 1; i < logits.size(); ++i) {
    const float v = Clean(logits[i]);
    if (v > best_value) {
      best_value = v;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

int32_t SampleToken(absl::Span<const float> logits,
                    const SamplingParams& params, int64_t position) {
  if (params.greedy()) return ArgMax(logits);
  const int vocab = static_cast<int>(logits.size());
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  const int32_t best_logit_index = ArgMax(logits);
  const float max_logit = Clean(logits[best_logit_index]);
  if (std::isinf(max_logit)) return best_logit_index;
  // z(i) = (logit_i - max) / T <= 0; softmax(z) is the target distribution.
  auto z = [&](int32_t i) {
    return (static_cast<double>(Clean(logits[i])) - max_logit) * inv_t;
  };
  // Gumbel noise -log(-log(u)) for u in (0, 1) as CounterUniform makes it is
  // at most -log(-log(1 - 2^-54)) < 38: tokens with z + 38 below the best
  // score so far cannot win and need no noise (an exact shortcut).
  constexpr double kMaxGumbel = 38.0;
  auto gumbel = [&](int32_t i) {
    return -std::log(-std::log(CounterUniform(params.seed, position, i)));
  };
  int32_t best = best_logit_index;
  double best_score = z(best) + gumbel(best);
  auto consider = [&](int32_t i) {
    const double zi = z(i);
    if (zi + kMaxGumbel < best_score || i == best_logit_index) return;
    const double score = zi + gumbel(i);
    if (score > best_score || (score == best_score && i < best)) {
      best_score = score;
      best = i;
    }
  };

  const bool truncate =
      (params.top_k > 0 && params.top_k < vocab) || params.top_p < 1.0f;
  if (!truncate) {
    for (int32_t i = 0; i < vocab; ++i) consider(i);
    return best;
  }

  // Candidate set: a prefix of the total order (logit desc, index asc). Sort
  // only as long a prefix as the cut needs; a prefix of a total order is
  // unique, so this is deterministic.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    const float la = Clean(logits[a]);
    const float lb = Clean(logits[b]);
    return la > lb || (la == lb && a < b);
  };
  auto weight = [&](int32_t i) { return std::exp(z(i)); };
  const int k_cap =
      (params.top_k > 0 && params.top_k < vocab) ? params.top_k : vocab;
  double total_all = 0.0;
  if (k_cap == vocab) {
    for (int32_t i = 0; i < vocab; ++i) total_all += weight(i);
  }
  // Probabilities are relative to the top-k set when top_k applies.
  int sorted = k_cap < vocab ? k_cap : std::min(64, vocab);
  int keep = 0;
  while (true) {
    std::partial_sort(order.begin(), order.begin() + sorted, order.end(),
                      before);
    double denom = total_all;
    if (k_cap < vocab) {
      denom = 0.0;
      for (int j = 0; j < k_cap; ++j) denom += weight(order[j]);
    }
    double cum = 0.0;
    bool reached = false;
    for (int j = 0; j < sorted && !reached; ++j) {
      cum += weight(order[j]);
      keep = j + 1;
      reached = params.top_p < 1.0f && cum >= params.top_p * denom;
    }
    if (reached || sorted == k_cap) break;
    sorted = std::min(sorted * 8, k_cap);
  }
  // order[0] is the argmax (same tie rule), already scored.
  for (int j = 1; j < keep; ++j) consider(order[j]);
  return best;
}

}  // namespace verifysvc
}  // namespace lookahead
