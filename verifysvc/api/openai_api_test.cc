#include "verifysvc/api/openai_api.h"

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/testing/byte_tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "verifysvc/serving/field_error.h"

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
  EXPECT_FALSE(chat->raw.max_new_tokens.has_value());  // the server's default
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
  EXPECT_EQ(ids->raw.prompt.token_ids, (std::vector<int64_t>{1, 2, 3}));
  absl::StatusOr<OpenAiRequest> one =
      Completions(R"({"model": "tiny-model", "prompt": ["only"]})");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->raw.prompt.text, "only");
  ExpectError(Completions(R"({"model": "tiny-model", "prompt": ["a", "b"]})"),
              absl::StatusCode::kInvalidArgument, "prompt",
              "holds 2 prompts; send one per request");
  // Any 64-bit id goes on; BuildRequest checks the vocabulary.
  absl::StatusOr<OpenAiRequest> negative =
      Completions(R"({"model": "tiny-model", "prompt": [1, -2]})");
  ASSERT_TRUE(negative.ok()) << negative.status();
  EXPECT_EQ(negative->raw.prompt.token_ids, (std::vector<int64_t>{1, -2}));
  ExpectError(Completions(R"({"model": "tiny-model", "prompt": [1, "2"]})"),
              absl::StatusCode::kInvalidArgument, "prompt[1]",
              "prompt[1] must be a 64-bit integer; got \"2\"");
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
                 "max_tokens must be a 64-bit integer; got \"7\"");
  ExpectBadParam(ChatBody(R"("max_tokens": 1.5)"), "max_tokens",
                 "max_tokens must be a 64-bit integer; got 1.5");
  ExpectBadParam(ChatBody(R"("temperature": "hot")"), "temperature",
                 "temperature must be a number");
  ExpectBadParam(ChatBody(R"("top_p": [1])"), "top_p", "must be a number");
  ExpectBadParam(ChatBody(R"("seed": 1.5)"), "seed",
                 "must be a 64-bit integer");
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
                 "lookahead.decoding_length", "must be a 64-bit integer");
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
  // Out of range is BuildRequest's to say (OpenAiBuildTest).
  ASSERT_TRUE(Chat(ChatBody(R"("lookahead": {"lookahead_window": -1})")).ok());
  ExpectBadParam(ChatBody(R"("lookahead": {"lookahead_window": "0"})"),
                 "lookahead.lookahead_window", "must be a 64-bit integer");
}

TEST(OpenAiParseTest, MaxTokensRange) {
  ExpectBadParam(ChatBody(R"("max_tokens": 1e30)"), "max_tokens",
                 "max_tokens must be a 64-bit integer; got 1e+30");
  ExpectBadParam(ChatBody(R"("max_tokens": 99999999999999999999)"),
                 "max_tokens", "must be a 64-bit integer");
  ExpectBadParam(ChatBody(R"("max_tokens": 18446744073709551615)"),
                 "max_tokens", "must be a 64-bit integer");
  // Any 64-bit value, 0 and negatives included, reaches BuildRequest,
  // which words the range once for every front end (see
  // OpenAiBuildTest.EveryLimitIsWordedAsOverGrpc).
  for (const char* value : {"0", "-1", "9223372036854775807"}) {
    SCOPED_TRACE(value);
    absl::StatusOr<OpenAiRequest> r =
        Chat(ChatBody(absl::StrCat(R"("max_tokens": )", value)));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->raw.max_new_tokens.has_value());
    EXPECT_EQ(absl::StrCat(*r->raw.max_new_tokens), value);
    EXPECT_EQ(r->max_tokens_key, "max_tokens");
  }
  absl::StatusOr<OpenAiRequest> newer =
      Chat(ChatBody(R"("max_completion_tokens": 0, "max_tokens": 5)"));
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_EQ(newer->raw.max_new_tokens, 0);
  EXPECT_EQ(newer->max_tokens_key, "max_completion_tokens");
}

TEST(OpenAiParseTest, UnsupportedFeaturesAreRejected) {
  ExpectBadParam(ChatBody(R"("n": 2)"), "n",
                 "n = 2 is not supported: this server returns one choice");
  ExpectBadParam(ChatBody(R"("n": "2")"), "n", "n must be a 64-bit integer");
  ExpectBadParam(ChatBody(R"("presence_penalty": 0.5)"), "presence_penalty",
                 "not supported");
  ExpectBadParam(ChatBody(R"("logit_bias": {"1": 5})"), "logit_bias",
                 "not supported");
  ExpectBadParam(ChatBody(R"("tools": [{"type": "function"}])"), "tools",
                 "not supported");
  ExpectError(Completions(R"({"model": "tiny-model", "prompt": "a",
                              "echo": true})"),
              absl::StatusCode::kInvalidArgument, "echo", "not supported");
  // Their neutral values are fine.
  ASSERT_TRUE(Chat(ChatBody(R"("n": 1, "logprobs": false, "top_logprobs": 0,
                               "presence_penalty": 0, "logit_bias": {},
                               "tools": [])"))
                  .ok());
}

