// OutputProcessor: turns one sequence's emitted tokens into its outputs.
// Detokenizes to whole UTF-8 characters (no special tokens' text), holds
// back a possible stop-string prefix, and decides where the sequence ends:
// a stop string, an end-of-generation token, or max_new_tokens. Tokens past
// the end are dropped. Thread-compatible: one per sequence.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_OUTPUT_PROCESSOR_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_OUTPUT_PROCESSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/model/token_logprobs.h"
#include "engine/text/stop_strings.h"
#include "engine/text/text_stream.h"
#include "engine/text/tokenizer.h"
#include "verifysvc/serving/output.h"

namespace lookahead::verifysvc {

class OutputProcessor {
 public:
  // `tokenizer` is not owned and must outlive this. REQUIRES:
  // engine::ValidateStopStrings(stop) holds, max_new_tokens >= 1.
  OutputProcessor(const engine::Tokenizer* tokenizer,
                  const std::vector<std::string>& stop, int max_new_tokens);

  // Appends one step's tokens up to the sequence's end and returns the
  // step's output: the kept token ids, their `logprobs` (empty, or one per
  // token: those of tokens past the end are dropped with them) and new
  // text; finish_reason is set iff the sequence ended (its text then
  // flushed). usage is left unset.
  // REQUIRES: !finished(); logprobs empty or logprobs.size() ==
  // tokens.size().
  GenerationOutput Append(absl::Span<const int32_t> tokens,
                          std::vector<engine::ChoiceLogprobs> logprobs = {});

  // Every kept token so far.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  bool finished() const { return finished_; }

 private:
  const engine::Tokenizer* const tokenizer_;
  const int max_new_tokens_;
  engine::TextStream text_;
  engine::StopStringMatcher stop_;
  std::vector<int32_t> tokens_;
  bool finished_ = false;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_OUTPUT_PROCESSOR_H_
