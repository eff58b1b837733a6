// Log-probabilities of a chosen token and of its most likely alternatives,
// from the one row of logits the token was chosen from: what a server
// reports as OpenAI's `logprobs` / `top_logprobs`.
//
// The distribution is the one the token was drawn from (SampleToken):
//   * greedy params: log-softmax of the raw logits over the whole vocabulary
//     (the model's own distribution);
//   * sampling: log-softmax of logits / temperature restricted to the top-k /
//     top-p candidate set (SamplingCandidates) and renormalized over it;
//     tokens outside the set have probability 0 and are never listed as
//     alternatives.
// (vLLM's default reports the raw model distribution whatever the sampling
// params; this reports the processed one, which is what the draw used.)
//
// All arithmetic is in double, summed in token-index order, so a value is a
// pure function of the row's logits and the params: the same row verified
// alone or inside a draft tree gives the same bits. Pure functions;
// thread-safe.
#ifndef LOOKAHEAD_ENGINE_MODEL_TOKEN_LOGPROBS_H_
#define LOOKAHEAD_ENGINE_MODEL_TOKEN_LOGPROBS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/model/sampler.h"

namespace lookahead::engine {

// Most alternatives a request may ask for per token (OpenAI's top_logprobs
// limit).
inline constexpr int kMaxTopLogprobs = 20;

// A token and its log-probability (<= 0; -infinity for probability 0).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

// One chosen token's report: its own log-probability and the most likely
// tokens at its position.
struct ChoiceLogprobs {
  TokenLogprob chosen;
  // At most top_n tokens of non-zero probability, by (logprob desc, token
  // asc); the chosen token is among them only if it ranks there.
  std::vector<TokenLogprob> top;
};

// The log-probabilities of `chosen` and of the `top_n` most likely tokens
// under the distribution SampleToken(logits, params, ·) draws from (see the
// file comment). A row whose largest logit is infinite (or that is all NaN
// / -inf) is a point mass on ArgMax(logits), as SampleToken treats it.
// REQUIRES: ValidateSamplingParams(params).ok(), !logits.empty(),
// 0 <= chosen < logits.size(), 0 <= top_n <= kMaxTopLogprobs.
ChoiceLogprobs LogprobsOfChoice(absl::Span<const float> logits,
                                const SamplingParams& params, int32_t chosen,
                                int top_n);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_TOKEN_LOGPROBS_H_
