#include "verifysvc/api/openai_api.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/testing/byte_tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace lookahead::verifysvc {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr char kModel[] = "tiny-model";

absl::StatusOr<OpenAiRequest> Chat(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, body, kModel);
}

absl::StatusOr<OpenAiRequest> Completions(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body, kModel);
}

// A chat body with `extra` fields ("" or `"key": value, ...`).
std::string ChatBody(const std::string& extra) {
  return absl::StrCat(R"({"model": "tiny-model", "messages": [{"role": )"
                      R"("user", "content": "hi"}])",
                      extra.empty() ? "" : ", ", extra, "}");
}

// Expects `got` to fail with `code`, param `param` and a message holding
// `message`.
void ExpectError(const absl::StatusOr<OpenAiRequest>& got,
                 absl::StatusCode code, const std::string& param,
                 const std::string& message) {
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), code) << got.status();
  EXPECT_EQ(OpenAiParam(got.status()), param) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(message));
}

void ExpectBadParam(const std::string& body, const std::string& param,
                    const std::string& message) {
  ExpectError(Chat(body), absl::StatusCode::kInvalidArgument, param, message);
}

TEST(OpenAiParseTest, ChatMapsEveryField) {
  absl::StatusOr<OpenAiRequest> r = Chat(
      R"({"model": "tiny-model", "messages": [
           {"role": "system", "content": "be brief"},
           {"role": "user", "content": [{"type": "text", "text": "a"},
                                        {"type": "text", "text": "b"}]},
           {"role": "assistant", "content": "ok"},
           {"role": "developer", "content": "dev"}],
          "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 42,
          "stop": ["x", "y"], "n": 1, "logprobs": false, "user": "u1",
          "stream": true, "stream_options": {"include_usage": true},
          "some_future_field": {"a": [1, 2]},
          "lookahead": {"sources": ["trie", "ngram"], "decoding_length": 9,
                        "branch_length": 3, "mode": "parallel",
                        "namespace": "docs"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->raw.prompt.kind, RawPrompt::Kind::kChat);
  ASSERT_EQ(r->raw.prompt.chat.size(), 4u);
  EXPECT_EQ(r->raw.prompt.chat[1].content, "ab");
  EXPECT_EQ(r->raw.prompt.chat[3].role, "system");
  EXPECT_EQ(r->raw.max_new_tokens, 7);
  EXPECT_FLOAT_EQ(r->raw.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->raw.top_p, 0.9f);
  EXPECT_EQ(r->raw.seed, 42u);
  EXPECT_EQ(r->raw.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->raw.draft.mode, RawDraftParams::Mode::kTrieParallel);
  EXPECT_EQ(r->raw.draft.decoding_length, 9);
  EXPECT_EQ(r->raw.draft.branch_length, 3);
  EXPECT_EQ(r->raw.draft.name_space, "docs");
  ASSERT_EQ(r->raw.draft.sources.size(), 2u);
  EXPECT_EQ(r->raw.draft.sources[1].kind, RawDraftParams::Source::Kind::kNgram);
}

TEST(OpenAiParseTest, DefaultsFollowOpenAi) {
  absl::StatusOr<OpenAiRequest> chat = Chat(ChatBody(""));
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_FLOAT_EQ(chat->raw.temperature, 1.0f);
  EXPECT_EQ(chat->raw.max_new_tokens, 0);  // the server's default
  EXPECT_FALSE(chat->stream);
  absl::StatusOr<OpenAiRequest> text =
      Completions(R"({"model": "tiny-model", "prompt": "hello"})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->raw.prompt.kind, RawPrompt::Kind::kText);
  EXPECT_EQ(text->raw.max_new_tokens, kDefaultCompletionsMaxTokens);
  // null is absent.
  ASSERT_TRUE(Chat(ChatBody(R"("temperature": null, "stop": null)")).ok());
  // max_completion_tokens wins over max_tokens.
  absl::StatusOr<OpenAiRequest> both =
      Chat(ChatBody(R"("max_tokens": 5, "max_completion_tokens": 3)"));
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->raw.max_new_tokens, 3);
}

