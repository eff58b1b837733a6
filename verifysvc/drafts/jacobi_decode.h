// JacobiDecode: a single-sequence decode loop that runs a JacobiWindow in
// every verify pass and drafts from a small local pool of the n-grams it
// harvested (Lookahead Decoding end to end, without draftsvc). Test and
// benchmark only: it shows the window's rows leave decoding lossless and
// measures what its n-grams are worth; the scheduler batches sequences and
// keeps the pool in draftsvc. Thread-compatible: one call per model cache.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_JACOBI_DECODE_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_JACOBI_DECODE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/llama_model.h"
#include "engine/model/sampler.h"
#include "verifysvc/drafts/jacobi_window.h"

namespace lookahead::verifysvc {

struct JacobiDecodeOptions {
  JacobiOptions window;  // vocab_size is taken from the model
  engine::SamplingParams sampling;
  int max_new_tokens = 32;
  // Pool: at most this many n-grams per key (least recently harvested go
  // first), and the draft verifies the most recent `draft_ngrams` of the
  // root's key, merged into one tree.
  int pool_per_key = 8;
  int draft_ngrams = 4;
};

struct JacobiDecodeResult {
  std::vector<int32_t> tokens;  // generated (the first from prefill)
  int steps = 0;                // verify passes (the prefill not counted)
  int64_t draft_tokens = 0;     // draft nodes verified
  int64_t accepted_draft_tokens = 0;
  int64_t harvested = 0;  // n-grams Update returned
  // Steps that harvested, and those whose first n-gram (column 0's) began
  // with the step's first emitted token (its guess of that position held).
  int64_t harvest_steps = 0;
  int64_t first_token_hits = 0;
  // Harvested n-grams whose N positions the decode reached, those whose
  // first token is the token decoded at its position, and those equal to
  // the decoded tokens at their positions (right where they were guessed).
  int64_t ngrams_checked = 0;
  int64_t ngram_first_hits = 0;
  int64_t ngram_exact_hits = 0;
};

// Greedy or seeded decoding of `prompt` (>= 1 token) for max_new_tokens
// tokens (no stop tokens) in a fresh cache of `model`. Errors: the model's,
// JacobiWindow::Create's.
absl::StatusOr<JacobiDecodeResult> JacobiDecode(
    const engine::LlamaModel& model, absl::Span<const int32_t> prompt,
    const JacobiDecodeOptions& options);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_JACOBI_DECODE_H_
