#include "engine/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/counter_rng.h"
#include "kernels/cpu/gumbel_scan.h"

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
  // z and exp(z) once per candidate (each is used up to three times).
  const size_t n = candidates.size();
  std::vector<double> zs(n), weights(n);
  double z_lo = 0.0, denom = 0.0;
  for (size_t j = 0; j < n; ++j) {
    zs[j] = z(candidates[j]);
    weights[j] = std::exp(zs[j]);
    if (!std::isinf(zs[j])) z_lo = std::min(z_lo, zs[j]);
    denom += weights[j];
  }
  const double target = static_cast<double>(top_p) * denom;
  // Bin by z over the finite range [z_lo, 0]; monotone, so a higher bin
  // never holds a later token of the order. -inf (weight 0) goes to bin 0.
  auto bin = [&](size_t j) {
    const double zi = zs[j];
    if (std::isinf(zi)) return 0;
    if (!(z_lo < 0.0)) return kBins - 1;
    const int b = static_cast<int>((zi - z_lo) / -z_lo * kBins);
    return std::min(kBins - 1, std::max(0, b));
  };
  std::vector<double> bin_weight(kBins, 0.0);
  for (size_t j = 0; j < n; ++j) bin_weight[bin(j)] += weights[j];
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
  std::vector<int32_t> kept;
  std::vector<std::pair<int32_t, double>> edge;  // (token, exp(z))
  for (size_t j = 0; j < n; ++j) {
    const int b = bin(j);
    if (b > boundary) {
      kept.push_back(candidates[j]);
    } else if (b == boundary) {
      edge.emplace_back(candidates[j], weights[j]);
    }
  }
  std::sort(edge.begin(), edge.end(),
            [&](const std::pair<int32_t, double>& a,
                const std::pair<int32_t, double>& b) {
              return before(a.first, b.first);
            });
  for (const auto& [token, weight] : edge) {
    kept.push_back(token);
    cum += weight;
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
  // The largest value, in kLanes running maxima the compiler vectorizes (a
  // NaN never compares greater); then its first index, a block at a time.
  // If every value is -inf or NaN, all tie at -inf and index 0 wins. Which
  // of -0 and +0 a lane keeps does not matter: they compare equal.
  constexpr size_t kLanes = 16;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const float* x = logits.data();
  const size_t n = logits.size();
  float lane[kLanes];
  std::fill(lane, lane + kLanes, kNegInf);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    }
  }
  for (; i < n; ++i) lane[0] = x[i] > lane[0] ? x[i] : lane[0];
  float best = kNegInf;
  for (size_t j = 0; j < kLanes; ++j) best = lane[j] > best ? lane[j] : best;
  if (best == kNegInf) return 0;
  for (i = 0; i + kLanes <= n; i += kLanes) {
    bool hit = false;
    for (size_t j = 0; j < kLanes; ++j) hit |= x[i + j] == best;
    if (hit) break;
  }
  for (; i < n; ++i) {
    if (x[i] == best) return static_cast<int32_t>(i);
  }
  return 0;  // not reached: best is one of the logits
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
  const uint64_t key = kernels::PositionKey(params.seed, position);
  auto gumbel = [&](int32_t i) {
    return -std::log(-std::log(kernels::KeyedUniform(key, i)));
  };
  int32_t best = top;
  double best_score = z(top) + gumbel(top);
  auto consider = [&](int32_t i) {
    if (i == top) return;
    const double d = best_score - z(i);  // i wins iff g_i > d (or ties)
    // g <= 38 always (u <= 1 - 2^-54), so large d needs no noise at all.
    if (d > 38.0) return;
    const double u = kernels::KeyedUniform(key, i);
    if (kernels::GumbelSkips(d, u)) return;
    const double score = z(i) - std::log(-std::log(u));
    if (score > best_score || (score == best_score && i < best)) {
      best_score = score;
      best = i;
    }
  };
  if (candidates.empty()) {
    // The whole vocabulary, a chunk at a time: GumbelSurvivors drops the
    // tokens that cannot beat the best score so far (8 at a time where the
    // CPU allows), and the rest go through `consider` in index order. The
    // best score only grows, and the skip test is monotone in the margin,
    // so `consider` would have skipped every dropped token too.
    constexpr int32_t kChunk = 2048;
    int32_t survivors[kChunk];
    for (int32_t begin = 0; begin < vocab; begin += kChunk) {
      const int32_t count = kernels::GumbelSurvivors(
          logits.data(), begin, std::min(vocab, begin + kChunk), max_logit,
          inv_t, best_score, key, survivors);
      for (int32_t j = 0; j < count; ++j) consider(survivors[j]);
    }
  } else {
    for (int32_t i : candidates) consider(i);
  }
  return best;
}

}  // namespace lookahead::engine