TEST(OpenAiParseTest, ChatLogprobs) {
  auto logprobs = [](const std::string& extra) -> std::optional<int64_t> {
    absl::StatusOr<OpenAiRequest> r = Chat(ChatBody(extra));
    EXPECT_TRUE(r.ok()) << extra << ": " << r.status();
    return r.ok() ? r->raw.logprobs : std::nullopt;
  };
  EXPECT_EQ(logprobs(""), std::nullopt);
  EXPECT_EQ(logprobs(R"("logprobs": false)"), std::nullopt);
  EXPECT_EQ(logprobs(R"("logprobs": null, "top_logprobs": null)"),
            std::nullopt);
  // top_logprobs 0 asks for nothing, with or without logprobs (as vLLM).
  EXPECT_EQ(logprobs(R"("logprobs": false, "top_logprobs": 0)"), std::nullopt);
  EXPECT_EQ(logprobs(R"("logprobs": true)"), 0);
  EXPECT_EQ(logprobs(R"("logprobs": true, "top_logprobs": 0)"), 0);
  EXPECT_EQ(logprobs(R"("logprobs": true, "top_logprobs": 5)"), 5);
  EXPECT_EQ(logprobs(R"("logprobs": true, "top_logprobs": 20)"), 20);
  // top_logprobs needs logprobs: true, as OpenAI answers.
  ExpectBadParam(ChatBody(R"("top_logprobs": 3)"), "top_logprobs",
                 "top_logprobs = 3 needs logprobs: true");
  ExpectBadParam(ChatBody(R"("logprobs": false, "top_logprobs": 2)"),
                 "top_logprobs", "needs logprobs: true");
  // The range, worded as over gRPC (CheckLogprobs).
  ExpectBadParam(ChatBody(R"("logprobs": true, "top_logprobs": 21)"),
                 "top_logprobs",
                 "top_logprobs must be in [0, 20] (alternatives per token; "
                 "unset = no logprobs); got 21");
  ExpectBadParam(ChatBody(R"("logprobs": true, "top_logprobs": -1)"),
                 "top_logprobs", "top_logprobs must be in [0, 20]");
  ExpectBadParam(ChatBody(R"("top_logprobs": 99)"), "top_logprobs", "got 99");
  // Types.
  ExpectBadParam(ChatBody(R"("logprobs": 1)"), "logprobs",
                 "logprobs must be a boolean");
  ExpectBadParam(ChatBody(R"("logprobs": true, "top_logprobs": "3")"),
                 "top_logprobs", "must be a 64-bit integer");
  ExpectBadParam(ChatBody(R"("logprobs": true, "top_logprobs": 2.5)"),
                 "top_logprobs", "must be a 64-bit integer");
}

TEST(OpenAiParseTest, CompletionsLogprobs) {
  auto body = [](const std::string& extra) {
    return absl::StrCat(R"({"model": "tiny-model", "prompt": "a", )", extra,
                        "}");
  };
  auto logprobs = [&](const std::string& extra) -> std::optional<int64_t> {
    absl::StatusOr<OpenAiRequest> r = Completions(body(extra));
    EXPECT_TRUE(r.ok()) << extra << ": " << r.status();
    return r.ok() ? r->raw.logprobs : std::nullopt;
  };
  EXPECT_EQ(logprobs(R"("logprobs": null)"), std::nullopt);
  EXPECT_EQ(logprobs(R"("logprobs": false)"), std::nullopt);
  EXPECT_EQ(logprobs(R"("logprobs": 0)"), 0);
  EXPECT_EQ(logprobs(R"("logprobs": 5)"), 5);
  // Past OpenAI's 5, up to chat's 20.
  EXPECT_EQ(logprobs(R"("logprobs": 20)"), 20);
  EXPECT_EQ(logprobs(R"("logprobs": 3, "top_logprobs": 0)"), 3);
  ExpectError(Completions(body(R"("logprobs": 21)")),
              absl::StatusCode::kInvalidArgument, "logprobs",
              "logprobs must be in [0, 20] (alternatives per token; unset = "
              "no logprobs); got 21");
  ExpectError(Completions(body(R"("logprobs": -1)")),
              absl::StatusCode::kInvalidArgument, "logprobs", "got -1");
  ExpectError(Completions(body(R"("logprobs": true)")),
              absl::StatusCode::kInvalidArgument, "logprobs",
              "logprobs must be an integer");
  ExpectError(Completions(body(R"("logprobs": 1.5)")),
              absl::StatusCode::kInvalidArgument, "logprobs",
              "logprobs must be an integer");
  ExpectError(Completions(body(R"("logprobs": 2, "top_logprobs": 2)")),
              absl::StatusCode::kInvalidArgument, "top_logprobs",
              "top_logprobs is a /v1/chat/completions parameter");
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

  // What the HTTP front answers for `body` (http_front.cc Handle): the
  // parser's error, else BuildRequest's through ToOpenAiError.
  absl::Status Build(
      const std::string& body,
      OpenAiEndpoint endpoint = OpenAiEndpoint::kChatCompletions) {
    absl::StatusOr<OpenAiRequest> parsed =
        ParseOpenAiRequest(endpoint, body, kModel);
    if (!parsed.ok()) return parsed.status();
    return ToOpenAiError(
        BuildRequest(parsed->raw, *tokenizer_, limits_).status(), *parsed);
  }

  // BuildRequest's own error for `body`, with the gRPC names.
  absl::Status BuildWithGrpcNames(const std::string& body,
                                  OpenAiEndpoint endpoint) {
    absl::StatusOr<OpenAiRequest> parsed =
        ParseOpenAiRequest(endpoint, body, kModel);
    if (!parsed.ok()) return parsed.status();
    return BuildRequest(parsed->raw, *tokenizer_, limits_).status();
  }

  std::unique_ptr<engine::Tokenizer> tokenizer_;
  RequestLimits limits_;
};

