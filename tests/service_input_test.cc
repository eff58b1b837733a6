// Hostile input over real gRPC: requests built to fool validation (invalid
// UTF-8 straight on the wire, int32 extremes, megabyte strings, thousands of
// stop strings) each get INVALID_ARGUMENT with a short message naming the
// field, before any tokenizing, and the server log gets no line per request.
// One verifysvc (no draftsvc): --max_prompt_tokens=32
// --max_context_tokens=128.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/raw_grpc_call.h"
#include "tests/service_pair.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

constexpr int kMaxPromptTokens = 32;
constexpr int kMaxContextTokens = 128;
// Longest error message a client should ever need; gRPC drops a stream
// whose metadata passes 16 KiB.
constexpr size_t kShortMessage = 1024;

constexpr char kGenerate[] = "/lookahead.v1.GenerationService/Generate";
constexpr char kTokenize[] = "/lookahead.v1.GenerationService/Tokenize";

class ServiceInputTest : public SharedPairTest<ServiceInputTest> {
 public:  // Read by SharedPairTest.
  static PairOptions Options() {
    PairOptions options;
    options.name = "input";
    options.with_draftsvc = false;
    options.verifysvc_flags = {
        absl::StrCat("--max_prompt_tokens=", kMaxPromptTokens),
        absl::StrCat("--max_context_tokens=", kMaxContextTokens)};
    return options;
  }

 protected:
  // verifysvc's whole log so far.
  static std::string VerifysvcLog() {
    const char* dir = std::getenv("TEST_TMPDIR");
    std::ifstream in(
        absl::StrCat(dir == nullptr ? "/tmp" : dir, "/input/verifysvc.log"));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // A short valid prompt of token ids (the same every time).
  static v1::GenerateRequest Story(int64_t max_new_tokens) {
    v1::GenerateRequest request;
    for (int32_t id : {504, 3767, 253, 655, 28, 281, 253, 1165, 3457, 416, 260,
                       4375, 28, 665, 4818}) {
      request.mutable_tokens()->add_ids(id);
    }
    request.set_max_new_tokens(static_cast<int32_t>(max_new_tokens));
    return request;
  }

  // Requests that ended in an internal error, per the server's Stats.
  static int64_t RequestsFailed() {
    absl::StatusOr<v1::GenerationStatsResponse> stats = pair_->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? stats->requests_failed() : -1;
  }
};

// Bytes that are not UTF-8: a lone continuation byte, 0xFF, an overlong
// '/', a UTF-16 surrogate and a cut 3-byte character.
const char kBadUtf8[] = "\x80\xFF\xC0\xAF\xED\xA0\x80\xE2\x82";
const char kPlaceholder[] = "@@BADUTF@";  // as long as kBadUtf8

struct BadWire {
  std::string what;
  const char* method;
  std::string body;
  std::string field;  // the path the message must start with
};

std::vector<BadWire> InvalidUtf8Requests() {
  const std::string bad(kBadUtf8, sizeof(kBadUtf8) - 1);
  const std::string placeholder = kPlaceholder;
  std::vector<BadWire> cases;
  {
    v1::GenerateRequest r;
    r.set_text(absl::StrCat("Once upon a time ", placeholder));
    r.set_max_new_tokens(4);
    cases.push_back(
        {"text prompt", kGenerate, WireWith(r, placeholder, bad), "text"});
  }
  {
    v1::GenerateRequest r;
    r.set_text("Once upon a time");
    r.add_stop("\n\n");
    r.add_stop(placeholder);
    cases.push_back({"second stop string", kGenerate,
                     WireWith(r, placeholder, bad), "stop[1]"});
  }
  {
    v1::GenerateRequest r;
    for (const char* role : {"system", "user", kPlaceholder}) {
      v1::ChatMessage* m = r.mutable_chat()->add_messages();
      m->set_role(role);
      m->set_content("Hello");
    }
    cases.push_back({"third chat role", kGenerate,
                     WireWith(r, placeholder, bad), "chat.messages[2].role"});
  }
  {
    v1::GenerateRequest r;
    v1::ChatMessage* m = r.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(absl::StrCat("Tell me ", placeholder));
    cases.push_back({"chat content", kGenerate, WireWith(r, placeholder, bad),
                     "chat.messages[0].content"});
  }
  {
    v1::GenerateRequest r;
    r.set_text("Once upon a time");
    r.mutable_draft()->set_namespace_(placeholder);
    cases.push_back({"draft namespace", kGenerate,
                     WireWith(r, placeholder, bad), "draft.namespace"});
  }
  {
    v1::TokenizeRequest r;
    r.set_text(placeholder);
    cases.push_back(
        {"Tokenize text", kTokenize, WireWith(r, placeholder, bad), "text"});
  }
  {
    v1::TokenizeRequest r;
    v1::ChatMessage* m = r.mutable_chat()->add_messages();
    m->set_role(placeholder);
    m->set_content("Hello");
    cases.push_back({"Tokenize chat role", kTokenize,
                     WireWith(r, placeholder, bad), "chat.messages[0].role"});
  }
  return cases;
}

TEST_F(ServiceInputTest, InvalidUtf8IsInvalidArgumentNamingTheField) {
  ASSERT_EQ(sizeof(kBadUtf8), sizeof(kPlaceholder));
  const std::vector<BadWire> cases = InvalidUtf8Requests();
  // Each case several times: the log must not grow a line per request.
  constexpr int kRounds = 5;
  for (int round = 0; round < kRounds; ++round) {
    for (const BadWire& bad : cases) {
      SCOPED_TRACE(bad.what);
      const RawReply got =
          RawCall(pair_->verifysvc_port(), bad.method, bad.body);
      if (round == 0) {
        std::printf("%-20s -> %d %s\n", bad.what.c_str(),
                    got.status.error_code(),
                    got.status.error_message().c_str());
      }
      EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << got.status.error_message();
      EXPECT_EQ(got.messages, 0);
      // The message starts with the field's path.
      EXPECT_TRUE(
          absl::StartsWith(got.status.error_message(), bad.field + " is "))
          << got.status.error_message() << " does not start with " << bad.field;
      ExpectMentions(got.status.error_message(), {"not valid UTF-8"});
    }
  }
  // The same bytes, valid, are served (the checks reject only bad bytes).
  const Generation ok = pair_->Generate(Story(2));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();

  const std::string log = VerifysvcLog();
  int lines_about_it = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "UTF-8") || absl::StrContains(line, "UTF8")) {
      ++lines_about_it;
    }
  }
  EXPECT_FALSE(absl::StrContains(log, "libprotobuf ERROR")) << log;
  const int requests = kRounds * static_cast<int>(cases.size());
  EXPECT_LE(lines_about_it, 2) << requests << " requests logged:\n" << log;
}

