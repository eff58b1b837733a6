#include "engine/testing/reference_decode.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace lookahead::engine {

absl::StatusOr<GenerationResult> Generate(
    const LlamaModel& model, absl::Span<const int32_t> prompt,
    const GenerationOptions& options, DraftProvider* drafts,
    const std::function<void(absl::Span<const int32_t>)>& on_tokens) {
  if (prompt.empty()) {
    return absl::InvalidArgumentError("prompt is empty: give at least 1 token");
  }
  if (options.max_new_tokens < 1) {
    return absl::InvalidArgumentError("max_new_tokens must be >= 1");
  }
  RETURN_IF_ERROR(ValidateSamplingParams(options.sampling));
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, model.NewCache());
  ASSIGN_OR_RETURN(torch::Tensor logits, model.Prefill(cache.get(), prompt));

  GenerationResult result;
  auto is_stop = [&](int32_t token) {
    return std::find(options.stop_token_ids.begin(),
                     options.stop_token_ids.end(),
                     token) != options.stop_token_ids.end();
  };
  // Appends a step's tokens, cutting at a stop token or the length limit.
  // Returns true iff generation goes on.
  auto emit = [&](std::vector<int32_t> step_tokens) {
    size_t keep = 0;
    bool stop = false;
    while (keep < step_tokens.size() && !stop) {
      if (static_cast<int>(result.tokens.size() + keep) >=
          options.max_new_tokens) {
        break;
      }
      stop = is_stop(step_tokens[keep]);
      ++keep;
    }
    step_tokens.resize(keep);
    result.tokens.insert(result.tokens.end(), step_tokens.begin(),
                         step_tokens.end());
    ++result.steps;
    if (on_tokens) on_tokens(step_tokens);
    if (stop) result.finish = GenerationFinish::kStopToken;
    return !stop &&
           static_cast<int>(result.tokens.size()) < options.max_new_tokens;
  };

  torch::Tensor last = logits.to(torch::kCPU).contiguous();
  const int32_t first =
      options.sampling.greedy()
          ? ArgMax({last.data_ptr<float>(), static_cast<size_t>(last.numel())})
          : SampleToken(
                {last.data_ptr<float>(), static_cast<size_t>(last.numel())},
                options.sampling, static_cast<int64_t>(prompt.size()));
  result.prefill_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  bool go_on = emit({first});
  std::vector<int32_t> fresh = {first};  // Emitted since the last draft call.
  while (go_on) {
    DraftTree tree;
    if (drafts != nullptr) {
      absl::StatusOr<DraftTree> next = drafts->Next(fresh);
      if (next.ok()) tree = *std::move(next);
    }
    // The root and the tree must fit the cache.
    TrimDraft(&tree, cache->Capacity() - cache->Length() - 1);
    result.draft_tokens += static_cast<int64_t>(tree.tokens.size());
    ASSIGN_OR_RETURN(std::vector<int32_t> step_tokens,
                     model.VerifyAndAccept(cache.get(), result.tokens.back(),
                                           tree, options.sampling));
    result.accepted_draft_tokens +=
        static_cast<int64_t>(step_tokens.size()) - 1;
    fresh = step_tokens;
    go_on = emit(std::move(step_tokens));
  }
  result.total_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

}  // namespace lookahead::engine
