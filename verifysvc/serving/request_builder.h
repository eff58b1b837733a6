// BuildRequest: the one place a request becomes a GenerationRequest, shared
// by every front end. A front end maps its wire format to a RawRequest
// (what the client asked, unvalidated); BuildRequest tokenizes the prompt
// (text with BOS as the model wants, chat through the model's template with
// the generation prompt, or token ids), applies the server's defaults and
// limits, and returns INVALID_ARGUMENT naming the field, the limit and the
// flag that sets it. Pure functions of their arguments; thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_REQUEST_BUILDER_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_REQUEST_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"
#include "verifysvc/serving/request.h"

namespace lookahead::verifysvc {

// The server's defaults and limits, from flags (verifysvc/config.h).
struct RequestLimits {
  // Prompt + output may not exceed this; also the KV cache's bound.
  int max_context_tokens = 2048;
  // Longest prompt accepted; <= max_context_tokens - 1.
  int max_prompt_tokens = 2047;
  // max_new_tokens when a request leaves it 0 (cut to the context left).
  int default_max_new_tokens = 256;
  // Draft tokens per step when a request leaves decoding_length 0, and the
  // most a request may ask for.
  int default_decoding_length = 32;
  int max_decoding_length = 64;
  // Draft branch depth when a request leaves branch_length 0; most allowed.
  int default_branch_length = 8;
  int max_branch_length = 32;
  int max_stop_strings = 16;
  int32_t vocab_size = 0;
};

// The prompt as the client gave it: exactly one of text, chat, token ids.
struct RawPrompt {
  enum class Kind { kNone, kText, kChat, kTokens };
  Kind kind = Kind::kNone;
  std::string text;
  std::vector<engine::ChatMessage> chat;
  std::vector<int32_t> token_ids;
};

// The draft policy as the client gave it; 0 / empty mean the default.
struct RawDraftParams {
  enum class Mode {
    kUnspecified,
    kOff,
    kTrieHierarchical,
    kTrieParallel,
    kUnsupported
  };
  Mode mode = Mode::kUnspecified;
  int wire_mode = 0;  // the client's value, for the kUnsupported message
  int decoding_length = 0;
  int branch_length = 0;
  std::string name_space;
};

// A request as the client sent it, before validation.
struct RawRequest {
  RawPrompt prompt;
  int64_t max_new_tokens = 0;  // 0 = the server default
  // 0 = greedy; top_p 0 = off; top_k 0 = off.
  float temperature = 0;
  float top_p = 0;
  int top_k = 0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  RawDraftParams draft;
};

absl::StatusOr<GenerationRequest> BuildRequest(
    const RawRequest& raw, const engine::Tokenizer& tokenizer,
    const RequestLimits& limits);

// The prompt's token ids (text with BOS as the model wants; chat through the
// template with the generation prompt). INVALID_ARGUMENT naming the field.
absl::StatusOr<std::vector<int32_t>> EncodePrompt(
    const RawPrompt& prompt, const engine::Tokenizer& tokenizer,
    int32_t vocab_size);

// OK iff `messages` is non-empty and every role is system, user or
// assistant; else INVALID_ARGUMENT naming the message.
absl::Status ValidateChat(absl::Span<const engine::ChatMessage> messages);

// OK iff every id is in [0, vocab_size); else INVALID_ARGUMENT naming
// `field`[i].
absl::Status CheckTokenIds(absl::Span<const int32_t> ids, int32_t vocab_size,
                           absl::string_view field);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_REQUEST_BUILDER_H_
