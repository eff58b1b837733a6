#include "verifysvc/serving/output_processor.h"

#include <utility>

namespace lookahead::verifysvc {
namespace {

engine::DecodeOptions VisibleText() {
  engine::DecodeOptions options;
  options.render_special = false;  // No "<|im_end|>" in the answer.
  return options;
}

}  // namespace

OutputProcessor::OutputProcessor(const engine::Tokenizer* tokenizer,
                                 const std::vector<std::string>& stop,
                                 int max_new_tokens)
    : tokenizer_(tokenizer),
      max_new_tokens_(max_new_tokens),
      text_(tokenizer, VisibleText()),
      stop_(stop) {}

GenerationOutput OutputProcessor::Append(
    absl::Span<const int32_t> tokens,
    std::vector<engine::ChoiceLogprobs> logprobs) {
  GenerationOutput out;
  out.logprobs = std::move(logprobs);
  FinishReason finish = FinishReason::kNone;
  for (int32_t token : tokens) {
    tokens_.push_back(token);
    out.token_ids.push_back(token);
    // Ids come from the model's own logits, so Feed cannot fail on them.
    absl::StatusOr<std::string> piece = text_.Feed(token);
    if (piece.ok()) out.text.append(stop_.Push(*piece));
    if (stop_.stopped()) {
      finish = FinishReason::kStopString;
    } else if (tokenizer_->IsEndOfGeneration(token)) {
      finish = FinishReason::kEos;
    } else if (static_cast<int>(tokens_.size()) >= max_new_tokens_) {
      finish = FinishReason::kLength;
    }
    if (finish != FinishReason::kNone) break;
  }
  // Aligned with the kept tokens: a token cut off takes its logprobs along.
  if (!out.logprobs.empty()) out.logprobs.resize(out.token_ids.size());
  if (finish == FinishReason::kNone) return out;
  if (finish != FinishReason::kStopString) {
    out.text.append(stop_.Push(text_.Finish()));
    out.text.append(stop_.Flush());
  }
  out.finish_reason = finish;
  finished_ = true;
  return out;
}

}  // namespace lookahead::verifysvc
