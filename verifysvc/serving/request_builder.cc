#include "verifysvc/serving/request_builder.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "engine/model/token_logprobs.h"
#include "engine/text/stop_strings.h"
#include "proto/namespace_name.h"
#include "verifysvc/serving/field_error.h"

namespace lookahead::verifysvc {
namespace {

absl::StatusOr<engine::SamplingParams> Sampling(const RawRequest& raw) {
  if (!(raw.temperature >= 0) || std::isinf(raw.temperature)) {
    return OutOfRange("sampling.temperature", "in [0, inf)", "0 = greedy",
                      absl::StrCat(raw.temperature));
  }
  if (!(raw.top_p >= 0 && raw.top_p <= 1)) {
    return OutOfRange("sampling.top_p", "in [0, 1]", "0 = off, as is 1",
                      absl::StrCat(raw.top_p));
  }
  if (raw.top_k < 0 || raw.top_k > INT32_MAX) {
    return OutOfRange("sampling.top_k", absl::StrCat("in [0, ", INT32_MAX, "]"),
                      "0 = off, as is any value >= the vocabulary size",
                      absl::StrCat(raw.top_k));
  }
  engine::SamplingParams params;
  params.temperature = raw.temperature;
  params.top_p = raw.top_p == 0 ? 1.0f : raw.top_p;
  params.top_k = static_cast<int>(raw.top_k);
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
  return FieldError(
      "draft.mode",
      absl::StrCat(" ", draft.wire_mode,
                   " is not supported; use OFF, TRIE_HIERARCHICAL or "
                   "TRIE_PARALLEL"));
}

absl::StatusOr<engine::DraftSourceSet> Sources(const RawDraftParams& draft,
                                               const RequestLimits& limits) {
  if (draft.sources.empty()) return limits.default_draft_sources;
  engine::DraftSourceSet set = 0;
  for (size_t i = 0; i < draft.sources.size(); ++i) {
    switch (draft.sources[i].kind) {
      case RawDraftParams::Source::Kind::kTrie:
        set |= engine::SourceBit(engine::DraftSourceTag::kTrie);
        break;
      case RawDraftParams::Source::Kind::kNgram:
        set |= engine::SourceBit(engine::DraftSourceTag::kNgram);
        break;
      case RawDraftParams::Source::Kind::kAssistant:
        set |= engine::SourceBit(engine::DraftSourceTag::kAssistant);
        break;
      case RawDraftParams::Source::Kind::kUnsupported:
        return FieldError(
            absl::StrCat("draft.sources[", i, "]"),
            absl::StrCat(" = ", draft.sources[i].wire,
                         " is not a draft source; use PROMPT or OUTPUT (the "
                         "token tries), NGRAM or ASSISTANT (none = server "
                         "default)"));
    }
  }
  return set;
}

// The window W: unset = the default; set, within [0, max] (0 = no window,
// whatever the default).
absl::StatusOr<int> LookaheadWindow(std::optional<int64_t> value,
                                    const RequestLimits& limits) {
  if (!value.has_value()) return limits.default_lookahead_window;
  if (*value < 0 || *value > limits.max_lookahead_window) {
    return OutOfRange(
        "draft.lookahead_window",
        absl::StrCat("in [0, ", limits.max_lookahead_window, "]"),
        "0 = no window; unset = server default; --max_lookahead_window",
        absl::StrCat(*value));
  }
  return static_cast<int>(*value);
}

// N or G: 0 = the default, else within [min_set, max].
absl::StatusOr<int> LookaheadParam(const char* field, int64_t value,
                                   int min_set, int max, int default_value) {
  if (value != 0 && (value < min_set || value > max)) {
    return OutOfRange(
        absl::StrCat("draft.", field),
        absl::StrCat(min_set > 1 ? absl::StrCat("0 or in [", min_set, ", ")
                                 : std::string("in [0, "),
                     max, "]"),
        absl::StrCat("0 = server default; --max_", field), absl::StrCat(value));
  }
  return value == 0 ? default_value : static_cast<int>(value);
}

absl::StatusOr<DraftPolicy> Draft(const RawDraftParams& draft,
                                  const RequestLimits& limits) {
  DraftPolicy policy;
  ASSIGN_OR_RETURN(policy.mode, Mode(draft));
  if (draft.decoding_length < 0 ||
      draft.decoding_length > limits.max_decoding_length) {
    return OutOfRange("draft.decoding_length",
                      absl::StrCat("in [0, ", limits.max_decoding_length, "]"),
                      "0 = server default; --max_decoding_length",
                      absl::StrCat(draft.decoding_length));
  }
  if (draft.branch_length < 0 ||
      draft.branch_length > limits.max_branch_length) {
    return OutOfRange("draft.branch_length",
                      absl::StrCat("in [0, ", limits.max_branch_length, "]"),
                      "0 = server default", absl::StrCat(draft.branch_length));
  }
  policy.name_space =
      draft.name_space.empty() ? v1::kDefaultNamespace : draft.name_space;
  if (!v1::ValidateNamespaceName(policy.name_space).ok()) {
    return FieldError("draft.namespace",
                      absl::StrCat(": ", QuoteInput(policy.name_space),
                                   " is not a namespace name; use 1..",
                                   v1::kMaxNamespaceBytes,
                                   " bytes of [A-Za-z0-9_.-] (empty "
                                   "= \"",
                                   v1::kDefaultNamespace, "\")"));
  }
  policy.decoding_length = draft.decoding_length == 0
                               ? limits.default_decoding_length
                               : static_cast<int>(draft.decoding_length);
  if (policy.mode == DraftMode::kOff) policy.decoding_length = 0;
  policy.branch_length = draft.branch_length == 0
                             ? limits.default_branch_length
                             : static_cast<int>(draft.branch_length);
  ASSIGN_OR_RETURN(policy.sources, Sources(draft, limits));
  ASSIGN_OR_RETURN(policy.lookahead_window,
                   LookaheadWindow(draft.lookahead_window, limits));
  ASSIGN_OR_RETURN(policy.lookahead_ngram,
                   LookaheadParam("lookahead_ngram", draft.lookahead_ngram, 2,
                                  limits.max_lookahead_ngram,
                                  limits.default_lookahead_ngram));
  ASSIGN_OR_RETURN(policy.lookahead_guess,
                   LookaheadParam("lookahead_guess", draft.lookahead_guess, 1,
                                  limits.max_lookahead_guess,
                                  limits.default_lookahead_guess));
  return policy;
}

// The output limit: the request's, or the default cut to the context left.
// REQUIRES: 1 <= prompt <= limits.max_prompt_tokens < max_context_tokens.
absl::StatusOr<int> MaxNewTokens(const RawRequest& raw, int prompt,
                                 const RequestLimits& limits) {
  // In 64 bits and compared, never added: prompt + a huge max_new_tokens
  // would wrap.
  const int64_t left = int64_t{limits.max_context_tokens} - prompt;
  if (!raw.max_new_tokens.has_value()) {
    return static_cast<int>(
        std::min<int64_t>(limits.default_max_new_tokens, left));
  }
  const int64_t value = *raw.max_new_tokens;
  if (value < 1 || value > left) {
    return OutOfRange("max_new_tokens", absl::StrCat("in [1, ", left, "]"),
                      absl::StrCat("leave it unset for the server's default; "
                                   "--max_context_tokens=",
                                   limits.max_context_tokens,
                                   " less the prompt's ", prompt, " tokens"),
                      absl::StrCat(value));
  }
  return static_cast<int>(value);
}

// Prompt text within `max_bytes` (a chat's roles and contents together)
// and at most `max_messages` chat messages. `limit` says where max_bytes
// comes from, for the message.
absl::Status CheckTextBytes(const RawPrompt& prompt, int64_t max_bytes,
                            int64_t max_messages, absl::string_view limit) {
  if (max_bytes <= 0) return absl::OkStatus();  // byte limits off
  if (prompt.kind == RawPrompt::Kind::kText &&
      static_cast<int64_t>(prompt.text.size()) > max_bytes) {
    return FieldError(
        "text", absl::StrCat(" is ", prompt.text.size(), " bytes; use at most ",
                             max_bytes, " (", limit, ")"));
  }
  if (prompt.kind != RawPrompt::Kind::kChat) return absl::OkStatus();
  if (static_cast<int64_t>(prompt.chat.size()) > max_messages) {
    return FieldError(
        "chat.messages",
        absl::StrCat(" has ", prompt.chat.size(), " messages; use at most ",
                     max_messages, " (each message takes at least one token)"));
  }
  int64_t total = 0;
  auto add = [&](size_t i, absl::string_view field, const std::string& text) {
    total += static_cast<int64_t>(text.size());
    if (total <= max_bytes) return absl::OkStatus();
    return FieldError(
        absl::StrCat("chat.messages[", i, "].", field),
        absl::StrCat(" is ", text.size(), " bytes, making the chat ", total,
                     " bytes; use at most ", max_bytes, " in all (", limit,
                     ")"));
  };
  for (size_t i = 0; i < prompt.chat.size(); ++i) {
    RETURN_IF_ERROR(add(i, "role", prompt.chat[i].role));
    RETURN_IF_ERROR(add(i, "content", prompt.chat[i].content));
  }
  return absl::OkStatus();
}

// The first id outside [0, vocab_size), worded by OutOfRange.
template <typename Id>
absl::Status CheckIds(absl::Span<const Id> ids, int32_t vocab_size,
                      absl::string_view field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return OutOfRange(absl::StrCat(field, "[", i, "]"),
                        absl::StrCat("in [0, ", vocab_size, ")"),
                        "a token id of the model's vocabulary",
                        absl::StrCat(ids[i]));
    }
  }
  return absl::OkStatus();
}

