// BuildRequest: the one place a request becomes a GenerationRequest, shared
// by every front end. A front end maps its wire format to a RawRequest
// (what the client asked, unvalidated); BuildRequest tokenizes the prompt
// (text with BOS as the model wants, chat through the model's template with
// the generation prompt, or token ids), applies the server's defaults and
// limits, and returns INVALID_ARGUMENT naming the field, the limit and the
// flag that sets it: a FieldError (field_error.h) whose message begins with
// the field's gRPC path, values out of range worded by OutOfRange. Text is
// measured in bytes before it is tokenized (see MaxPromptBytes). Pure
// functions of their arguments; thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_REQUEST_BUILDER_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_REQUEST_BUILDER_H_

#include <cstdint>
#include <optional>
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
  // Draft sources when a request names none (--draft_sources; bits of
  // engine::DraftSourceTag; 0 = the draft service's defaults).
  engine::DraftSourceSet default_draft_sources = 0;
  // Jacobi lookahead window (W, N, G) when a request leaves W unset or N, G
  // 0 (--lookahead_window/_ngram/_guess), and the most a request may ask
  // for (--max_lookahead_window/_ngram/_guess). N is 0 or >= 2.
  int default_lookahead_window = 5;
  int default_lookahead_ngram = 3;
  int default_lookahead_guess = 5;
  int max_lookahead_window = 16;
  int max_lookahead_ngram = 8;
  int max_lookahead_guess = 16;
  // Most stop strings per request (--max_stop_strings), and bytes per stop
  // string (--max_stop_bytes). The stop matcher scans its held-back text
  // (shorter than the longest stop string) once per stop string per step,
  // on the scheduler's thread: 16 x 1 KiB bounds that scan for everyone.
  int max_stop_strings = 16;
  int max_stop_bytes = 1024;
  int32_t vocab_size = 0;
  // Bytes of text one token can stand for: the vocabulary's longest token,
  // at least 4 (a character missing from the vocabulary may become one
  // unknown token). Set by FitLimitsToTokenizer; 0 turns the byte limits
  // below off.
  int max_token_bytes = 0;
};

// The prompt as the client gave it: exactly one of text, chat, token ids.
struct RawPrompt {
  enum class Kind { kNone, kText, kChat, kTokens };
  Kind kind = Kind::kNone;
  std::string text;
  std::vector<engine::ChatMessage> chat;
  // 64-bit so that a front end passes any id on, and BuildRequest alone
  // words the range.
  std::vector<int64_t> token_ids;
};

// The draft policy as the client gave it; 0 / empty / unset mean the
// default. Integers are 64-bit so that a front end passes any value on and
// BuildRequest alone words the range.
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
  int64_t decoding_length = 0;
  int64_t branch_length = 0;
  std::string name_space;
  // The requested sources (empty = the server's --draft_sources), each
  // mapped by the front end; kUnsupported keeps the client's wire value.
  struct Source {
    enum class Kind { kTrie, kNgram, kAssistant, kUnsupported };
    Kind kind = Kind::kUnsupported;
    int wire = 0;  // the client's value, for the kUnsupported message
  };
  std::vector<Source> sources;
  // Unset = the server default; 0 = no window for this request.
  std::optional<int64_t> lookahead_window;
  int64_t lookahead_ngram = 0;  // 0 = the server default, as is guess's
  int64_t lookahead_guess = 0;
};

// A request as the client sent it, before validation.
struct RawRequest {
  RawPrompt prompt;
  // Unset = the server default (gRPC's 0 is unset); set, within
  // [1, the context left].
  std::optional<int64_t> max_new_tokens;
  // 0 = greedy; top_p 0 = off; top_k 0 = off.
  float temperature = 0;
  float top_p = 0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  RawDraftParams draft;
  // Unset = no logprobs; else alternatives per output token, within
  // [0, engine::kMaxTopLogprobs].
  std::optional<int64_t> logprobs;
};

// `limits` with max_token_bytes from `tokenizer`'s vocabulary.
RequestLimits FitLimitsToTokenizer(RequestLimits limits,
                                   const engine::Tokenizer& tokenizer);

// Byte limits on text, checked before any tokenizing. Every token stands
// for at most max_token_bytes bytes, so a text longer than N x
// max_token_bytes needs more than N tokens and cannot fit: rejecting it
// unread loses nothing. (Except text the tokenizer drops, such as the 21
// bytes SmolLM2's vocabulary lacks, which no one sends on purpose.)
// A text prompt, or a chat's roles and contents together:
// max_prompt_tokens x max_token_bytes.
int64_t MaxPromptBytes(const RequestLimits& limits);
// Tokenize's input: max_context_tokens x max_token_bytes.
int64_t MaxTokenizeBytes(const RequestLimits& limits);

// OK iff `prompt`'s text is within MaxPromptBytes and a chat has at most
// max_prompt_tokens messages (every template gives each message at least
// one token); else INVALID_ARGUMENT naming the field, its size and the
// limit. Reads sizes only.
absl::Status CheckPromptBytes(const RawPrompt& prompt,
                              const RequestLimits& limits);
// The same for Tokenize's input, against MaxTokenizeBytes and
// max_context_tokens messages.
absl::Status CheckTokenizeBytes(const RawPrompt& input,
                                const RequestLimits& limits);

// OK iff there are at most max_stop_strings stop strings, each non-empty,
// valid UTF-8 and at most max_stop_bytes long; else INVALID_ARGUMENT naming
// stop[i].
absl::Status CheckStopStrings(absl::Span<const std::string> stop,
                              const RequestLimits& limits);


// Checks what costs nothing first (stop strings, sampling, drafts, the
// prompt's bytes), then tokenizes the prompt and checks its tokens and
// max_new_tokens. Every error is INVALID_ARGUMENT naming the field, its
// value (client strings through QuoteInput) and the range or limit.
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

// The draft policy of `draft` under `limits` (sampling left default).
// INVALID_ARGUMENT naming the field (draft.mode, draft.decoding_length,
// draft.branch_length, draft.namespace, draft.sources[i],
// draft.lookahead_window/_ngram/_guess), its value and the range.
absl::StatusOr<DraftPolicy> BuildDraftPolicy(const RawDraftParams& draft,
                                             const RequestLimits& limits);

// OK iff the defaults and maxima of `limits` are consistent: 0 <= default
// <= max for W, N, G and N's default and max 0 or >= 2; else
// INVALID_ARGUMENT naming the flags.
absl::Status CheckLookaheadLimits(const RequestLimits& limits);

// OK iff every id is in [0, vocab_size); else a FieldError naming
// `field`[i] of the first one that is not.
absl::Status CheckTokenIds(absl::Span<const int32_t> ids, int32_t vocab_size,
                           absl::string_view field);
absl::Status CheckTokenIds(absl::Span<const int64_t> ids, int32_t vocab_size,
                           absl::string_view field);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_REQUEST_BUILDER_H_
