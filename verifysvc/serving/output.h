// What the scheduler emits, transport-neutral: one GenerationOutput per
// decoding step of a sequence (token ids, the text they complete, and on
// the last one the finish reason and usage), delivered to the sequence's
// GenerationSink; and the scheduler's running totals (SchedulerStats).
// Front ends map these to their wire formats. Plain values.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_OUTPUT_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_OUTPUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/draft_tree.h"
#include "engine/model/token_logprobs.h"

namespace lookahead::verifysvc {

enum class FinishReason {
  kNone,        // still generating
  kLength,      // max_new_tokens reached
  kEos,         // an end-of-generation token
  kStopString,  // a stop string appeared (not included in the text)
};

// One draft source's share of a request's drafts.
struct SourceUsage {
  engine::DraftSourceTag source = engine::DraftSourceTag::kUnknown;
  int64_t draft_tokens = 0;           // draft tokens it proposed, verified
  int64_t accepted_draft_tokens = 0;  // of them, kept in the output
};

// Per-request usage, on the last output of a sequence.
struct Usage {
  int prompt_tokens = 0;
  int output_tokens = 0;
  // Forward passes that emitted tokens for it (the prefill's last chunk
  // counts), so plain decoding has EDL = output_tokens / decoding_steps = 1.
  int decoding_steps = 0;
  double edl = 0;
  double time_to_first_token_seconds = 0;
  double total_seconds = 0;
  double tokens_per_second = 0;
  double queue_seconds = 0;
  int64_t draft_tokens = 0;           // draft tokens verified
  int64_t accepted_draft_tokens = 0;  // of them, kept in the output
  // Prompt tokens whose K/V came from the prefix cache (not prefilled).
  int cached_prompt_tokens = 0;
  // Per source that proposed any verified draft token, in tag order. A
  // node several sources proposed counts for each of them, so these may
  // sum to more than draft_tokens / accepted_draft_tokens.
  std::vector<SourceUsage> sources;
  FinishReason finish_reason = FinishReason::kNone;
};

// One decoding step's share of a sequence's output.
struct GenerationOutput {
  std::vector<int32_t> token_ids;  // the step's tokens (EOS included)
  // Iff the request asked for logprobs: one per token_ids entry, in order
  // (engine/model/token_logprobs.h); else empty.
  std::vector<engine::ChoiceLogprobs> logprobs;
  // New text: whole UTF-8 characters; a possible stop-string prefix is held
  // back until it is decided.
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
  std::optional<Usage> usage;  // set on the last output only
};

// Where a sequence's outputs go.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // Streams one output. Called from the scheduler thread.
  virtual void Send(GenerationOutput output) = 0;
  // Ends the stream. The last call: the scheduler forgets the sink after it.
  virtual void Finish(absl::Status status) = 0;
  // True once the client cancelled or its deadline passed. Thread-safe.
  virtual bool Cancelled() const = 0;
};

// The scheduler's totals since start, and its state now.
struct SchedulerStats {
  int running_sequences = 0;
  int queued_sequences = 0;
  int64_t requests_admitted = 0;
  int64_t requests_finished = 0;   // length, EOS or stop string
  int64_t requests_cancelled = 0;  // client cancel or deadline
  int64_t requests_rejected = 0;   // invalid or server full
  int64_t requests_failed = 0;     // internal error
  int64_t forward_passes = 0;
  int64_t forward_sequences = 0;
  int max_forward_sequences = 0;
  int64_t forward_tokens = 0;
  int64_t decoding_steps = 0;
  int64_t output_tokens = 0;
  int64_t draft_tokens = 0;
  int64_t accepted_draft_tokens = 0;
  int64_t kv_cache_tokens = 0;
  // The draft sources' health (draftsvc: the last Step RPC succeeded).
  bool drafts_available = true;
  int64_t draft_failures = 0;
  int64_t draft_sessions_reopened = 0;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_OUTPUT_H_
