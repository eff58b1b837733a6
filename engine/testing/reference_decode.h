// Generate (the reference decode loop): generates one sequence with a
// LlamaModel, plain or with draft trees. Each step verifies [last token, draft
// tree] in one forward pass and emits the longest accepted path plus the
// model's own next token, so the output is token for token that of plain
// decoding with the same sampling parameters (greedy, or seeded sampling keyed
// by absolute position).
//
// Test-only: the scheduler of verifysvc batches many sequences; this
// single-sequence loop is the reference the end-to-end tests check it and
// draftsvc's drafts against. Thread-compatible: one call per KvCache at a
// time.
#ifndef LOOKAHEAD_ENGINE_TESTING_REFERENCE_DECODE_H_
#define LOOKAHEAD_ENGINE_TESTING_REFERENCE_DECODE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/llama_model.h"
#include "engine/model/sampler.h"

namespace lookahead::engine {

// Supplies one draft tree per decoding step.
class DraftProvider {
 public:
  virtual ~DraftProvider() = default;
  // `accepted`: the tokens emitted since the previous call (on the first
  // call, the first generated token). Returns the tree to verify below the
  // last of them. An error costs nothing but the drafts of this step.
  virtual absl::StatusOr<DraftTree> Next(
      absl::Span<const int32_t> accepted) = 0;
};

struct GenerationOptions {
  // Stop after this many generated tokens (the count includes a stop token).
  int max_new_tokens = 128;
  SamplingParams sampling;
  // Generation stops after any of these (e.g. the tokenizer's EOG ids).
  std::vector<int32_t> stop_token_ids;
};

enum class GenerationFinish { kLength, kStopToken };

struct GenerationResult {
  std::vector<int32_t> tokens;  // Generated tokens (the stop token included).
  // Forward passes that produced output: the prefill's last chunk (the first
  // token) plus one per verify step, so plain decoding has steps ==
  // tokens.size() and EDL = tokens / steps = 1.
  int steps = 0;
  int64_t draft_tokens = 0;  // Draft nodes verified, summed over steps.
  int64_t accepted_draft_tokens = 0;
  double prefill_seconds = 0;  // Time to the first token.
  double total_seconds = 0;
  GenerationFinish finish = GenerationFinish::kLength;

  double edl() const { return steps == 0 ? 0 : double(tokens.size()) / steps; }
};

// Generates from `prompt` (>= 1 token) into a fresh cache of `model`.
// `drafts` may be null: plain decoding. `on_tokens` (may be null) sees every
// step's emitted tokens as they are accepted. Errors: the model's
// (INVALID_ARGUMENT for bad ids, RESOURCE_EXHAUSTED when the cache is full).
absl::StatusOr<GenerationResult> Generate(
    const LlamaModel& model, absl::Span<const int32_t> prompt,
    const GenerationOptions& options, DraftProvider* drafts,
    const std::function<void(absl::Span<const int32_t>)>& on_tokens = nullptr);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_TESTING_REFERENCE_DECODE_H_