TEST(OpenAiParseTest, CompletionsPromptForms) {
  absl::StatusOr<OpenAiRequest> ids =
      Completions(R"({"model": "tiny-model", "prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->raw.prompt.kind, RawPrompt::Kind::kTokens);
  EXPECT_EQ(ids->raw.prompt.token_ids, (std::vector<int32_t>{1, 2, 3}));
  absl::StatusOr<OpenAiRequest> one =
      Completions(R"({"model": "tiny-model", "prompt": ["only"]})");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->raw.prompt.text, "only");
  ExpectError(Completions(R"({"model": "tiny-model", "prompt": ["a", "b"]})"),
              absl::StatusCode::kInvalidArgument, "prompt",
              "holds 2 prompts; send one per request");
  ExpectError(Completions(R"({"model": "tiny-model", "prompt": [1, -2]})"),
              absl::StatusCode::kInvalidArgument, "prompt[1]",
              "must be a token id");
  ExpectError(Completions(R"({"model": "tiny-model", "prompt": 5})"),
              absl::StatusCode::kInvalidArgument, "prompt",
              "prompt must be a string or a list of token ids");
  ExpectError(Completions(R"({"model": "tiny-model"})"),
              absl::StatusCode::kInvalidArgument, "prompt",
              "prompt is required");
}

TEST(OpenAiParseTest, MalformedBodies) {
  ExpectBadParam("{\"model\": ", "", "not valid JSON");
  ExpectBadParam("", "", "not valid JSON");
  ExpectBadParam("[1, 2]", "", "must be a JSON object");
  // Invalid UTF-8 inside a string.
  ExpectBadParam(ChatBody("\"user\": \"a\xff\xfe\""), "", "not valid JSON");
  std::string deep = std::string(100, '[') + std::string(100, ']');
  ExpectBadParam(ChatBody("\"x\": " + deep), "", "nests deeper than 32");
}

TEST(OpenAiParseTest, MissingFields) {
  ExpectBadParam(R"({"messages": [{"role": "user", "content": "hi"}]})",
                 "model", "model is required; this server serves");
  ExpectBadParam(R"({"model": "tiny-model"})", "messages",
                 "messages is required");
  ExpectBadParam(R"({"model": "tiny-model", "messages": [{"role": "user"}]})",
                 "messages[0].content", "messages[0].content is required");
  ExpectBadParam(R"({"model": "tiny-model", "messages": [{"content": "x"}]})",
                 "messages[0].role", "must be a string");
}

TEST(OpenAiParseTest, WrongModelIsNotFound) {
  absl::StatusOr<OpenAiRequest> r = Chat(
      R"({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})");
  ExpectError(r, absl::StatusCode::kNotFound, "model",
              "\"gpt-4\" does not exist; this server serves \"tiny-model\"");
  json error = json::parse(ErrorJson(r.status()))["error"];
  EXPECT_EQ(error["code"], "model_not_found");
  EXPECT_EQ(error["type"], "not_found_error");
  EXPECT_EQ(HttpStatusOf(r.status()), 404);
}

TEST(OpenAiParseTest, WrongTypesNameTheParam) {
  ExpectBadParam(ChatBody(R"("max_tokens": "7")"), "max_tokens",
                 "max_tokens must be an integer");
  ExpectBadParam(ChatBody(R"("max_tokens": 1.5)"), "max_tokens",
                 "must be an integer");
  ExpectBadParam(ChatBody(R"("temperature": "hot")"), "temperature",
                 "temperature must be a number");
  ExpectBadParam(ChatBody(R"("top_p": [1])"), "top_p", "must be a number");
  ExpectBadParam(ChatBody(R"("seed": 1.5)"), "seed", "must be an integer");
  ExpectBadParam(ChatBody(R"("stop": 3)"), "stop",
                 "stop must be a string or a list of strings");
  ExpectBadParam(ChatBody(R"("stop": ["a", 3])"), "stop[1]",
                 "must be a string");
  ExpectBadParam(ChatBody(R"("stream": "yes")"), "stream", "must be a boolean");
  ExpectBadParam(ChatBody(R"("stream_options": {"include_usage": 1})"),
                 "stream_options.include_usage", "must be a boolean");
  ExpectBadParam(ChatBody(R"("messages": "hi")"), "messages",
                 "must be an array");
  ExpectBadParam(ChatBody(R"("user": 5)"), "user", "must be a string");
  ExpectBadParam(ChatBody(R"("lookahead": [])"), "lookahead",
                 "must be an object");
  ExpectBadParam(ChatBody(R"("lookahead": {"decoding_length": "8"})"),
                 "lookahead.decoding_length", "must be an integer");
  ExpectBadParam(ChatBody(R"("lookahead": {"sources": ["magic"]})"),
                 "lookahead.sources[0]", "must be \"trie\"");
  ExpectBadParam(ChatBody(R"("lookahead": {"mode": "fast"})"), "lookahead.mode",
                 "must be \"off\"");
  ExpectBadParam(ChatBody(R"("lookahead": {"namespace": 3})"),
                 "lookahead.namespace", "must be a string");
  ExpectBadParam(
      R"({"model": "tiny-model", "messages": [{"role": "user", "content":
          [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
      "messages[0].content[0]", "only text content is supported");
}

TEST(OpenAiParseTest, LookaheadWindowZeroIsSetAbsentOrNullIsUnset) {
  absl::StatusOr<OpenAiRequest> off =
      Chat(ChatBody(R"("lookahead": {"lookahead_window": 0})"));
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_TRUE(off->raw.draft.lookahead_window.has_value());
  EXPECT_EQ(*off->raw.draft.lookahead_window, 0);
  absl::StatusOr<OpenAiRequest> three = Chat(ChatBody(
      R"("lookahead": {"lookahead_window": 3, "lookahead_ngram": 4,
                       "lookahead_guess": 2})"));
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->raw.draft.lookahead_window, 3);
  EXPECT_EQ(three->raw.draft.lookahead_ngram, 4);
  EXPECT_EQ(three->raw.draft.lookahead_guess, 2);
  for (const char* unset :
       {"", R"("lookahead": {})", R"("lookahead": {"lookahead_window": null})",
        R"("lookahead": null)"}) {
    SCOPED_TRACE(unset);
    absl::StatusOr<OpenAiRequest> r = Chat(ChatBody(unset));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->raw.draft.lookahead_window.has_value());
  }
  ExpectBadParam(ChatBody(R"("lookahead": {"lookahead_window": -1})"),
                 "lookahead.lookahead_window", "must be an integer in [0, ");
  ExpectBadParam(ChatBody(R"("lookahead": {"lookahead_window": "0"})"),
                 "lookahead.lookahead_window", "must be an integer");
}

