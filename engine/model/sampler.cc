#include "engine/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/counter_rng.h"

namespace lookahead::engine {
namespace {

// NaN sorts as -infinity so it never wins nor gets probability.
float Clean(float x) {
  return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
}

// Returns the smallest prefix of `candidates` in the order `before` whose
// softmax(z) probability (relative to all candidates) reaches top_p, as a
// set. O(n): weights are bucketed by z so that only the boundary bucket is
// sorted.
template <typename ZFn, typename Before>
std::vector<int32_t> Nucleus(const std::vector<int32_t>& candidates, ZFn z,
                             Before before, float top_p) {
  constexpr int kBins = 1024;
  double z_lo = 0.0, denom = 0.0;
  for (int32_t i : candidates) {
    if (!std::isinf(z(i))) z_lo = std::min(z_lo, z(i));
    denom += std::exp(z(i));
  }
  const double target = static_cast<double>(top_p) * denom;
  // Bin by z over the finite range [z_lo, 0]; monotone, so a higher bin
  // never holds a later token of the order. -inf (weight 0) goes to bin 0.
  auto bin = [&](int32_t i) {
    const double zi = z(i);
    if (std::isinf(zi)) return 0;
    if (!(z_lo < 0.0)) return kBins - 1;
    const int b = static_cast<int>((zi - z_lo) / -z_lo * kBins);
    return std::min(kBins - 1, std::max(0, b));
  };
  std::vector<double> bin_weight(kBins, 0.0);
  for (int32_t i : candidates) bin_weight[bin(i)] += std::exp(z(i));
  double cum = 0.0;
  int boundary = -1;
  for (int b = kBins - 1; b >= 0; --b) {
    if (cum + bin_weight[b] >= target) {
      boundary = b;
      break;
    }
    cum += bin_weight[b];
  }
  if (boundary < 0) return candidates;  // rounding: keep everything
  std::vector<int32_t> kept, edge;
  for (int32_t i : candidates) {
    const int b = bin(i);
    if (b > boundary) {
      kept.push_back(i);
    } else if (b == boundary) {
      edge.push_back(i);
    }
  }
  std::sort(edge.begin(), edge.end(), before);
  for (int32_t i : edge) {
    kept.push_back(i);
    cum += std::exp(z(i));
    if (cum >= target) break;
  }
  return kept;
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
  return kernels::CounterRandom(seed, counter);
}

double CounterUniform(uint64_t seed, int64_t position, int32_t token) {
  return kernels::CounterUniform(seed, position, token);
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
  const int32_t top = ArgMax(logits);
  const float max_logit = Clean(logits[top]);
  if (std::isinf(max_logit)) return top;
  // z(i) = (logit_i - max) / T <= 0; softmax(z) is the target distribution.
  auto z = [&](int32_t i) {
    return (static_cast<double>(Clean(logits[i])) - max_logit) * inv_t;
  };
  // The total order of candidates: logit desc, index asc.
  auto before = [&](int32_t a, int32_t b) {
    const float la = Clean(logits[a]);
    const float lb = Clean(logits[b]);
    return la > lb || (la == lb && a < b);
  };

  // Candidate set (empty = the whole vocabulary). `top` is always in it.
  std::vector<int32_t> candidates;
  if (params.top_k > 0 && params.top_k < vocab) {
    candidates.resize(vocab);
    std::iota(candidates.begin(), candidates.end(), 0);
    std::nth_element(candidates.begin(), candidates.begin() + params.top_k - 1,
                     candidates.end(), before);
    candidates.resize(params.top_k);
  }
  if (params.top_p < 1.0f) {
    if (candidates.empty()) {
      candidates.resize(vocab);
      std::iota(candidates.begin(), candidates.end(), 0);
    }
    candidates = Nucleus(candidates, z, before, params.top_p);
  }

  // Gumbel-max: argmax z_i + g_i with g_i = -log(-log(u_i)).
  auto gumbel = [&](int32_t i) {
    return -std::log(-std::log(CounterUniform(params.seed, position, i)));
  };
  int32_t best = top;
  double best_score = z(top) + gumbel(top);
  auto consider = [&](int32_t i) {
    if (i == top) return;
    const double d = best_score - z(i);  // i wins iff g_i > d (or ties)
    // g <= 38 always (u <= 1 - 2^-54), so large d needs no noise at all.
    if (d > 38.0) return;
    const double u = CounterUniform(params.seed, position, i);
    // Necessary for g_i >= d: u >= exp(-exp(-d)) >= 1 - exp(-d). The margin
    // keeps this shortcut exact despite rounding.
    if (d > 0.0 && u < 1.0 - std::exp(-d) - 1e-9) return;
    const double score = z(i) - std::log(-std::log(u));
    if (score > best_score || (score == best_score && i < best)) {
      best_score = score;
      best = i;
    }
  };
  if (candidates.empty()) {
    for (int32_t i = 0; i < vocab; ++i) consider(i);
  } else {
    for (int32_t i : candidates) consider(i);
  }
  return best;
}

}  // namespace lookahead::engine
