// Hostile ids against the real draftsvc binary, over real gRPC: a 1 MB
// session id or namespace in any RPC gets INVALID_ARGUMENT naming the field,
// its length and the limit, in a short printable message the client really
// receives (not "Stream removed": gRPC drops a status whose message passes
// its 16 KiB metadata limit), and the id is not echoed back. Unknown ids of
// legal length are quoted escaped and cut (common/quote.h).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>

#include "gtest/gtest.h"
#include "proto/draft.grpc.pb.h"
#include "tests/service_session_probe.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

// Longest message we accept for an error about a huge input: the quote is
// at most 64 input bytes, C-escaped (x4), plus the prose.
constexpr size_t kShortMessage = 512;
const std::string kHuge(size_t{1} << 20, 'x');  // 1 MiB

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(30));
  return context;
}

bool Printable(const std::string& s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

#define EXPECT_SHORT_ERROR(status_or_entry_message, code_value, expected_code, \
                           needle)                                             \
  do {                                                                         \
    const std::string message = (status_or_entry_message);                     \
    EXPECT_EQ(static_cast<int>(code_value), static_cast<int>(expected_code))   \
        << message.substr(0, 300);                                             \
    EXPECT_LE(message.size(), kShortMessage) << message.substr(0, 300);        \
    EXPECT_TRUE(Printable(message)) << message.substr(0, 300);                 \
    EXPECT_NE(message.find(needle), std::string::npos)                         \
        << message.substr(0, 300);                                             \
  } while (false)

class ServiceSessionErrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto started = LoneDraftsvc::Start("errors", {});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = started->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }
  v1::DraftService::Stub& stub() { return server_->stub(); }

  static inline LoneDraftsvc* server_ = nullptr;
};

TEST_F(ServiceSessionErrorsTest, StepWithAHugeSessionIdGetsAShortEntryError) {
  v1::StepRequest request;
  request.add_steps()->set_session_id(kHuge);
  request.add_steps()->set_session_id("unknown/1");
  v1::StepResponse response;
  const grpc::Status status = stub().Step(Context().get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message().substr(0, 300);
  ASSERT_EQ(response.drafts_size(), 2);
  EXPECT_SHORT_ERROR(response.drafts(0).message(), response.drafts(0).code(),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "session_id is 1048576 bytes; need 1..256");
  EXPECT_EQ(response.drafts(0).session_id(), "") << "the huge id was echoed";
  EXPECT_SHORT_ERROR(response.drafts(1).message(), response.drafts(1).code(),
                     grpc::StatusCode::NOT_FOUND, "\"unknown/1\"");
  EXPECT_LT(response.ByteSizeLong(), 4096u);
}

TEST_F(ServiceSessionErrorsTest, DuplicateHugeIdsFailTheStepWithAShortStatus) {
  v1::StepRequest request;
  request.add_steps()->set_session_id(kHuge);
  request.add_steps()->set_session_id(kHuge);
  v1::StepResponse response;
  const grpc::Status status = stub().Step(Context().get(), request, &response);
  EXPECT_SHORT_ERROR(status.error_message(), status.error_code(),
                     grpc::StatusCode::INVALID_ARGUMENT, "(1048576 bytes)");
}

TEST_F(ServiceSessionErrorsTest, CloseAndOpenWithHugeIdsGetShortErrors) {
  v1::CloseSessionRequest close;
  close.set_session_id(kHuge);
  v1::CloseSessionResponse closed;
  grpc::Status status = stub().CloseSession(Context().get(), close, &closed);
  EXPECT_SHORT_ERROR(status.error_message(), status.error_code(),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "session_id is 1048576 bytes; need 1..256");

  v1::OpenSessionRequest open;
  open.set_session_id(kHuge);
  open.set_vocab_size(100);
  open.add_prompt_tokens(1);
  v1::OpenSessionResponse opened;
  status = stub().OpenSession(Context().get(), open, &opened);
  EXPECT_SHORT_ERROR(status.error_message(), status.error_code(),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "session_id is 1048576 bytes; need 1..256");

  open.set_session_id("ok/1");
  open.set_namespace_(kHuge);
  status = stub().OpenSession(Context().get(), open, &opened);
  EXPECT_SHORT_ERROR(status.error_message(), status.error_code(),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "namespace is 1048576 bytes");

  v1::StatsRequest stats;
  stats.set_namespace_(kHuge);
  v1::StatsResponse stats_response;
  status = stub().Stats(Context().get(), stats, &stats_response);
  EXPECT_SHORT_ERROR(status.error_message(), status.error_code(),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "namespace is 1048576 bytes");

  v1::PruneRequest prune;
  prune.set_namespace_(kHuge);
  v1::PruneResponse pruned;
  status = stub().Prune(Context().get(), prune, &pruned);
  EXPECT_SHORT_ERROR(status.error_message(), status.error_code(),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "namespace is 1048576 bytes");
}

TEST_F(ServiceSessionErrorsTest, UnknownIdsAreQuotedEscapedAndCut) {
  // 200 bytes of control characters, quotes and backslashes (proto3
  // strings must be UTF-8, so ASCII): legal length, so NOT_FOUND, quoted.
  std::string junk(200, '\0');
  for (size_t i = 0; i < junk.size(); ++i) {
    junk[i] = static_cast<char>((i * 7) % 128);
  }
  v1::CloseSessionRequest close;
  close.set_session_id(junk);
  v1::CloseSessionResponse closed;
  const grpc::Status status =
      stub().CloseSession(Context().get(), close, &closed);
  EXPECT_SHORT_ERROR(status.error_message(), status.error_code(),
                     grpc::StatusCode::NOT_FOUND, "...\" (200 bytes)");

  v1::StepRequest request;
  request.add_steps()->set_session_id(junk);
  v1::StepResponse response;
  ASSERT_TRUE(stub().Step(Context().get(), request, &response).ok());
  ASSERT_EQ(response.drafts_size(), 1);
  EXPECT_SHORT_ERROR(response.drafts(0).message(), response.drafts(0).code(),
                     grpc::StatusCode::NOT_FOUND, "...\" (200 bytes)");

  // Opening it twice: ALREADY_EXISTS quotes it the same way.
  v1::OpenSessionRequest open;
  open.set_session_id(junk);
  open.set_vocab_size(100);
  open.add_prompt_tokens(1);
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(stub().OpenSession(Context().get(), open, &opened).ok());
  const grpc::Status twice = stub().OpenSession(Context().get(), open, &opened);
  EXPECT_SHORT_ERROR(twice.error_message(), twice.error_code(),
                     grpc::StatusCode::ALREADY_EXISTS, "...\" (200 bytes)");
}

}  // namespace
}  // namespace lookahead::testing