// Every int32 field at both extremes: INVALID_ARGUMENT naming the field, the
// value and its range, never an internal error later on (prompt +
// max_new_tokens once wrapped negative in int32).
TEST_F(ServiceInputTest, Int32ExtremesNameFieldValueAndRange) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  struct Case {
    std::string what;
    v1::GenerateRequest request;
    std::vector<std::string> mentions;
  };
  std::vector<Case> cases;
  // 15 prompt tokens leave 113 of the 128 for the output.
  cases.push_back({"max_new_tokens max",
                   Story(kMax),
                   {"max_new_tokens", "2147483647", "[1, 113]"}});
  cases.push_back({"max_new_tokens min",
                   Story(kMin),
                   {"max_new_tokens", "-2147483648", "[1, 113]"}});
  {
    v1::GenerateRequest r;
    r.set_text("Once upon a time");  // tokens known only after encoding
    r.set_max_new_tokens(kMax);
    cases.push_back({"text prompt, max_new_tokens max",
                     r,
                     {"max_new_tokens", "2147483647"}});
  }
  {
    v1::GenerateRequest r = Story(4);
    r.mutable_sampling()->set_temperature(0.5f);
    r.mutable_sampling()->set_top_k(kMin);
    cases.push_back(
        {"top_k min", r, {"sampling.top_k", "-2147483648", "[0, "}});
  }
  for (const int32_t value : {kMax, kMin}) {
    v1::GenerateRequest r = Story(4);
    r.mutable_draft()->set_decoding_length(value);
    cases.push_back(
        {absl::StrCat("decoding_length ", value),
         r,
         {"draft.decoding_length", absl::StrCat(value), "[0, 64]"}});
    r = Story(4);
    r.mutable_draft()->set_branch_length(value);
    cases.push_back({absl::StrCat("branch_length ", value),
                     r,
                     {"draft.branch_length", absl::StrCat(value), "[0, 32]"}});
    r = Story(4);
    r.mutable_tokens()->set_ids(7, value);
    cases.push_back({absl::StrCat("token id ", value),
                     r,
                     {"tokens.ids[7]", absl::StrCat(value), "[0, 49152)"}});
  }
  const int64_t failed_before = RequestsFailed();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Generation got = pair_->Generate(c.request);
    std::printf("%-36s -> %d %s\n", c.what.c_str(), got.status.error_code(),
                got.status.error_message().c_str());
    EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << got.status.error_message();
    ExpectMentions(got.status.error_message(), c.mentions);
  }
  EXPECT_EQ(RequestsFailed(), failed_before)
      << "a bad request counted as an internal failure";
  // max_new_tokens' range has one wording whichever side is missed (the
  // same over HTTP but for the name: verifysvc/api/openai_api_test.cc).
  for (const int32_t value : {kMax, kMin, -1}) {
    SCOPED_TRACE(value);
    EXPECT_EQ(pair_->Generate(Story(value)).status.error_message(),
              absl::StrCat("max_new_tokens must be in [1, 113] (leave it "
                           "unset for the server's default; "
                           "--max_context_tokens=128 less the prompt's 15 "
                           "tokens); got ",
                           value));
  }
  // The edge itself is accepted: exactly 113 new tokens.
  const Generation edge = pair_->Generate(Story(113));
  EXPECT_TRUE(edge.status.ok()) << edge.status.error_message();
}