TEST(OpenAiParseTest, MaxTokensRange) {
  ExpectBadParam(ChatBody(R"("max_tokens": -1)"), "max_tokens",
                 "max_tokens = -1 must be >= 1");
  ExpectBadParam(ChatBody(R"("max_tokens": 0)"), "max_tokens",
                 "max_tokens = 0 must be >= 1");
  ExpectBadParam(ChatBody(R"("max_tokens": 1e30)"), "max_tokens",
                 "must be an integer");
  ExpectBadParam(ChatBody(R"("max_tokens": 99999999999999999999)"),
                 "max_tokens", "must be an integer");
  // A huge but representable value reaches BuildRequest, which names it
  // (see BuildRequestErrorsUseOpenAiNames).
  ASSERT_TRUE(Chat(ChatBody(R"("max_tokens": 9223372036854775807)")).ok());
}

TEST(OpenAiParseTest, UnsupportedFeaturesAreRejected) {
  ExpectBadParam(ChatBody(R"("n": 2)"), "n",
                 "n = 2 is not supported: this server returns one choice");
  ExpectBadParam(ChatBody(R"("n": "2")"), "n", "n must be an integer");
  ExpectBadParam(ChatBody(R"("logprobs": true)"), "logprobs",
                 "logprobs is not supported by this server");
  ExpectBadParam(ChatBody(R"("top_logprobs": 3)"), "top_logprobs",
                 "top_logprobs is not supported");
  ExpectBadParam(ChatBody(R"("presence_penalty": 0.5)"), "presence_penalty",
                 "not supported");
  ExpectBadParam(ChatBody(R"("logit_bias": {"1": 5})"), "logit_bias",
                 "not supported");
  ExpectBadParam(ChatBody(R"("tools": [{"type": "function"}])"), "tools",
                 "not supported");
  ExpectError(Completions(R"({"model": "tiny-model", "prompt": "a",
                              "logprobs": 2})"),
              absl::StatusCode::kInvalidArgument, "logprobs", "not supported");
  ExpectError(Completions(R"({"model": "tiny-model", "prompt": "a",
                              "echo": true})"),
              absl::StatusCode::kInvalidArgument, "echo", "not supported");
  // Their neutral values are fine.
  ASSERT_TRUE(Chat(ChatBody(R"("n": 1, "logprobs": false, "top_logprobs": 0,
                               "presence_penalty": 0, "logit_bias": {},
                               "tools": [])"))
                  .ok());
}

