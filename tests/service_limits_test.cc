// verifysvc's limits and request validation, over real gRPC: each bad
// request gets the documented status code and a message that names the
// field (and the numbers, for limits), and the server keeps serving
// afterwards. One pair with tight limits: --max_running=1 --max_queued=0
// --max_prompt_tokens=32 --max_context_tokens=128.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/service_pair.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

constexpr int kMaxPromptTokens = 32;
constexpr int kMaxContextTokens = 128;

class ServiceLimitsTest : public SharedPairTest<ServiceLimitsTest> {
 public:  // Read by SharedPairTest.
  static PairOptions Options() {
    PairOptions options;
    options.name = "limits";
    options.verifysvc_flags = {
        "--max_running=1", "--max_queued=0",
        absl::StrCat("--max_prompt_tokens=", kMaxPromptTokens),
        absl::StrCat("--max_context_tokens=", kMaxContextTokens)};
    return options;
  }

 protected:
  void SetUp() override {
    SharedPairTest::SetUp();
    if (HasFatalFailure()) return;
    // The single slot must be free (a previous test's stream gone).
    v1::GenerationStatsResponse stats;
    ASSERT_TRUE(pair_->WaitForStats(
        [](const v1::GenerationStatsResponse& s) {
          return s.running_sequences() == 0 && s.queued_sequences() == 0;
        },
        10000, &stats))
        << stats.ShortDebugString();
  }

