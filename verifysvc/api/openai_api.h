// The OpenAI-compatible wire format, without sockets: a JSON request body
// of POST /v1/chat/completions or /v1/completions becomes a RawRequest (then
// the shared BuildRequest validates it), and the scheduler's outputs become
// chat.completion / text_completion objects or their SSE chunks. Errors are
// OpenAI's {"error": {"message", "type", "param", "code"}} with the HTTP
// status of their absl code; "param" is the JSON path of the offending
// field ("messages[2].content", "stop[1]", "lookahead.decoding_length"),
// attached where the error is made, or null when the body as a whole is
// wrong (not JSON, not an object, too deep, too large). Each limit is
// worded once, by BuildRequest (see ToOpenAiError), the same as over gRPC
// but for the field's name. JSON through nlohmann-json; nothing here reads
// or writes JSON by hand. Pure functions and a per-request OpenAiResponder
// (not thread-safe: one per request, used from one thread at a time).
//
// Deliberate differences from OpenAI (each a 400 naming the field, never a
// silent change of meaning): n != 1, echo, best_of > 1, suffix, non-zero
// presence/frequency penalties, logit_bias, tools / functions, response_format
// other than text, and message content other than text. Unknown fields are
// ignored as OpenAI does; a field set to null counts as absent. logprobs
// (chat: logprobs + top_logprobs; completions: logprobs = N) go up to
// engine::kMaxTopLogprobs (20) alternatives on both endpoints (OpenAI's
// legacy completions stop at 5); with sampling they are the distribution
// the token was drawn from, after temperature / top_k / top_p
// (engine/model/token_logprobs.h).
#ifndef LOOKAHEAD_VERIFYSVC_API_OPENAI_API_H_
#define LOOKAHEAD_VERIFYSVC_API_OPENAI_API_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/text/tokenizer.h"
#include "verifysvc/serving/output.h"
#include "verifysvc/serving/request_builder.h"

namespace lookahead::verifysvc {

enum class OpenAiEndpoint { kChatCompletions, kCompletions };

// A parsed request: what BuildRequest takes, and how to answer.
struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kChatCompletions;
  RawRequest raw;
  bool stream = false;
  // stream_options.include_usage: a last chunk with empty choices and usage.
  bool include_usage = false;
  // The key raw.max_new_tokens came from ("max_tokens" or
  // "max_completion_tokens"): the param of its errors.
  std::string max_tokens_key = "max_tokens";
};

// Most nesting levels of a request body; deeper bodies are a 400.
inline constexpr int kMaxJsonDepth = 32;
// max_tokens of a /v1/completions request that sets none (OpenAI's default).
inline constexpr int kDefaultCompletionsMaxTokens = 16;

// Parses `body` for `endpoint`. `model_name` is the loaded model: `model`
// is required and must equal it (NOT_FOUND, code model_not_found, else).
// Errors are INVALID_ARGUMENT with the parameter attached (see OpenAiParam):
// a missing prompt/messages/model, a known field of the wrong type or not a
// 64-bit integer, unsupported features; with none attached (the body as a
// whole): malformed JSON or invalid UTF-8, a body that is not an object or
// nests deeper than kMaxJsonDepth. Ranges are left to BuildRequest, which
// words each limit once for every front end (an explicit max_tokens of 0
// is passed on and is an error there, as in OpenAI). temperature defaults
// to 1 as in OpenAI (set 0 for greedy); chat max_tokens defaults to the
// server's --default_max_new_tokens, completions' to
// kDefaultCompletionsMaxTokens.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint,
                                                 absl::string_view body,
                                                 absl::string_view model_name);

// BuildRequest's error for `request` with the OpenAI parameter names: the
// field attached by FieldError (max_new_tokens, sampling.temperature,
// chat.messages[i].role, tokens.ids[i], text, draft.*, stop[i], ...) mapped
// from its structure (request.max_tokens_key, temperature,
// messages[i].role, prompt[i], prompt, lookahead.*, stop[i], ...), attached
// as the param and put in place of the field at the head of the message.
// A status with a param already, or with no field (the request as a
// whole; other codes), passes through unchanged.
absl::Status ToOpenAiError(const absl::Status& status,
                           const OpenAiRequest& request);

