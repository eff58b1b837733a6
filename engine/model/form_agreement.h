// How closely a model in one compute form follows the same weights in
// another (int8 activations against the exact float32 form): both are
// teacher-forced over one token sequence, and at every position the
// candidate's next-token distribution is compared with the reference's —
// the figures llama.cpp's `llama-perplexity --kl-divergence` reports for a
// quantization.
//
// Thread-compatible: the models are only read; each call uses caches of
// its own.
#ifndef LOOKAHEAD_ENGINE_MODEL_FORM_AGREEMENT_H_
#define LOOKAHEAD_ENGINE_MODEL_FORM_AGREEMENT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/llama_model.h"

namespace lookahead::engine {

struct FormAgreement {
  int64_t positions = 0;  // next-token predictions compared
  // KL(reference || candidate) of the next-token distributions, in nats.
  double mean_kl = 0, p99_kl = 0, max_kl = 0;
  // Fraction of positions whose most likely token is the same in both.
  double top1 = 0;
  // Perplexity of the sequence's own next tokens under each model.
  double reference_ppl = 0, candidate_ppl = 0;
};

// Feeds tokens[0 .. n) to both models in chunks of `chunk` tokens (one
// forward pass each) and compares their predictions of tokens[1 .. n).
// INVALID_ARGUMENT iff fewer than 2 tokens, chunk < 1, or the models'
// vocabularies differ; model errors as LlamaModel's.
absl::StatusOr<FormAgreement> CompareForms(const LlamaModel& reference,
                                           const LlamaModel& candidate,
                                           absl::Span<const int32_t> tokens,
                                           int chunk = 64);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_FORM_AGREEMENT_H_