TEST_F(OpenAiBuildTest, LogprobsReachTheRequestWordedAsOverGrpc) {
  absl::StatusOr<OpenAiRequest> parsed =
      Chat(ChatBody(R"("logprobs": true, "top_logprobs": 4)"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<GenerationRequest> built =
      BuildRequest(parsed->raw, *tokenizer_, limits_);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->logprobs, 4);
  parsed = Chat(ChatBody(""));
  ASSERT_TRUE(parsed.ok());
  built = BuildRequest(parsed->raw, *tokenizer_, limits_);
  ASSERT_TRUE(built.ok());
  EXPECT_FALSE(built->logprobs.has_value());
  // gRPC's logprobs = 21 (BuildRequest) and HTTP's top_logprobs = 21: one
  // wording, the field's name apart.
  RawRequest raw = parsed->raw;
  raw.logprobs = 21;
  const absl::Status grpc = BuildRequest(raw, *tokenizer_, limits_).status();
  EXPECT_EQ(ErrorField(grpc), "logprobs") << grpc;
  const absl::Status http =
      Build(ChatBody(R"("logprobs": true, "top_logprobs": 21)"));
  EXPECT_EQ(OpenAiParam(http), "top_logprobs") << http;
  EXPECT_EQ(absl::StrCat("top_", grpc.message()), http.message());
}

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
  EXPECT_EQ(s.message(),
            "temperature must be in [0, inf) (0 = greedy); got -1");

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
    if (!built.ok()) return ToOpenAiError(built.status(), *parsed);
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
              HasSubstr("lookahead.lookahead_window must be in [0, 16] "));
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

// Every error answer of the HTTP API that the body decides: its HTTP status
// and the exact "param" of the error object, the JSON path of the field at
// fault, or null when the body as a whole is wrong. A field-level message
// begins with its param. (Errors http_front.cc makes before any body is
// read, 404 / 405 / 413 / 503 and the auth errors, carry no param:
// tests/openai_test.py.)
struct ParamCase {
  OpenAiEndpoint endpoint;
  std::string body;
  int http_status;
  const char* param;  // nullptr: null
};

