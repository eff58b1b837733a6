// Token selection from one row of logits: greedy argmax, or seeded sampling
// with temperature / top-k / top-p driven by a counter-based RNG.
//
// Sampling is Gumbel-max: the token at absolute position p is
// argmax_t (logit_t / temperature + G(seed, p, t)) over the top-k/top-p set,
// where G is Gumbel noise that is a pure function of (seed, p, t). This draws
// exactly from softmax(logits / temperature) restricted to that set, every
// run replays bit for bit, and a sequence decoded one token at a time and the
// same sequence verified as a draft tree draw the same noise, which is what
// makes seeded speculative decoding lossless. Unlike an inverse-CDF draw
// (whose cumulative sum over the whole vocabulary moves with float32 noise in
// the logits), the choice only flips when the top two noisy scores tie within
// that noise, as rare as a greedy near-tie. All functions are pure;
// thread-safe.
#ifndef LOOKAHEAD_ENGINE_MODEL_SAMPLER_H_
#define LOOKAHEAD_ENGINE_MODEL_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace lookahead::engine {

struct SamplingParams {
  // Softmax temperature. <= 0 (default) selects greedy argmax and ignores the
  // other fields. Higher is more random.
  float temperature = 0.0f;
  // Keep only the k most likely tokens; 0 (default) disables.
  int32_t top_k = 0;
  // Keep the smallest most-likely set whose probability reaches top_p
  // (nucleus sampling); 1.0 (default) disables. Must be in (0, 1].
  float top_p = 1.0f;
  // Request seed; with the token position it fully determines the draw.
  uint64_t seed = 0;

  bool greedy() const { return !(temperature > 0.0f); }
};

// Returns OK iff params are usable: temperature finite, top_k >= 0,
// 0 < top_p <= 1. Otherwise INVALID_ARGUMENT naming the field.
absl::Status ValidateSamplingParams(const SamplingParams& params);

// Counter-based RNG: returns 64 random bits that depend only on
// (seed, counter) (SplitMix64 finalizer applied to a keyed counter).
uint64_t CounterRandom(uint64_t seed, uint64_t counter);

// Returns a uniform double in (0, 1) keyed by (seed, position, token):
// (53 random bits + 0.5) / 2^53, so never 0 or 1.
double CounterUniform(uint64_t seed, int64_t position, int32_t token);

// Returns the index of the largest logit; ties go to the lowest index, NaN
// never wins. REQUIRES: !logits.empty().
int32_t ArgMax(absl::Span<const float> logits);

// The candidate set SampleToken draws from for `logits` (one row): the
// top_k tokens by (logit desc, index asc), cut to the smallest prefix whose
// probability reaches top_p, as a set (in no particular order). Empty means
// the whole vocabulary (neither cut applies); greedy params, or a row whose
// largest logit is infinite, give {ArgMax(logits)}.
// REQUIRES: ValidateSamplingParams(params).ok(), !logits.empty().
std::vector<int32_t> SamplingCandidates(absl::Span<const float> logits,
                                        const SamplingParams& params);

// Selects the token at absolute position `position` from `logits` (one row,
// size = vocab). Greedy params: ArgMax. Otherwise the candidates are the
// top_k tokens by (logit desc, index asc), cut to the smallest prefix whose
// probability reaches top_p, and the token is the Gumbel-max winner among
// them (ties to the lower index). All arithmetic in double.
// REQUIRES: ValidateSamplingParams(params).ok(), !logits.empty().
int32_t SampleToken(absl::Span<const float> logits,
                    const SamplingParams& params, int64_t position);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_SAMPLER_H_
