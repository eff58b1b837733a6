#include "verifysvc/serving/request_builder.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/text/stop_strings.h"
#include "proto/namespace_name.h"

namespace lookahead::verifysvc {
namespace {

absl::StatusOr<engine::SamplingParams> Sampling(const RawRequest& raw) {
  if (!(raw.temperature >= 0) || std::isinf(raw.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.temperature is ", raw.temperature,
                     "; use 0 for greedy or a finite value > 0"));
  }
  if (!(raw.top_p >= 0 && raw.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.top_p is ", raw.top_p, "; use a value in (0, 1] (0 = off)"));
  }
  if (raw.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_k is ", raw.top_k, "; use >= 0 (0 = off)"));
  }
  engine::SamplingParams params;
  params.temperature = raw.temperature;
  params.top_p = raw.top_p == 0 ? 1.0f : raw.top_p;
  params.top_k = raw.top_k;
  params.seed = raw.seed;
  return params;
}

absl::StatusOr<DraftMode> Mode(const RawDraftParams& draft) {
  switch (draft.mode) {
    case RawDraftParams::Mode::kUnspecified:
    case RawDraftParams::Mode::kTrieHierarchical:
      return DraftMode::kTrieHierarchical;
    case RawDraftParams::Mode::kOff:
      return DraftMode::kOff;
    case RawDraftParams::Mode::kTrieParallel:
      return DraftMode::kTrieParallel;
    case RawDraftParams::Mode::kUnsupported:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "draft.mode ", draft.wire_mode,
      " is not supported; use OFF, TRIE_HIERARCHICAL or TRIE_PARALLEL"));
}

absl::StatusOr<DraftPolicy> Draft(const RawDraftParams& draft,
                                  const RequestLimits& limits) {
  DraftPolicy policy;
  ASSIGN_OR_RETURN(policy.mode, Mode(draft));
  if (draft.decoding_length < 0 ||
      draft.decoding_length > limits.max_decoding_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft.decoding_length is ", draft.decoding_length,
                     "; use 0 (server default) to ", limits.max_decoding_length,
                     " (--max_decoding_length)"));
  }
  if (draft.branch_length < 0 ||
      draft.branch_length > limits.max_branch_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft.branch_length is ", draft.branch_length,
                     "; use 0 (server default) to ", limits.max_branch_length));
  }
  policy.name_space =
      draft.name_space.empty() ? v1::kDefaultNamespace : draft.name_space;
  absl::Status name = v1::ValidateNamespaceName(policy.name_space);
  if (!name.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft.namespace: ", name.message()));
  }
  policy.decoding_length = draft.decoding_length == 0
                               ? limits.default_decoding_length
                               : draft.decoding_length;
  if (policy.mode == DraftMode::kOff) policy.decoding_length = 0;
  policy.branch_length = draft.branch_length == 0 ? limits.default_branch_length
                                                  : draft.branch_length;
  return policy;
}

// The output limit: the request's, or the default cut to the context left.
absl::StatusOr<int> MaxNewTokens(const RawRequest& raw, int prompt,
                                 const RequestLimits& limits) {
  if (raw.max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens is ", raw.max_new_tokens,
                     "; use 0 (server default) or more"));
  }
  if (raw.max_new_tokens == 0) {
    return std::min(limits.default_max_new_tokens,
                    limits.max_context_tokens - prompt);
  }
  // Compared without adding: prompt + a huge 64-bit max_new_tokens would
  // overflow. The sum is only printed, unsigned (both are positive here).
  if (raw.max_new_tokens > limits.max_context_tokens - prompt) {
    const uint64_t total = static_cast<uint64_t>(prompt) +
                           static_cast<uint64_t>(raw.max_new_tokens);
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt, " tokens) + max_new_tokens (", raw.max_new_tokens,
        ") = ", total, " exceeds the context limit of ",
        limits.max_context_tokens,
        " tokens (--max_context_tokens); ask for at most ",
        limits.max_context_tokens - prompt, " new tokens"));
  }
  return static_cast<int>(raw.max_new_tokens);
}

}  // namespace

absl::Status ValidateChat(absl::Span<const engine::ChatMessage> messages) {
  if (messages.empty()) {
    return absl::InvalidArgumentError(
        "chat.messages is empty: give at least one message");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return absl::InvalidArgumentError(
          absl::StrCat("chat.messages[", i, "].role is \"", role,
                       "\"; use system, user or assistant"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTokenIds(absl::Span<const int32_t> ids, int32_t vocab_size,
                           absl::string_view field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "] = ", ids[i],
                       " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> EncodePrompt(
    const RawPrompt& prompt, const engine::Tokenizer& tokenizer,
    int32_t vocab_size) {
  switch (prompt.kind) {
    case RawPrompt::Kind::kText: {
      engine::EncodeOptions options;
      options.add_special = true;  // BOS iff the model wants one.
      // parse_special stays false: "<|im_end|>" in the text is text.
      return tokenizer.Encode(prompt.text, options);
    }
    case RawPrompt::Kind::kChat:
      RETURN_IF_ERROR(ValidateChat(prompt.chat));
      // Control tokens from the template only, unless the tokenizer was
      // built with parse_special_in_content (--parse_special_in_content).
      return tokenizer.EncodeChat(prompt.chat, /*add_generation_prompt=*/true);
    case RawPrompt::Kind::kTokens:
      RETURN_IF_ERROR(
          CheckTokenIds(prompt.token_ids, vocab_size, "tokens.ids"));
      return prompt.token_ids;
    case RawPrompt::Kind::kNone:
      break;
  }
  return absl::InvalidArgumentError(
      "no prompt: set one of text, chat or tokens");
}

absl::StatusOr<GenerationRequest> BuildRequest(
    const RawRequest& raw, const engine::Tokenizer& tokenizer,
    const RequestLimits& limits) {
  GenerationRequest request;
  ASSIGN_OR_RETURN(request.prompt,
                   EncodePrompt(raw.prompt, tokenizer, limits.vocab_size));
  const int prompt = static_cast<int>(request.prompt.size());
  if (prompt == 0) {
    return absl::InvalidArgumentError(
        "prompt is empty (0 tokens): give at least one token of text");
  }
  if (prompt > limits.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt has ", prompt, " tokens; this server accepts at most ",
        limits.max_prompt_tokens, " (--max_prompt_tokens)"));
  }
  ASSIGN_OR_RETURN(request.max_new_tokens, MaxNewTokens(raw, prompt, limits));
  ASSIGN_OR_RETURN(request.sampling, Sampling(raw));
  request.stop = raw.stop;
  RETURN_IF_ERROR(
      engine::ValidateStopStrings(request.stop, limits.max_stop_strings));
  ASSIGN_OR_RETURN(request.draft, Draft(raw.draft, limits));
  return request;
}

}  // namespace lookahead::verifysvc