  // The server's tokens for `text` (no BOS: this model adds none).
  static std::vector<int32_t> Tokenize(const std::string& text) {
    grpc::ClientContext context;
    v1::TokenizeRequest request;
    request.set_text(text);
    v1::TokenizeResponse response;
    const grpc::Status status =
        pair_->generation().Tokenize(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {response.ids().begin(), response.ids().end()};
  }

  // A short valid prompt: 15 tokens.
  static v1::GenerateRequest Story(int max_new_tokens) {
    return TokensRequest(
        Tokenize(
            "Once upon a time, in a small village by the sea, there lived"),
        max_new_tokens);
  }
};

TEST_F(ServiceLimitsTest, FullServerRejectsWithResourceExhausted) {
  // Holds the only slot with a long stream; a second request arrives while
  // it runs, then the first leaves.
  const v1::GenerateRequest held = Story(100);
  Generation second;
  StreamHooks hooks;
  hooks.on_message = [&](grpc::ClientContext* context, int message) {
    if (message != 1) return;
    second = pair_->Generate(Story(8));
    context->TryCancel();
  };
  const Generation first = pair_->Generate(held, hooks);
  ASSERT_GT(first.messages, 0) << first.status.error_message();
  EXPECT_EQ(second.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << second.status.error_message();
  std::printf("server full: %s\n", second.status.error_message().c_str());
  ExpectMentions(second.status.error_message(),
                 {"--max_running", "--max_queued"});
}

struct BadRequest {
  std::string what;
  v1::GenerateRequest request;
  grpc::StatusCode code;
  std::vector<std::string> mentions;
};

std::vector<BadRequest> BadRequests(const v1::GenerateRequest& good,
                                    int vocab_size) {
  std::vector<BadRequest> bad;
  auto add = [&](std::string what, v1::GenerateRequest request,
                 std::vector<std::string> mentions) {
    bad.push_back({std::move(what), std::move(request),
                   grpc::StatusCode::INVALID_ARGUMENT, std::move(mentions)});
  };
  {
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(good.tokens().ids(i % 15));
    add("prompt too long", TokensRequest(ids, 8),
        {"max_prompt_tokens", "40", "32"});
  }
  {
    v1::GenerateRequest r = good;
    r.set_max_new_tokens(120);  // 15 + 120 > 128
    add("prompt + max_new_tokens over the context", r,
        {"max_context_tokens", "128", "120|135"});
  }
  {
    v1::GenerateRequest r;
    r.set_max_new_tokens(8);
    add("no prompt", r, {"prompt"});
  }
  {
    v1::GenerateRequest r = good;
    r.set_text("");
    add("empty text prompt", r, {"prompt|text"});
  }
  {
    v1::GenerateRequest r = good;
    r.mutable_tokens()->clear_ids();
    add("empty token prompt", r, {"prompt|tokens"});
  }
  {
    v1::GenerateRequest r = good;
    r.mutable_chat()->clear_messages();
    add("empty chat prompt", r, {"prompt|chat|messages"});
  }
  {
    v1::GenerateRequest r = good;
    r.mutable_tokens()->add_ids(vocab_size);
    add("token id = vocab size", r, {"token", absl::StrCat(vocab_size)});
  }
  {
    v1::GenerateRequest r = good;
    r.mutable_tokens()->set_ids(3, -5);
    add("negative token id", r, {"token", "-5"});
  }
  {
    v1::GenerateRequest r = good;
    r.set_max_new_tokens(-1);
    add("negative max_new_tokens", r, {"max_new_tokens"});
  }
  {
    v1::GenerateRequest r = good;
    r.mutable_sampling()->set_temperature(-0.5f);
    add("negative temperature", r, {"temperature"});
  }
  {
    v1::GenerateRequest r = good;
    r.mutable_sampling()->set_temperature(std::nanf(""));
    add("NaN temperature", r, {"temperature"});
  }
  {
    v1::GenerateRequest r = good;
    SetSeededSampling(&r, 1);
    r.mutable_sampling()->set_top_p(1.5f);
    add("top_p 1.5", r, {"top_p"});
  }
  {
    v1::GenerateRequest r = good;
    SetSeededSampling(&r, 1);
    r.mutable_sampling()->set_top_p(-0.1f);
    add("top_p -0.1", r, {"top_p"});
  }
  {
    v1::GenerateRequest r = good;
    SetSeededSampling(&r, 1);
    r.mutable_sampling()->set_top_k(-1);
    add("negative top_k", r, {"top_k"});
  }
  {
    v1::GenerateRequest r = good;
    r.add_stop("\n\n");
    r.add_stop("");
    add("empty stop string", r, {"stop"});
  }
  {
    v1::GenerateRequest r = good;
    r.mutable_draft()->set_namespace_("bad/name");
    add("bad namespace", r, {"namespace"});
  }
  {
    v1::GenerateRequest r = good;
    r.mutable_draft()->set_decoding_length(-1);
    add("negative decoding_length", r, {"decoding_length"});
  }
  return bad;
}

TEST_F(ServiceLimitsTest, BadRequestsNameTheFieldAndServerKeepsServing) {
  grpc::ClientContext info_context;
  v1::ModelInfoResponse info;
  ASSERT_TRUE(pair_->generation()
                  .ModelInfo(&info_context, v1::ModelInfoRequest(), &info)
                  .ok());
  ASSERT_GT(info.vocab_size(), 0);
  const v1::GenerateRequest good = Story(8);
  ASSERT_EQ(good.tokens().ids_size(), 15);

  for (const BadRequest& bad : BadRequests(good, info.vocab_size())) {
    SCOPED_TRACE(bad.what);
    const Generation got = pair_->Generate(bad.request);
    std::printf("%-42s -> %d %s\n", bad.what.c_str(), got.status.error_code(),
                got.status.error_message().c_str());
    EXPECT_EQ(got.status.error_code(), bad.code) << got.status.error_message();
    EXPECT_EQ(got.messages, 0) << "a rejected request streamed output";
    ExpectMentions(got.status.error_message(), bad.mentions);
  }

  // Still serving, at the limits' edges: 32 prompt tokens and exactly 128
  // in all.
  std::vector<int32_t> ids;
  for (int i = 0; i < kMaxPromptTokens; ++i) {
    ids.push_back(good.tokens().ids(i % 15));
  }
  const Generation ok =
      pair_->Generate(TokensRequest(ids, kMaxContextTokens - kMaxPromptTokens));
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_TRUE(ok.has_usage);
  EXPECT_GT(ok.tokens.size(), 0u);
  const Generation small = pair_->Generate(good);
  ASSERT_TRUE(small.status.ok()) << small.status.error_message();
  EXPECT_GT(small.tokens.size(), 0u);
  EXPECT_LE(small.tokens.size(), 8u);
  absl::StatusOr<v1::GenerationStatsResponse> stats = pair_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  std::printf("Stats: %s\n", stats->ShortDebugString().c_str());
}

}  // namespace
}  // namespace lookahead::testing