TEST_F(OpenAiBuildTest, EveryErrorAnswerCarriesTheJsonPathAsParam) {
  constexpr auto kChat = OpenAiEndpoint::kChatCompletions;
  constexpr auto kText = OpenAiEndpoint::kCompletions;
  auto text = [](const std::string& extra) {
    return absl::StrCat(R"({"model": "tiny-model", "prompt": "hi")",
                        extra.empty() ? "" : ", ", extra, "}");
  };
  auto messages = [](const std::string& list) {
    return absl::StrCat(R"({"model": "tiny-model", "messages": )", list, "}");
  };
  auto prompt = [](const std::string& value) {
    return absl::StrCat(R"({"model": "tiny-model", "prompt": )", value, "}");
  };
  std::string many_messages = "[";
  for (int i = 0; i < 49; ++i) {
    absl::StrAppend(&many_messages, i ? ", " : "",
                    R"({"role": "user", "content": ""})");
  }
  many_messages += "]";
  std::string many_stops = "[";
  for (int i = 0; i < 17; ++i) {
    absl::StrAppend(&many_stops, i ? ", " : "", "\"s", i, "\"");
  }
  many_stops += "]";
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  const std::string long_stop = std::string(1025, 's');
  const std::vector<ParamCase> cases = {
      // The body as a whole.
      {kChat, R"({"model": )", 400, nullptr},             // malformed JSON
      {kChat, "", 400, nullptr},                          // empty, no length
      {kChat, "[1]", 400, nullptr},                       // not an object
      {kChat, R"("hi")", 400, nullptr},                   // not an object
      {kChat, R"({} x)", 400, nullptr},                   // trailing bytes
      {kChat, ChatBody("\"x\": " + deep), 400, nullptr},  // too deep
      {kChat, ChatBody("\"user\": \"a\xff\xfe\""), 400, nullptr},  // UTF-8
      {kChat, ChatBody(R"("max_tokens": 1e999)"), 400, nullptr},   // overflow
      // model.
      {kChat, R"({"messages": [{"role": "user", "content": "hi"}]})", 400,
       "model"},
      {kChat, R"({"model": 5, "messages": []})", 400, "model"},
      {kChat, R"({"model": "gpt-4", "messages": []})", 404, "model"},
      // messages.
      {kChat, R"({"model": "tiny-model"})", 400, "messages"},
      {kChat, messages(R"("hi")"), 400, "messages"},
      {kChat, messages("[]"), 400, "messages"},
      {kChat, messages(many_messages), 400, "messages"},
      {kChat,
       messages(absl::StrCat(R"([{"role": "user", "content": ")",
                             std::string(40, 'a'), R"("}])")),
       400, "messages"},
      {kChat, messages(R"([{"role": "user", "content": "a"}, 1])"), 400,
       "messages[1]"},
      {kChat, messages(R"([{"content": "a"}])"), 400, "messages[0].role"},
      {kChat, messages(R"([{"role": 1, "content": "a"}])"), 400,
       "messages[0].role"},
      {kChat, messages(R"([{"role": "user", "content": "a"},
                           {"role": "tool", "content": "b"}])"),
       400, "messages[1].role"},
      {kChat, messages(R"([{"role": "user"}])"), 400, "messages[0].content"},
      {kChat, messages(R"([{"role": "user", "content": 5}])"), 400,
       "messages[0].content"},
      {kChat,
       messages(absl::StrCat(R"([{"role": "user", "content": ")",
                             std::string(600, 'a'), R"("}])")),
       400, "messages[0].content"},
      {kChat, messages(R"([{"role": "user", "content": [{"type": "text",
           "text": "a"}, {"type": "image_url"}]}])"),
       400, "messages[0].content[1]"},
      // prompt.
      {kText, R"({"model": "tiny-model"})", 400, "prompt"},
      {kText, prompt("5"), 400, "prompt"},
      {kText, prompt(R"(["a", "b"])"), 400, "prompt"},
      {kText, prompt(R"("")"), 400, "prompt"},
      {kText, prompt("[]"), 400, "prompt"},
      {kText, prompt(absl::StrCat("\"", std::string(49, 'a'), "\"")), 400,
       "prompt"},
      {kText, prompt(absl::StrCat("\"", std::string(577, 'a'), "\"")), 400,
       "prompt"},
      {kText, prompt(R"([1, "a"])"), 400, "prompt[1]"},
      {kText, prompt("[1, 258]"), 400, "prompt[1]"},
      {kText, prompt("[1, -2]"), 400, "prompt[1]"},
      {kText, prompt("[[1, 2, -3]]"), 400, "prompt[2]"},
      // max_tokens and max_completion_tokens.
      {kChat, ChatBody(R"("max_tokens": "7")"), 400, "max_tokens"},
      {kChat, ChatBody(R"("max_tokens": 1.5)"), 400, "max_tokens"},
      {kChat, ChatBody(R"("max_tokens": 0)"), 400, "max_tokens"},
      {kChat, ChatBody(R"("max_tokens": -1)"), 400, "max_tokens"},
      {kChat, ChatBody(R"("max_tokens": 2147483647)"), 400, "max_tokens"},
      {kChat, ChatBody(R"("max_tokens": 18446744073709551615)"), 400,
       "max_tokens"},
      {kChat, ChatBody(R"("max_completion_tokens": 0)"), 400,
       "max_completion_tokens"},
      {kText, text(R"("max_tokens": 100)"), 400, "max_tokens"},
      // Sampling.
      {kChat, ChatBody(R"("temperature": "hot")"), 400, "temperature"},
      {kChat, ChatBody(R"("temperature": -1)"), 400, "temperature"},
      {kChat, ChatBody(R"("top_p": [1])"), 400, "top_p"},
      {kChat, ChatBody(R"("top_p": 2)"), 400, "top_p"},
      {kChat, ChatBody(R"("top_k": -1)"), 400, "top_k"},
      {kChat, ChatBody(R"("top_k": 1099511627776)"), 400, "top_k"},
      {kChat, ChatBody(R"("seed": 1.5)"), 400, "seed"},
      // Unsupported features.
      {kChat, ChatBody(R"("n": 2)"), 400, "n"},
      {kChat, ChatBody(R"("n": "2")"), 400, "n"},
      {kText, text(R"("echo": true)"), 400, "echo"},
      {kText, text(R"("best_of": 2)"), 400, "best_of"},
      {kText, text(R"("suffix": "x")"), 400, "suffix"},
      {kChat, ChatBody(R"("presence_penalty": 0.5)"), 400, "presence_penalty"},
      {kChat, ChatBody(R"("frequency_penalty": 1)"), 400, "frequency_penalty"},
      {kChat, ChatBody(R"("logit_bias": {"1": 5})"), 400, "logit_bias"},
      {kChat, ChatBody(R"("tools": [{}])"), 400, "tools"},
      {kChat, ChatBody(R"("functions": [{}])"), 400, "functions"},
      {kChat, ChatBody(R"("response_format": "json")"), 400, "response_format"},
      {kChat, ChatBody(R"("response_format": {})"), 400,
       "response_format.type"},
      {kChat, ChatBody(R"("response_format": {"type": "json_object"})"), 400,
       "response_format.type"},
      // stop.
      {kChat, ChatBody(R"("stop": 3)"), 400, "stop"},
      {kChat, ChatBody(R"("stop": ["a", 3])"), 400, "stop[1]"},
      {kChat, ChatBody(absl::StrCat("\"stop\": ", many_stops)), 400, "stop"},
      {kChat, ChatBody(R"("stop": ["a", ""])"), 400, "stop[1]"},
      {kChat, ChatBody(absl::StrCat(R"("stop": ["a", ")", long_stop, "\"]")),
       400, "stop[1]"},
      // stream, user.
      {kChat, ChatBody(R"("stream": "yes")"), 400, "stream"},
      {kChat, ChatBody(R"("stream_options": [])"), 400, "stream_options"},
      {kChat, ChatBody(R"("stream_options": {"include_usage": 1})"), 400,
       "stream_options.include_usage"},
      {kChat, ChatBody(R"("user": 5)"), 400, "user"},
      // The lookahead extension.
      {kChat, ChatBody(R"("lookahead": [])"), 400, "lookahead"},
      {kChat, ChatBody(R"("lookahead": {"sources": "trie"})"), 400,
       "lookahead.sources"},
      {kChat, ChatBody(R"("lookahead": {"sources": ["trie", "magic"]})"), 400,
       "lookahead.sources[1]"},
      {kChat, ChatBody(R"("lookahead": {"mode": "fast"})"), 400,
       "lookahead.mode"},
      {kChat, ChatBody(R"("lookahead": {"namespace": 3})"), 400,
       "lookahead.namespace"},
      {kChat, ChatBody(R"("lookahead": {"namespace": "a b"})"), 400,
       "lookahead.namespace"},
      {kChat, ChatBody(R"("lookahead": {"decoding_length": "8"})"), 400,
       "lookahead.decoding_length"},
      {kChat, ChatBody(R"("lookahead": {"decoding_length": 65})"), 400,
       "lookahead.decoding_length"},
      {kChat, ChatBody(R"("lookahead": {"branch_length": 33})"), 400,
       "lookahead.branch_length"},
      {kChat, ChatBody(R"("lookahead": {"lookahead_window": -1})"), 400,
       "lookahead.lookahead_window"},
      {kChat, ChatBody(R"("lookahead": {"lookahead_ngram": 1})"), 400,
       "lookahead.lookahead_ngram"},
      {kChat, ChatBody(R"("lookahead": {"lookahead_guess": 17})"), 400,
       "lookahead.lookahead_guess"},
  };
  for (const ParamCase& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 120));
    const absl::Status s = Build(c.body, c.endpoint);
    EXPECT_FALSE(s.ok());
    if (s.ok()) continue;
    EXPECT_EQ(HttpStatusOf(s), c.http_status) << s;
    const json error = json::parse(ErrorJson(s))["error"];
    if (c.param == nullptr) {
      EXPECT_TRUE(error["param"].is_null()) << error.dump();
    } else {
      EXPECT_EQ(error["param"], c.param) << error.dump();
      if (c.http_status == 400) {
        EXPECT_TRUE(
            absl::StartsWith(error["message"].get<std::string>(), c.param))
            << error.dump();
      }
    }
  }
}