// `status` with `param` attached (the "param" of its error object).
absl::Status WithParam(absl::Status status, absl::string_view param);
// The attached parameter, or "" if none (null in the error object).
std::string OpenAiParam(const absl::Status& status);
// `status` with the error object's "code" attached (e.g. model_not_found).
absl::Status WithErrorCode(absl::Status status, absl::string_view code);

// The HTTP status for an absl code: INVALID_ARGUMENT, FAILED_PRECONDITION,
// OUT_OF_RANGE 400; UNAUTHENTICATED 401; PERMISSION_DENIED 403; NOT_FOUND
// 404; RESOURCE_EXHAUSTED 429; UNAVAILABLE 503; others 500.
int HttpStatusOf(const absl::Status& status);
// {"error": {"message", "type", "param", "code"}}; type from the HTTP status
// (invalid_request_error, authentication_error, permission_error,
// not_found_error, rate_limit_error, service_unavailable, server_error).
// REQUIRES: !status.ok().
std::string ErrorJson(const absl::Status& status);
// The same object for an HTTP status with no absl code (413, 405); param
// and code null when empty.
std::string HttpErrorJson(int http_status, absl::string_view message,
                          absl::string_view param = "",
                          absl::string_view code = "");

// GET /v1/models: a list with the one loaded model.
std::string ModelsJson(absl::string_view model_name, int64_t created);

// Maps one request's outputs to OpenAI objects. Streaming: StreamStart
// once, then StreamOutput per output (each returns whole SSE events, maybe
// none), then StreamEnd. Non-streaming: Add each output, then Body.
class OpenAiResponder {
 public:
  // `id` e.g. "chatcmpl-<hex>"; `created` in Unix seconds. `tokenizer`
  // (not owned, must outlive this; may be null) spells the tokens of
  // logprobs; without one they are "token_id:N".
  OpenAiResponder(OpenAiEndpoint endpoint, std::string id, int64_t created,
                  std::string model, bool include_usage,
                  const engine::Tokenizer* tokenizer = nullptr);

  // The first chat chunk (delta.role "assistant"); "" for completions.
  std::string StreamStart();
  // Events for one output: a content chunk if it has text or logprobs
  // (choices[0].logprobs: the output's tokens, in OpenAI's chat or legacy
  // completions shape; null without logprobs), and on the last one a chunk
  // with finish_reason (and, with include_usage, the usage chunk with
  // empty choices). Usage carries OpenAI's
  // prompt_tokens_details.cached_tokens (the prefix cache's hits) beside
  // the lookahead extension.
  std::string StreamOutput(const GenerationOutput& output);
  // "data: [DONE]\n\n".
  static std::string StreamEnd();
  // An error after the stream began: one `data: {"error": ...}` event (the
  // stream then ends without [DONE]; the openai client raises APIError).
  static std::string StreamError(const absl::Status& status);

  void Add(const GenerationOutput& output);
  // The chat.completion / text_completion object of what was added.
  std::string Body() const;

 private:
  // Advances text_offset_ past `logprobs`' tokens.
  std::string Chunk(const std::string& text, const char* finish,
                    absl::Span<const engine::ChoiceLogprobs> logprobs = {});
  std::string UsageChunk() const;

  const OpenAiEndpoint endpoint_;
  const std::string id_;
  const int64_t created_;
  const std::string model_;
  const bool include_usage_;
  const engine::Tokenizer* const tokenizer_;  // null: tokens by id
  std::string text_;  // Add's text so far
  std::vector<engine::ChoiceLogprobs> logprobs_;  // Add's logprobs so far
  // Streamed completions: characters of text before the next token (the
  // legacy logprobs' text_offset).
  int64_t text_offset_ = 0;
  FinishReason finish_ = FinishReason::kNone;
  Usage usage_;
};

// A fresh response id: prefix + 24 hex digits.
std::string NewResponseId(absl::string_view prefix);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_API_OPENAI_API_H_
