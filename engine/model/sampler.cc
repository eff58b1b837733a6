#include "engine/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
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
  // z, exp(z) and the bin once per candidate, in buffers this thread keeps:
  // a vocabulary's worth is ~0.9 MiB, which malloc would map and fault in
  // afresh on every call.
  const size_t n = candidates.size();
  thread_local std::vector<double> zs, weights;
  thread_local std::vector<int16_t> bins;
  zs.resize(n);
  weights.resize(n);
  bins.resize(n);
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
  double bin_weight[kBins] = {};
  for (size_t j = 0; j < n; ++j) {
    bins[j] = static_cast<int16_t>(bin(j));
    bin_weight[bins[j]] += weights[j];
  }
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
    const int b = bins[j];
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

// 0, 1, ..., vocab - 1, from a list this thread keeps (see Nucleus's
// buffers).
const std::vector<int32_t>& EveryToken(int vocab) {
  thread_local std::vector<int32_t> every;
  if (every.size() != static_cast<size_t>(vocab)) {
    every.resize(vocab);
    std::iota(every.begin(), every.end(), 0);
  }
  return every;
}

// An order-preserving key of a logit: a > b as floats iff Key(a) > Key(b),
// and equal floats have equal keys (-0 is +0; NaN is -inf, as in Clean).
// Integer selects only: logits' signs are a coin toss, and a branch on them
// would mispredict every other token.
inline uint32_t Key(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits = (bits & 0x7fffffffu) > 0x7f800000u ? 0xff800000u : bits;  // NaN
  bits = bits == 0x80000000u ? 0u : bits;                          // -0
  // Negative: flip every bit; otherwise: set the sign bit.
  const uint32_t negative =
      static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31);
  return bits ^ (negative | 0x80000000u);
}

// Whether any of the kLanes logits from x has a key of at least `least`: a
// fixed-width loop the compiler vectorizes, so that blocks with nothing to
// do cost a few instructions.
constexpr int kLanes = 16;
inline bool AnyKeyAtLeast(const float* x, uint32_t least) {
  bool hit = false;
  for (int j = 0; j < kLanes; ++j) hit |= Key(x[j]) >= least;
  return hit;
}

// The first k tokens in the order (logit desc, index asc), as a set in index
// order, for 0 < k < logits.size(): every token whose key is above the k-th
// largest key, then the lowest-indexed ones equal to it. The k-th largest
// key comes from a min-heap of the k largest keys seen (a key enters only if
// it beats the heap's least, rarely once the heap holds the top, so most
// blocks of tokens are skipped whole) or, for large k, a selection over a
// copy.
std::vector<int32_t> TopK(absl::Span<const float> logits, int k) {
  const int n = static_cast<int>(logits.size());
  const float* x = logits.data();
  uint32_t kth;
  if (k <= 256) {
    std::vector<uint32_t> heap(k);
    for (int i = 0; i < k; ++i) heap[i] = Key(x[i]);
    std::make_heap(heap.begin(), heap.end(), std::greater<uint32_t>());
    auto offer = [&](int i) {
      const uint32_t key = Key(x[i]);
      if (key <= heap.front()) return;
      std::pop_heap(heap.begin(), heap.end(), std::greater<uint32_t>());
      heap.back() = key;
      std::push_heap(heap.begin(), heap.end(), std::greater<uint32_t>());
    };
    int i = k;
    for (; i + kLanes <= n; i += kLanes) {
      // heap.front() + 1 cannot wrap: NaN has -inf's key, so no key is
      // above +inf's (0xff800000).
      if (!AnyKeyAtLeast(x + i, heap.front() + 1)) continue;
      for (int j = i; j < i + kLanes; ++j) offer(j);
    }
    for (; i < n; ++i) offer(i);
    kth = heap.front();
  } else {
    std::vector<uint32_t> keys(n);
    for (int i = 0; i < n; ++i) keys[i] = Key(x[i]);
    std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(),
                     std::greater<uint32_t>());
    kth = keys[k - 1];
  }
  // One pass: the tokens above kth, and the first k tokens equal to it (no
  // more can be needed); then as many ties as fit, merged in index order.
  std::vector<int32_t> above, ties;
  above.reserve(k);
  ties.reserve(k);
  auto take = [&](int i) {
    const uint32_t key = Key(x[i]);
    if (key > kth) {
      above.push_back(i);
    } else if (key == kth && static_cast<int>(ties.size()) < k) {
      ties.push_back(i);
    }
  };
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    if (!AnyKeyAtLeast(x + i, kth)) continue;
    for (int j = i; j < i + kLanes; ++j) take(j);
  }
  for (; i < n; ++i) take(i);
  ties.resize(k - above.size());
  std::vector<int32_t> candidates(k);
  std::merge(above.begin(), above.end(), ties.begin(), ties.end(),
             candidates.begin());
  return candidates;
}

// SamplingCandidates for a row whose largest logit, at `top`, is finite.
std::vector<int32_t> Candidates(absl::Span<const float> logits,
                                const SamplingParams& params, int32_t top) {
  const int vocab = static_cast<int>(logits.size());
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  const float max_logit = Clean(logits[top]);
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
    if (params.top_p >= 1.0f) {
      // Only the set matters here: the draw below does not depend on the
      // order candidates are considered in.
      candidates = TopK(logits, params.top_k);
    } else {
      // Nucleus sums the candidates' weights in this order: it stays
      // nth_element's, so a top-p cut rounds as it always did.
      candidates.resize(vocab);
      std::iota(candidates.begin(), candidates.end(), 0);
      std::nth_element(candidates.begin(),
                       candidates.begin() + params.top_k - 1, candidates.end(),
                       before);
      candidates.resize(params.top_k);
    }
  }
  if (params.top_p < 1.0f) {
    candidates = Nucleus(candidates.empty() ? EveryToken(vocab) : candidates, z,
                         before, params.top_p);
  }
  return candidates;
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

std::vector<int32_t> SamplingCandidates(absl::Span<const float> logits,
                                        const SamplingParams& params) {
  const int32_t top = ArgMax(logits);
  if (params.greedy() || std::isinf(Clean(logits[top]))) return {top};
  return Candidates(logits, params, top);
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
  const std::vector<int32_t> candidates = Candidates(logits, params, top);

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