// Each limit is worded once, by BuildRequest: over HTTP the message is
// BuildRequest's (gRPC names) with the OpenAI name in place of the field.
struct WordingCase {
  OpenAiEndpoint endpoint;
  std::string body;
  std::string grpc_field;
  std::string message;  // exact, OpenAI names
};

TEST_F(OpenAiBuildTest, EveryLimitIsWordedAsOverGrpc) {
  constexpr auto kChat = OpenAiEndpoint::kChatCompletions;
  constexpr auto kText = OpenAiEndpoint::kCompletions;
  auto prompt = [](const std::string& value) {
    return absl::StrCat(R"({"model": "tiny-model", "prompt": )", value, "}");
  };
  // "hi" as a ChatML chat is 21 tokens: 43 of the 64 are left.
  const std::string max_tokens_range =
      "must be in [1, 43] (leave it unset for the server's default; "
      "--max_context_tokens=64 less the prompt's 21 tokens); got ";
  std::string many_stops = "[";
  for (int i = 0; i < 17; ++i) {
    absl::StrAppend(&many_stops, i ? ", " : "", "\"s", i, "\"");
  }
  many_stops += "]";
  std::string many_messages = "[";
  for (int i = 0; i < 49; ++i) {
    absl::StrAppend(&many_messages, i ? ", " : "",
                    R"({"role": "user", "content": ""})");
  }
  many_messages += "]";
  const std::vector<WordingCase> cases = {
      {kChat, ChatBody(R"("max_tokens": 0)"), "max_new_tokens",
       "max_tokens " + max_tokens_range + "0"},
      {kChat, ChatBody(R"("max_tokens": -1)"), "max_new_tokens",
       "max_tokens " + max_tokens_range + "-1"},
      {kChat, ChatBody(R"("max_tokens": 2147483647)"), "max_new_tokens",
       "max_tokens " + max_tokens_range + "2147483647"},
      {kChat, ChatBody(R"("max_tokens": 9223372036854775807)"),
       "max_new_tokens",
       "max_tokens " + max_tokens_range + "9223372036854775807"},
      {kChat, ChatBody(R"("max_completion_tokens": 0)"), "max_new_tokens",
       "max_completion_tokens " + max_tokens_range + "0"},
      {kChat, ChatBody(R"("temperature": -1)"), "sampling.temperature",
       "temperature must be in [0, inf) (0 = greedy); got -1"},
      {kChat, ChatBody(R"("temperature": 1e39)"), "sampling.temperature",
       "temperature must be in [0, inf) (0 = greedy); got inf"},
      {kChat, ChatBody(R"("top_p": 2)"), "sampling.top_p",
       "top_p must be in [0, 1] (0 = off, as is 1); got 2"},
      {kChat, ChatBody(R"("top_k": -1)"), "sampling.top_k",
       "top_k must be in [0, 2147483647] (0 = off, as is any value >= the "
       "vocabulary size); got -1"},
      {kChat, ChatBody(R"("top_k": 1099511627776)"), "sampling.top_k",
       "top_k must be in [0, 2147483647] (0 = off, as is any value >= the "
       "vocabulary size); got 1099511627776"},
      {kChat, ChatBody(R"("lookahead": {"decoding_length": 65})"),
       "draft.decoding_length",
       "lookahead.decoding_length must be in [0, 64] (0 = server default; "
       "--max_decoding_length); got 65"},
      {kChat, ChatBody(R"("lookahead": {"decoding_length": -1})"),
       "draft.decoding_length",
       "lookahead.decoding_length must be in [0, 64] (0 = server default; "
       "--max_decoding_length); got -1"},
      {kChat, ChatBody(R"("lookahead": {"branch_length": 33})"),
       "draft.branch_length",
       "lookahead.branch_length must be in [0, 32] (0 = server default); got "
       "33"},
      {kChat, ChatBody(R"("lookahead": {"lookahead_window": 17})"),
       "draft.lookahead_window",
       "lookahead.lookahead_window must be in [0, 16] (0 = no window; unset = "
       "server default; --max_lookahead_window); got 17"},
      {kChat, ChatBody(R"("lookahead": {"lookahead_window": -1})"),
       "draft.lookahead_window",
       "lookahead.lookahead_window must be in [0, 16] (0 = no window; unset = "
       "server default; --max_lookahead_window); got -1"},
      {kChat, ChatBody(R"("lookahead": {"lookahead_ngram": 1})"),
       "draft.lookahead_ngram",
       "lookahead.lookahead_ngram must be 0 or in [2, 8] (0 = server "
       "default; --max_lookahead_ngram); got 1"},
      {kChat, ChatBody(R"("lookahead": {"lookahead_guess": 17})"),
       "draft.lookahead_guess",
       "lookahead.lookahead_guess must be in [0, 16] (0 = server default; "
       "--max_lookahead_guess); got 17"},
      {kText, prompt("[1, 258]"), "tokens.ids[1]",
       "prompt[1] must be in [0, 258) (a token id of the model's "
       "vocabulary); got 258"},
      {kText, prompt("[1, -2]"), "tokens.ids[1]",
       "prompt[1] must be in [0, 258) (a token id of the model's "
       "vocabulary); got -2"},
      {kChat, ChatBody(absl::StrCat("\"stop\": ", many_stops)), "stop",
       "stop has 17 strings; use at most 16 (--max_stop_strings)"},
      {kChat,
       ChatBody(
           absl::StrCat(R"("stop": ["a", ")", std::string(1025, 's'), "\"]")),
       "stop[1]", "stop[1] is 1025 bytes; use at most 1024 (--max_stop_bytes)"},
      {kText, prompt(absl::StrCat("\"", std::string(49, 'a'), "\"")), "text",
       "prompt has 49 tokens; use at most 48 (--max_prompt_tokens)"},
      {kText, prompt(absl::StrCat("\"", std::string(577, 'a'), "\"")), "text",
       "prompt is 577 bytes; use at most 576 (--max_prompt_tokens=48 tokens "
       "of at most 12 bytes)"},
      {kChat,
       absl::StrCat(R"({"model": "tiny-model", "messages": [{"role": "user",
                       "content": ")",
                    std::string(40, 'a'), R"("}]})"),
       "chat.messages",
       "messages has 59 tokens; use at most 48 (--max_prompt_tokens)"},
      {kChat,
       absl::StrCat(R"({"model": "tiny-model", "messages": )", many_messages,
                    "}"),
       "chat.messages",
       "messages has 49 messages; use at most 48 (each message takes at "
       "least one token)"},
      {kChat,
       absl::StrCat(R"({"model": "tiny-model", "messages": [{"role": "user",
                       "content": ")",
                    std::string(600, 'a'), R"("}]})"),
       "chat.messages[0].content",
       "messages[0].content is 600 bytes, making the chat 604 bytes; use at "
       "most 576 in all (--max_prompt_tokens=48 tokens of at most 12 "
       "bytes)"},
  };
  for (const WordingCase& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 120));
    const absl::Status http = Build(c.body, c.endpoint);
    EXPECT_EQ(http.code(), absl::StatusCode::kInvalidArgument) << http;
    EXPECT_EQ(std::string(http.message()), c.message);
    const absl::Status grpc = BuildWithGrpcNames(c.body, c.endpoint);
    EXPECT_EQ(ErrorField(grpc), c.grpc_field) << grpc;
    const std::string param = OpenAiParam(http);
    ASSERT_TRUE(absl::StartsWith(c.message, param)) << param;
    EXPECT_EQ(absl::StrCat(c.grpc_field, c.message.substr(param.size())),
              grpc.message());
  }
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
    usage.cached_prompt_tokens = 2;
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
  // The prefix cache's hits, in OpenAI's field and in the extension.
  EXPECT_EQ(e[4]["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(e[4]["usage"]["lookahead"]["cached_prompt_tokens"], 2);
  // No logprobs asked: null on every chunk.
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(e[i]["choices"][0]["logprobs"].is_null()) << i;
  }
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
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(body["model"], kModel);
}