// BuildRequest's errors through ToOpenAiError, on a byte-level tokenizer.
class OpenAiBuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::TokenizerSpec spec =
        engine::ByteLevelSpec({"<|im_start|>", "<|im_end|>"});
    spec.eos_id = 257;
    tokenizer_ = engine::MustCreateTokenizer(std::move(spec));
    ASSERT_NE(tokenizer_, nullptr);
    RequestLimits limits;
    limits.max_context_tokens = 64;
    limits.max_prompt_tokens = 48;
    limits.vocab_size = 258;
    limits_ = FitLimitsToTokenizer(limits, *tokenizer_);
  }

  absl::Status Build(
      const std::string& body,
      OpenAiEndpoint endpoint = OpenAiEndpoint::kChatCompletions) {
    absl::StatusOr<OpenAiRequest> parsed =
        ParseOpenAiRequest(endpoint, body, kModel);
    if (!parsed.ok()) return parsed.status();
    return ToOpenAiError(
        BuildRequest(parsed->raw, *tokenizer_, limits_).status());
  }

  std::unique_ptr<engine::Tokenizer> tokenizer_;
  RequestLimits limits_;
};

TEST_F(OpenAiBuildTest, ValidRequestBuilds) {
  EXPECT_TRUE(Build(ChatBody(R"("max_tokens": 4, "temperature": 0)")).ok());
}

TEST_F(OpenAiBuildTest, BuildRequestErrorsUseOpenAiNames) {
  absl::Status s = Build(ChatBody(R"("max_tokens": 9223372036854775807)"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenAiParam(s), "max_tokens") << s;
  EXPECT_THAT(s.message(), HasSubstr("max_tokens"));

  s = Build(ChatBody(R"("temperature": -1)"));
  EXPECT_EQ(OpenAiParam(s), "temperature") << s;
  EXPECT_THAT(s.message(), HasSubstr("temperature is -1"));

  s = Build(ChatBody(R"("top_p": 2)"));
  EXPECT_EQ(OpenAiParam(s), "top_p") << s;

  s = Build(R"({"model": "tiny-model", "messages": [{"role": "tool",
               "content": "x"}]})");
  EXPECT_EQ(OpenAiParam(s), "messages[0].role") << s;
  EXPECT_THAT(s.message(), HasSubstr("messages[0].role is"));

  s = Build(ChatBody(R"("lookahead": {"decoding_length": 100000})"));
  EXPECT_EQ(OpenAiParam(s), "lookahead.decoding_length") << s;

  s = Build(R"({"model": "tiny-model", "prompt": [1, 9999]})",
            OpenAiEndpoint::kCompletions);
  EXPECT_EQ(OpenAiParam(s), "prompt[1]") << s;

  s = Build(absl::StrCat(R"({"model": "tiny-model", "prompt": ")",
                         std::string(5000, 'a'), "\"}"),
            OpenAiEndpoint::kCompletions);
  EXPECT_EQ(OpenAiParam(s), "prompt") << s;
  EXPECT_EQ(HttpStatusOf(s), 400);
}

TEST_F(OpenAiBuildTest, LookaheadWindowZeroTurnsADefaultWindowOff) {
  limits_.default_lookahead_window = 5;  // --lookahead_window=5
  auto window = [&](const std::string& lookahead) -> absl::StatusOr<int> {
    absl::StatusOr<OpenAiRequest> parsed = Chat(ChatBody(lookahead));
    if (!parsed.ok()) return parsed.status();
    absl::StatusOr<GenerationRequest> built =
        BuildRequest(parsed->raw, *tokenizer_, limits_);
    if (!built.ok()) return ToOpenAiError(built.status());
    return built->draft.lookahead_window;
  };
  EXPECT_EQ(window(R"("lookahead": {"lookahead_window": 0})").value_or(-1), 0);
  EXPECT_EQ(window(R"("lookahead": {"lookahead_window": 3})").value_or(-1), 3);
  EXPECT_EQ(window(R"("lookahead": {"sources": ["ngram"]})").value_or(-1), 5);
  EXPECT_EQ(window(R"("lookahead": {"lookahead_window": null})").value_or(-1),
            5);
  const absl::StatusOr<int> wide =
      window(R"("lookahead": {"lookahead_window": 17})");
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenAiParam(wide.status()), "lookahead.lookahead_window")
      << wide.status();
  EXPECT_THAT(wide.status().message(),
              HasSubstr("lookahead.lookahead_window = 17 is outside [0, 16]"));
}

TEST_F(OpenAiBuildTest, TenThousandStopStrings) {
  std::string stops = "[";
  for (int i = 0; i < 10000; ++i) {
    absl::StrAppend(&stops, i ? ", " : "", "\"s", i, "\"");
  }
  stops += "]";
  absl::Status s = Build(ChatBody(absl::StrCat("\"stop\": ", stops)));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenAiParam(s), "stop") << s;
  EXPECT_THAT(s.message(), HasSubstr("stop has 10000 strings; use at most"));
}

