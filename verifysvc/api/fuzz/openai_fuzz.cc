// libFuzzer target for the OpenAI JSON -> RawRequest mapping
// (verifysvc/api/openai_api.cc): parses arbitrary bytes as a chat or a
// completions body, and renders what comes out (the error object, or a
// response and its SSE chunks whose text is the parsed prompt and the raw
// input). Any crash, sanitizer report, escaping exception, or an error
// object that is not valid JSON is a bug. Built and run by tools/fuzz.sh
// (clang -fsanitize=fuzzer,address); not a Bazel target.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "verifysvc/api/openai_api.h"
#include "verifysvc/serving/field_error.h"

namespace lookahead::verifysvc {
namespace {

void CheckJson(const std::string& text) {
  if (!nlohmann::json::accept(text)) std::abort();
}

void Render(OpenAiEndpoint endpoint, const std::string& text, bool stream) {
  OpenAiResponder responder(endpoint, NewResponseId("fuzz-"), 1, "model",
                            stream);
  GenerationOutput first;
  first.text = text;
  GenerationOutput last;
  last.text = text.substr(0, 7);
  last.finish_reason = FinishReason::kStopString;
  last.usage = Usage{};
  last.usage->sources.push_back({engine::DraftSourceTag::kNgram, 3, 1});
  std::string sse = responder.StreamStart() + responder.StreamOutput(first) +
                    responder.StreamOutput(last);
  responder.Add(first);
  responder.Add(last);
  CheckJson(responder.Body());
  if (sse.empty()) std::abort();
}

void FuzzOne(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const OpenAiEndpoint endpoint = (data[0] & 1)
                                      ? OpenAiEndpoint::kCompletions
                                      : OpenAiEndpoint::kChatCompletions;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(endpoint, body, "model");
  if (!parsed.ok()) {
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument &&
        parsed.status().code() != absl::StatusCode::kNotFound) {
      std::abort();
    }
    CheckJson(ErrorJson(parsed.status()));
    return;
  }
  // A BuildRequest-style message made of client bytes, renamed.
  CheckJson(ErrorJson(ToOpenAiError(
      FieldError("sampling.temperature", " is " + body.substr(0, 64)),
      *parsed)));
  const RawPrompt& prompt = parsed->raw.prompt;
  std::string text = prompt.text;
  for (const engine::ChatMessage& m : prompt.chat) text += m.content;
  Render(endpoint, text, parsed->stream);
  Render(endpoint, body, !parsed->stream);  // raw bytes, maybe bad UTF-8
}

}  // namespace
}  // namespace lookahead::verifysvc

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lookahead::verifysvc::FuzzOne(data, size);
  return 0;
}