// The request field that holds a prompt of `kind`, for its errors.
const char* PromptField(RawPrompt::Kind kind) {
  switch (kind) {
    case RawPrompt::Kind::kChat:
      return "chat.messages";
    case RawPrompt::Kind::kTokens:
      return "tokens.ids";
    case RawPrompt::Kind::kText:
    case RawPrompt::Kind::kNone:
      break;
  }
  return "text";
}

}  // namespace

absl::StatusOr<DraftPolicy> BuildDraftPolicy(const RawDraftParams& draft,
                                             const RequestLimits& limits) {
  return Draft(draft, limits);
}

absl::Status CheckLookaheadLimits(const RequestLimits& limits) {
  struct Param {
    const char* name;
    int default_value, max, min_set;
  };
  const Param params[] = {
      {"window", limits.default_lookahead_window, limits.max_lookahead_window,
       1},
      {"ngram", limits.default_lookahead_ngram, limits.max_lookahead_ngram, 2},
      {"guess", limits.default_lookahead_guess, limits.max_lookahead_guess, 1},
  };
  for (const Param& p : params) {
    const bool max_ok = p.max == 0 || p.max >= p.min_set;
    const bool default_ok =
        p.default_value >= 0 && p.default_value <= p.max &&
        (p.default_value == 0 || p.default_value >= p.min_set);
    if (!max_ok || !default_ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--lookahead_", p.name, "=", p.default_value, " and --max_lookahead_",
          p.name, "=", p.max, ": need 0 <= default <= max",
          p.min_set > 1 ? absl::StrCat(", each 0 or >= ", p.min_set) : ""));
    }
  }
  return absl::OkStatus();
}