// A byte-level tokenizer: token b is byte b; 256 <|im_start|>, 257
// <|im_end|> (EOS).
std::unique_ptr<engine::Tokenizer> ByteTokenizer() {
  engine::TokenizerSpec spec =
      engine::ByteLevelSpec({"<|im_start|>", "<|im_end|>"});
  spec.eos_id = 257;
  return engine::MustCreateTokenizer(std::move(spec));
}

// An output of `tokens` whose logprobs are -0.25 * (position + 1), with
// two alternatives: the token itself and the next byte.
GenerationOutput WithLogprobs(const std::string& text,
                              const std::vector<int32_t>& tokens,
                              FinishReason finish, int first) {
  GenerationOutput out = Output(text, finish);
  out.token_ids = tokens;
  for (size_t j = 0; j < tokens.size(); ++j) {
    const float lp = -0.25f * (first + j + 1);
    out.logprobs.push_back(
        {{tokens[j], lp}, {{tokens[j], lp}, {(tokens[j] + 1) % 256, -3.0f}}});
  }
  return out;
}

TEST(OpenAiResponderTest, ChatLogprobsStreamedAndWhole) {
  std::unique_ptr<engine::Tokenizer> tokenizer = ByteTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  // "H", then "é" cut across two tokens (its text held back one step),
  // then EOS.
  const std::vector<GenerationOutput> outputs = {
      WithLogprobs("H", {'H'}, FinishReason::kNone, 0),
      WithLogprobs("", {0xC3}, FinishReason::kNone, 1),
      WithLogprobs("\xC3\xA9", {0xA9, 257}, FinishReason::kEos, 2)};
  OpenAiResponder streamed(OpenAiEndpoint::kChatCompletions, "chatcmpl-1", 1,
                           kModel, false, tokenizer.get());
  OpenAiResponder whole(OpenAiEndpoint::kChatCompletions, "chatcmpl-1", 1,
                        kModel, false, tokenizer.get());
  std::string sse = streamed.StreamStart();
  for (const GenerationOutput& out : outputs) {
    sse += streamed.StreamOutput(out);
    whole.Add(out);
  }
  const std::vector<json> e = Events(sse);
  // Role, three content chunks (one with no text), the finish.
  ASSERT_EQ(e.size(), 5u);
  EXPECT_TRUE(e[0]["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(e[2]["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(e[4]["choices"][0]["logprobs"].is_null());
  json content = json::array();
  for (int i = 1; i <= 3; ++i) {
    for (const json& entry : e[i]["choices"][0]["logprobs"]["content"]) {
      content.push_back(entry);
    }
  }
  const json body = json::parse(whole.Body());
  const json& logprobs = body["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["content"], content);  // streamed = whole
  EXPECT_TRUE(logprobs["refusal"].is_null());
  ASSERT_EQ(content.size(), 4u);  // one per token, EOS included
  EXPECT_EQ(content[0]["token"], "H");
  EXPECT_EQ(content[0]["logprob"], -0.25);
  EXPECT_EQ(content[0]["bytes"], json::array({72}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(
      content[0]["top_logprobs"][0],
      json({{"token", "H"}, {"logprob", -0.25}, {"bytes", json::array({72})}}));
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "I");
  EXPECT_EQ(content[0]["top_logprobs"][1]["logprob"], -3.0);
  // Half a character: U+FFFD as text, the real byte in bytes.
  EXPECT_EQ(content[1]["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(content[1]["bytes"], json::array({0xC3}));
  EXPECT_EQ(content[2]["bytes"], json::array({0xA9}));
  EXPECT_EQ(content[3]["token"], "<|im_end|>");
  EXPECT_EQ(content[3]["logprob"], -1.0);
  EXPECT_EQ(content[3]["bytes"].size(), 10u);
}

TEST(OpenAiResponderTest, CompletionLogprobsStreamedAndWhole) {
  const std::string kEAcute = "\xC3\xA9";  // two bytes, one character
  std::unique_ptr<engine::Tokenizer> tokenizer = ByteTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  std::vector<GenerationOutput> outputs = {
      WithLogprobs("a", {'a'}, FinishReason::kNone, 0),
      WithLogprobs("", {0xC3}, FinishReason::kNone, 1),
      WithLogprobs(kEAcute + "b", {0xA9, 'b', 257}, FinishReason::kEos, 2)};
  // A token of probability 0 has no JSON value: OpenAI's floor.
  outputs[2].logprobs[1].chosen.logprob =
      -std::numeric_limits<float>::infinity();
  OpenAiResponder streamed(OpenAiEndpoint::kCompletions, "cmpl-1", 1, kModel,
                           false, tokenizer.get());
  OpenAiResponder whole(OpenAiEndpoint::kCompletions, "cmpl-1", 1, kModel,
                        false, tokenizer.get());
  std::string sse;
  for (const GenerationOutput& out : outputs) {
    sse += streamed.StreamOutput(out);
    whole.Add(out);
  }
  const json logprobs = json::parse(whole.Body())["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"],
            json({"a", "\xEF\xBF\xBD", "\xEF\xBF\xBD", "b", "<|im_end|>"}));
  EXPECT_EQ(logprobs["token_logprobs"],
            json({-0.25, -0.5, -0.75, -9999.0, -1.25}));
  // Characters of the text "aéb" before each token.
  EXPECT_EQ(logprobs["text_offset"], json({0, 1, 2, 2, 3}));
  EXPECT_EQ(logprobs["top_logprobs"][0], json({{"a", -0.25}, {"b", -3.0}}));
  // Streamed: the same arrays, chunk by chunk, offsets running on.
  const std::vector<json> e = Events(sse);
  ASSERT_EQ(e.size(), 4u);  // three content chunks and the finish
  json joined = {{"tokens", json::array()},
                 {"token_logprobs", json::array()},
                 {"top_logprobs", json::array()},
                 {"text_offset", json::array()}};
  for (int i = 0; i < 3; ++i) {
    const json& chunk = e[i]["choices"][0]["logprobs"];
    for (const char* key :
         {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
      for (const json& v : chunk[key]) joined[key].push_back(v);
    }
  }
  EXPECT_EQ(joined, logprobs);
  EXPECT_TRUE(e[3]["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiResponderTest, LogprobsWithoutATokenizerNameIds) {
  OpenAiResponder r(OpenAiEndpoint::kChatCompletions, "chatcmpl-1", 1, kModel,
                    false);
  r.Add(WithLogprobs("x", {'x'}, FinishReason::kLength, 0));
  const json entry =
      json::parse(r.Body())["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(entry["token"], "token_id:120");
  EXPECT_TRUE(entry["bytes"].is_null());
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