TEST(OpenAiErrorTest, HttpStatusAndShape) {
  EXPECT_EQ(HttpStatusOf(absl::InvalidArgumentError("x")), 400);
  EXPECT_EQ(HttpStatusOf(absl::FailedPreconditionError("x")), 400);
  EXPECT_EQ(HttpStatusOf(absl::UnauthenticatedError("x")), 401);
  EXPECT_EQ(HttpStatusOf(absl::PermissionDeniedError("x")), 403);
  EXPECT_EQ(HttpStatusOf(absl::NotFoundError("x")), 404);
  EXPECT_EQ(HttpStatusOf(absl::ResourceExhaustedError("x")), 429);
  EXPECT_EQ(HttpStatusOf(absl::UnavailableError("x")), 503);
  EXPECT_EQ(HttpStatusOf(absl::InternalError("x")), 500);
  json e = json::parse(
      ErrorJson(WithParam(absl::InvalidArgumentError("bad n"), "n")));
  EXPECT_EQ(e["error"]["message"], "bad n");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_TRUE(e["error"]["code"].is_null());
  json r = json::parse(ErrorJson(absl::ResourceExhaustedError("slow down")));
  EXPECT_EQ(r["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(r["error"]["param"].is_null());
}

GenerationOutput Output(const std::string& text, FinishReason finish) {
  GenerationOutput out;
  out.text = text;
  out.token_ids = {1};
  out.finish_reason = finish;
  if (finish != FinishReason::kNone) {
    Usage usage;
    usage.prompt_tokens = 5;
    usage.output_tokens = 3;
    usage.decoding_steps = 2;
    usage.edl = 1.5;
    usage.draft_tokens = 4;
    usage.accepted_draft_tokens = 1;
    usage.sources.push_back({engine::DraftSourceTag::kTrie, 4, 1});
    out.usage = usage;
  }
  return out;
}

// The JSON objects of an SSE text, "[DONE]" as a string.
std::vector<json> Events(const std::string& sse) {
  std::vector<json> events;
  size_t pos = 0;
  while (pos < sse.size()) {
    EXPECT_EQ(sse.compare(pos, 6, "data: "), 0) << sse.substr(pos);
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    std::string data = sse.substr(pos + 6, end - pos - 6);
    events.push_back(data == "[DONE]" ? json(data) : json::parse(data));
    pos = end + 2;
  }
  return events;
}

TEST(OpenAiResponderTest, ChatStreamWithUsage) {
  OpenAiResponder r(OpenAiEndpoint::kChatCompletions, "chatcmpl-1", 100, kModel,
                    /*include_usage=*/true);
  std::string sse = r.StreamStart();
  sse += r.StreamOutput(Output("Hel", FinishReason::kNone));
  sse += r.StreamOutput(Output("lo", FinishReason::kEos));
  sse += OpenAiResponder::StreamEnd();
  std::vector<json> e = Events(sse);
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(e[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(e[1]["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(e[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(e[2]["choices"][0]["delta"]["content"], "lo");
  EXPECT_EQ(e[3]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(e[4]["choices"].empty());
  EXPECT_EQ(e[4]["usage"]["completion_tokens"], 3);
  EXPECT_EQ(e[4]["usage"]["total_tokens"], 8);
  EXPECT_EQ(e[4]["usage"]["lookahead"]["edl"], 1.5);
  EXPECT_EQ(e[4]["usage"]["lookahead"]["sources"][0]["source"], "trie");
  EXPECT_EQ(e[5], "[DONE]");
}

TEST(OpenAiResponderTest, CompletionNonStreaming) {
  OpenAiResponder r(OpenAiEndpoint::kCompletions, "cmpl-1", 100, kModel, false);
  r.Add(Output("a", FinishReason::kNone));
  r.Add(Output("b", FinishReason::kLength));
  json body = json::parse(r.Body());
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "ab");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(body["usage"]["lookahead"]["accepted_draft_tokens"], 1);
  EXPECT_EQ(body["model"], kModel);
}

TEST(OpenAiResponderTest, ErrorEventAndIds) {
  std::vector<json> e =
      Events(OpenAiResponder::StreamError(absl::UnavailableError("draining")));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["error"]["message"], "draining");
  EXPECT_EQ(e[0]["error"]["type"], "service_unavailable");
  std::string a = NewResponseId("chatcmpl-");
  EXPECT_EQ(a.size(), 9u + 24u);
  EXPECT_NE(a, NewResponseId("chatcmpl-"));
}

TEST(OpenAiModelsTest, ListsTheModel) {
  json models = json::parse(ModelsJson(kModel, 7));
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], kModel);
}

}  // namespace
}  // namespace lookahead::verifysvc