TEST_F(ServiceInputTest, HugeRoleAndStopStringGetAShortMessage) {
  {
    v1::GenerateRequest r;
    v1::ChatMessage* m = r.mutable_chat()->add_messages();
    m->set_role(std::string(100000, 'r'));
    m->set_content("Hello");
    const Generation got = pair_->Generate(r);
    std::printf("100 KB role -> %d %s\n", got.status.error_code(),
                got.status.error_message().c_str());
    EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << got.status.error_message().substr(0, 200);
    EXPECT_LT(got.status.error_message().size(), kShortMessage);
    ExpectMentions(got.status.error_message(),
                   {"chat.messages[0].role", "100000 bytes"});
  }
  {
    v1::GenerateRequest r = Story(4);
    r.add_stop(std::string(1 << 20, 's'));
    const Generation got = pair_->Generate(r);
    std::printf("1 MiB stop string -> %d %s\n", got.status.error_code(),
                got.status.error_message().c_str());
    EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << got.status.error_message().substr(0, 200);
    EXPECT_LT(got.status.error_message().size(), kShortMessage);
    ExpectMentions(got.status.error_message(),
                   {"stop[0]", "1048576 bytes", "--max_stop_bytes"});
  }
}

TEST_F(ServiceInputTest, TenThousandStopStrings) {
  v1::GenerateRequest r = Story(4);
  for (int i = 0; i < 10000; ++i) r.add_stop(absl::StrCat("stop", i));
  const Generation got = pair_->Generate(r);
  std::printf("10000 stop strings -> %d %s\n", got.status.error_code(),
              got.status.error_message().c_str());
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(got.status.error_message().size(), kShortMessage);
  ExpectMentions(got.status.error_message(),
                 {"stop", "10000", "16", "--max_stop_strings"});
}

// 4 MB of text is rejected by its byte count, before the tokenizer runs
// (tokenizing it takes over a second here). The time is reported, not
// asserted: the message saying "bytes" is what proves the order.
TEST_F(ServiceInputTest, FourMegabytePromptAndTokenizeInputRejectedByBytes) {
  const std::string text = [] {
    std::string t;
    while (t.size() < 4000000) t += "The quick brown fox jumps over 1234. ";
    t.resize(4000000);
    return t;
  }();
  {
    v1::GenerateRequest r;
    r.set_text(text);
    r.set_max_new_tokens(4);
    const absl::Time start = absl::Now();
    const Generation got = pair_->Generate(r);
    std::printf("4 MB text prompt -> %d in %.0f ms: %s\n",
                got.status.error_code(),
                absl::ToDoubleMilliseconds(absl::Now() - start),
                got.status.error_message().c_str());
    EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_LT(got.status.error_message().size(), kShortMessage);
    ExpectMentions(got.status.error_message(),
                   {"text", "4000000 bytes", "--max_prompt_tokens"});
  }
  {
    v1::GenerateRequest r;
    v1::ChatMessage* m = r.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(text);
    const Generation got = pair_->Generate(r);
    std::printf("4 MB chat message -> %d %s\n", got.status.error_code(),
                got.status.error_message().c_str());
    EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    ExpectMentions(got.status.error_message(),
                   {"chat.messages[0].content", "4000000 bytes"});
  }
  {
    grpc::ClientContext context;
    v1::TokenizeRequest r;
    r.set_text(text);
    v1::TokenizeResponse response;
    const absl::Time start = absl::Now();
    const grpc::Status got =
        pair_->generation().Tokenize(&context, r, &response);
    std::printf("4 MB Tokenize -> %d in %.0f ms: %s\n", got.error_code(),
                absl::ToDoubleMilliseconds(absl::Now() - start),
                got.error_message().c_str());
    EXPECT_EQ(got.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(response.ids_size(), 0);
    ExpectMentions(got.error_message(), {"text", "4000000 bytes"});
  }
  // Below the limit, Tokenize still answers.
  grpc::ClientContext context;
  v1::TokenizeRequest r;
  r.set_text("Once upon a time");
  v1::TokenizeResponse response;
  ASSERT_TRUE(pair_->generation().Tokenize(&context, r, &response).ok());
  EXPECT_GT(response.ids_size(), 0);
}

// Detokenize takes at most a context's worth of ids (128 here): a million
// ids would have cost up to 81 output bytes each.
TEST_F(ServiceInputTest, DetokenizeTakesAtMostAContextOfIds) {
  {
    grpc::ClientContext context;
    v1::DetokenizeRequest r;
    for (int i = 0; i < 1000000; ++i) r.add_ids(42);
    v1::DetokenizeResponse response;
    const grpc::Status got =
        pair_->generation().Detokenize(&context, r, &response);
    EXPECT_EQ(got.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_TRUE(response.text().empty());
    ExpectMentions(got.error_message(),
                   {"ids", "1000000", "128", "--max_context_tokens"});
  }
  grpc::ClientContext context;
  v1::DetokenizeRequest r;
  for (int i = 0; i < 128; ++i) r.add_ids(42);
  v1::DetokenizeResponse response;
  ASSERT_TRUE(pair_->generation().Detokenize(&context, r, &response).ok());
  EXPECT_FALSE(response.text().empty());
}

}  // namespace
}  // namespace lookahead::testing
