// Token selection from one row of logits: greedy argmax, or seeded sampling
// with temperature / top-k / top-p driven by a counter-based RNG.
//
// The random number used to draw the token at absolute position p of a request
// is a pure function of (seed, p) (CounterUniform). So a sequence decoded one
// token at a time and the same sequence verified as a draft tree draw the same
// uniforms, which is what makes seeded speculative decoding lossless and every
// run replayable bit for bit. All functions are pure; thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_SAMPLER_H_
#define LOOKAHEAD_VERIFYSVC_SAMPLER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace lookahead {
namespace verifysvc {

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

// Returns a uniform double in [0, 1) keyed by (seed, position): the 53 high
// bits of CounterRandom(seed, position).
double CounterUniform(uint64_t seed, int64_t position);

// Returns the index of the largest logit; ties go to the lowest index, NaN
// never wins. REQUIRES: !logits.empty().
int32_t ArgMax(absl::Span<const float> logits);

// Selects the token at absolute position `position` from `logits` (one row,
// size = vocab). Greedy params: ArgMax. Otherwise the tokens are ordered by
// (logit desc, index asc), cut by top_k then top_p, and the token is drawn by
// inverse CDF with u = CounterUniform(seed, position), all in double.
// REQUIRES: ValidateSamplingParams(params).ok(), !logits.empty().
int32_t SampleToken(absl::Span<const float> logits,
                    const SamplingParams& params, int64_t position);

}  // namespace verifysvc
}  // namespace lookahead

#endif  // LOOKAHEAD_VERIFYSVC_SAMPLER_H_
