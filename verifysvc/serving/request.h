// GenerationRequest: a validated, transport-neutral request, as every front
// end (gRPC, HTTP) hands it to the scheduler, and the draft policy it
// carries. Built by BuildRequest (request_builder.h). Plain values.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_REQUEST_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/model/sampler.h"
#include "verifysvc/drafts/draft_policy.h"

namespace lookahead::verifysvc {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // >= 1 ids in [0, vocab)
  int max_new_tokens = 1;       // >= 1
  engine::SamplingParams sampling;
  std::vector<std::string> stop;  // engine::ValidateStopStrings holds
  // Unset: no logprobs. Set to n in [0, engine::kMaxTopLogprobs]: every
  // output token carries its log-probability and the n most likely tokens
  // at its position (GenerationOutput::logprobs); costs a pass over the
  // vocabulary per token.
  std::optional<int> logprobs;
  DraftPolicy draft;
  absl::Time arrival = absl::Now();
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_REQUEST_H_
