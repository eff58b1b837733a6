#include "engine/model/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lookahead::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// NaN counts as -infinity, as in the sampler: it never wins nor gets
// probability.
float Clean(float x) { return std::isnan(x) ? kNegInf : x; }

// The order of alternatives: logprob desc, token asc.
bool Before(const TokenLogprob& a, const TokenLogprob& b) {
  return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
}

}  // namespace

ChoiceLogprobs LogprobsOfChoice(absl::Span<const float> logits,
                                const SamplingParams& params, int32_t chosen,
                                int top_n) {
  ChoiceLogprobs out;
  out.chosen.token = chosen;
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const int32_t top = ArgMax(logits);
  const float max_logit = Clean(logits[top]);
  if (std::isinf(max_logit)) {
    // A point mass on `top`, the token every selection picks here.
    out.chosen.logprob = chosen == top ? 0.0f : kNegInf;
    if (top_n > 0) out.top.push_back({top, 0.0f});
    return out;
  }
  // z(i) = (logit_i - max) / T <= 0 (T = 1 for greedy), as the sampler
  // computes it; the distribution is softmax(z) over the support.
  const double inv_t =
      params.greedy() ? 1.0 : 1.0 / static_cast<double>(params.temperature);
  auto z = [&](int32_t i) {
    return (static_cast<double>(Clean(logits[i])) - max_logit) * inv_t;
  };
  // The support in index order; empty = the whole vocabulary.
  std::vector<int32_t> support;
  if (!params.greedy()) {
    support = SamplingCandidates(logits, params);
    std::sort(support.begin(), support.end());
  }
  const bool everything = support.empty();
  const int32_t size =
      everything ? vocab : static_cast<int32_t>(support.size());
  auto token_at = [&](int32_t j) { return everything ? j : support[j]; };
  // The normalizer, summed in index order (>= 1: `top` is in the support).
  double sum = 0;
  for (int32_t j = 0; j < size; ++j) sum += std::exp(z(token_at(j)));
  const double log_sum = std::log(sum);
  auto logprob = [&](int32_t i) { return static_cast<float>(z(i) - log_sum); };

  const bool chosen_in =
      everything || std::binary_search(support.begin(), support.end(), chosen);
  out.chosen.logprob = chosen_in ? logprob(chosen) : kNegInf;
  if (top_n <= 0) return out;
  // The top_n by Before, kept sorted; tokens come in index order, so an
  // equal logprob never displaces an earlier token.
  out.top.reserve(top_n + 1);
  for (int32_t j = 0; j < size; ++j) {
    const TokenLogprob entry{token_at(j), logprob(token_at(j))};
    if (entry.logprob == kNegInf) continue;  // probability 0
    if (static_cast<int>(out.top.size()) == top_n &&
        !Before(entry, out.top.back())) {
      continue;
    }
    out.top.insert(
        std::upper_bound(out.top.begin(), out.top.end(), entry, Before), entry);
    if (static_cast<int>(out.top.size()) > top_n) out.top.pop_back();
  }
  return out;
}

}  // namespace lookahead::engine