RequestLimits FitLimitsToTokenizer(RequestLimits limits,
                                   const engine::Tokenizer& tokenizer) {
  size_t longest = 4;  // one UTF-8 character as an unknown token
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    longest = std::max(longest, tokenizer.TokenBytes(id).size());
  }
  limits.max_token_bytes = static_cast<int>(longest);
  return limits;
}

int64_t MaxPromptBytes(const RequestLimits& limits) {
  return int64_t{limits.max_prompt_tokens} * limits.max_token_bytes;
}

int64_t MaxTokenizeBytes(const RequestLimits& limits) {
  return int64_t{limits.max_context_tokens} * limits.max_token_bytes;
}

absl::Status CheckPromptBytes(const RawPrompt& prompt,
                              const RequestLimits& limits) {
  return CheckTextBytes(
      prompt, MaxPromptBytes(limits), limits.max_prompt_tokens,
      absl::StrCat("--max_prompt_tokens=", limits.max_prompt_tokens,
                   " tokens of at most ", limits.max_token_bytes, " bytes"));
}

absl::Status CheckTokenizeBytes(const RawPrompt& input,
                                const RequestLimits& limits) {
  return CheckTextBytes(
      input, MaxTokenizeBytes(limits), limits.max_context_tokens,
      absl::StrCat("--max_context_tokens=", limits.max_context_tokens,
                   " tokens of at most ", limits.max_token_bytes, " bytes"));
}

absl::Status CheckStopStrings(absl::Span<const std::string> stop,
                              const RequestLimits& limits) {
  if (stop.size() > static_cast<size_t>(limits.max_stop_strings)) {
    return FieldError(
        "stop", absl::StrCat(" has ", stop.size(), " strings; use at most ",
                             limits.max_stop_strings, " (--max_stop_strings)"));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    const std::string field = absl::StrCat("stop[", i, "]");
    if (stop[i].empty()) return FieldError(field, " is empty; remove it");
    if (stop[i].size() > static_cast<size_t>(limits.max_stop_bytes)) {
      return FieldError(
          field, absl::StrCat(" is ", stop[i].size(), " bytes; use at most ",
                              limits.max_stop_bytes, " (--max_stop_bytes)"));
    }
    if (!IsValidUtf8(stop[i])) {
      return FieldError(
          field, absl::StrCat(" ", QuoteInput(stop[i]), " is not valid UTF-8"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateChat(absl::Span<const engine::ChatMessage> messages) {
  if (messages.empty()) {
    return FieldError("chat.messages", " is empty: give at least one message");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return FieldError(absl::StrCat("chat.messages[", i, "].role"),
                        absl::StrCat(" is ", QuoteInput(role),
                                     "; use system, user or assistant"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTokenIds(absl::Span<const int32_t> ids, int32_t vocab_size,
                           absl::string_view field) {
  return CheckIds(ids, vocab_size, field);
}

absl::Status CheckTokenIds(absl::Span<const int64_t> ids, int32_t vocab_size,
                           absl::string_view field) {
  return CheckIds(ids, vocab_size, field);
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
      // The template's own objections (roles out of its order) name the
      // messages.
      {
        absl::StatusOr<std::vector<int32_t>> ids =
            tokenizer.EncodeChat(prompt.chat, /*add_generation_prompt=*/true);
        if (absl::IsInvalidArgument(ids.status())) {
          return FieldError("chat.messages",
                            absl::StrCat(": ", ids.status().message()));
        }
        return ids;
      }
    case RawPrompt::Kind::kTokens:
      RETURN_IF_ERROR(
          CheckTokenIds(prompt.token_ids, vocab_size, "tokens.ids"));
      return std::vector<int32_t>(prompt.token_ids.begin(),
                                  prompt.token_ids.end());
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
  RETURN_IF_ERROR(CheckStopStrings(raw.stop, limits));
  request.stop = raw.stop;
  RETURN_IF_ERROR(
      engine::ValidateStopStrings(request.stop, limits.max_stop_strings));
  ASSIGN_OR_RETURN(request.sampling, Sampling(raw));
  if (raw.logprobs.has_value()) {
    RETURN_IF_ERROR(CheckLogprobs(*raw.logprobs, "logprobs"));
    request.logprobs = static_cast<int>(*raw.logprobs);
  }
  ASSIGN_OR_RETURN(request.draft, Draft(raw.draft, limits));
  request.draft.sampling = {raw.temperature, raw.top_p,
                            static_cast<int>(raw.top_k), raw.seed};
  RETURN_IF_ERROR(CheckPromptBytes(raw.prompt, limits));
  ASSIGN_OR_RETURN(request.prompt,
                   EncodePrompt(raw.prompt, tokenizer, limits.vocab_size));
  const int prompt = static_cast<int>(request.prompt.size());
  const char* prompt_field = PromptField(raw.prompt.kind);
  if (prompt == 0) {
    return FieldError(
        prompt_field,
        " is empty (0 tokens): a prompt needs at least one token");
  }
  if (prompt > limits.max_prompt_tokens) {
    return FieldError(
        prompt_field,
        absl::StrCat(" has ", prompt, " tokens; use at most ",
                     limits.max_prompt_tokens, " (--max_prompt_tokens)"));
  }
  ASSIGN_OR_RETURN(request.max_new_tokens, MaxNewTokens(raw, prompt, limits));
  return request;
}

}  // namespace lookahead::verifysvc
