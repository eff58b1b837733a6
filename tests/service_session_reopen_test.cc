// verifysvc's DraftSessions against a real in-process draftsvc (DraftServer
// over loopback gRPC) whose session lease is 1 s: a session that expires
// while its sequence is stalled is reopened on the next Step, with no error,
// and the tokens of the Step that found it gone still reach the global trie
// (NOT_FOUND applies nothing, so they are reported again after the reopen).
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "draftsvc/service/draft_service.h"
#include "gtest/gtest.h"
#include "verifysvc/draftsvc_client/draftsvc_client.h"
#include "verifysvc/draftsvc_client/draftsvc_sessions.h"

namespace lookahead {
namespace {

using Path = std::vector<int32_t>;

constexpr int32_t kVocab = 1000;
constexpr int32_t kBranchLength = 3;  // Windows of 4 tokens.
// draftsvc's --max_step_tokens here, and what the verifier reports per Step.
constexpr int32_t kMaxStepTokens = 8;

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  return dir;
}

// Polls `done` every 10 ms for up to 30 s (a loaded machine is slow).
bool WaitFor(const std::function<bool()>& done) {
  const absl::Time end = absl::Now() + absl::Seconds(30);
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

class ServiceSessionReopenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    draftsvc::DraftServerOptions options;
    options.db_path = TempDir("reopen");
    options.index.session_lease = absl::Seconds(1);
    options.index.max_step_tokens = kMaxStepTokens;
    absl::StatusOr<std::unique_ptr<draftsvc::DraftServer>> draft =
        draftsvc::DraftServer::Open(options);
    ASSERT_TRUE(draft.ok()) << draft.status();
    draft_ = *std::move(draft);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(draft_->service());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    verifysvc::DraftClientOptions client_options;
    client_options.step_deadline = absl::Seconds(10);  // Slow CI, no flakes.
    client_options.session_deadline = absl::Seconds(10);
    client_ = verifysvc::DraftClient::Create(absl::StrCat("127.0.0.1:", port),
                                             client_options);
    verifysvc::DraftSessionsOptions session_options;
    session_options.replica_id = "r";
    session_options.max_report_tokens = kMaxStepTokens;
    sessions_ = std::make_unique<verifysvc::DraftSessions>(
        client_.get(), kVocab, session_options);
  }
  void TearDown() override {
    sessions_.reset();
    if (server_ != nullptr) server_->Shutdown();
  }

  // draftsvc counts a session before the client has read its answer: a
  // Step in between finds it still opening and asks for no draft.
  bool OpenedOnBothSides(int64_t handle, int64_t open_on_draftsvc) {
    sessions_->WaitOpened(handle, absl::Now() + absl::Seconds(30));
    return WaitFor([&] { return OpenOnDraftsvc() == open_on_draftsvc; });
  }

  int64_t OpenOnDraftsvc() {
    int64_t open = 0;
    for (const auto& s : draft_->index().Stats("")) open += s.open_sessions;
    return open;
  }
  bool HasOutputPath(const Path& path) {
    bool found = false;
    draft_->index()
        .ForEachNode("ns",
                     [&](absl::Span<const int32_t> p, int64_t) {
                       found = found || Path(p.begin(), p.end()) == path;
                     })
        .IgnoreError();
    return found;
  }
  std::vector<engine::DraftTree> Step(int64_t handle, Path accepted,
                                      int32_t decoding_length) {
    verifysvc::DraftSessions::StepEntry entry;
    entry.handle = handle;
    entry.accepted = std::move(accepted);
    entry.decoding_length = decoding_length;
    return sessions_->Step({entry});
  }

  std::unique_ptr<draftsvc::DraftServer> draft_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<verifysvc::DraftClient> client_;
  std::unique_ptr<verifysvc::DraftSessions> sessions_;
};

TEST_F(ServiceSessionReopenTest, ExpiredSessionIsReopenedAndLosesNoTokens) {
  // The prompt repeats 1 2 3 4 5: after "... 1 2" it predicts 3.
  const Path prompt = {1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2};
  const int64_t handle = sessions_->Open("ns", prompt, kBranchLength);
  ASSERT_TRUE(OpenedOnBothSides(handle, 1));
  const std::vector<engine::DraftTree> before = Step(handle, {}, 4);
  ASSERT_FALSE(before[0].tokens.empty());
  EXPECT_EQ(before[0].tokens.front(), 3);

  // The sequence stalls past the lease; draftsvc expires the session.
  ASSERT_TRUE(WaitFor([&] { return draft_->index().ExpiredSessions() == 1; }));
  EXPECT_EQ(OpenOnDraftsvc(), 0);

  // Its next Step carries 3 4 5 1 and finds it gone: no drafts, no error.
  EXPECT_TRUE(Step(handle, {3, 4, 5, 1}, 4)[0].tokens.empty());
  EXPECT_EQ(sessions_->Stats().reopened, 1);
  ASSERT_TRUE(OpenedOnBothSides(handle, 1));

  // Reopened with the prompt as it stood, 3 4 5 1 are reported again with
  // the next token, as output windows; drafts resume ("5 1 2" -> 3).
  const std::vector<engine::DraftTree> after = Step(handle, {2}, 4);
  ASSERT_FALSE(after[0].tokens.empty()) << "no drafts after the reopen";
  EXPECT_EQ(after[0].tokens.front(), 3);
  EXPECT_TRUE(HasOutputPath({3, 4, 5, 1}))
      << "the failed Step's tokens never reached the global trie";
  EXPECT_TRUE(HasOutputPath({4, 5, 1, 2}));
  EXPECT_EQ(sessions_->Stats().step_failures, 0);

  // Closing reports the rest; the session is gone from draftsvc.
  sessions_->Close(handle, {8, 9});
  ASSERT_TRUE(WaitFor([&] { return OpenOnDraftsvc() == 0; }));
  EXPECT_TRUE(HasOutputPath({1, 2, 8, 9}));
  EXPECT_EQ(draft_->index().ExpiredSessions(), 1);
}

// Tokens that piled up past draftsvc's per-Step limit (say, after an
// outage) go out over several Steps instead of being rejected with the
// whole entry (and lost); those Steps ask for no draft, since draftsvc's
// context is behind, and drafting resumes once it has caught up.
TEST_F(ServiceSessionReopenTest, PiledUpTokensAreReportedInChunks) {
  const Path prompt = {1, 2, 3, 4, 5};
  const int64_t handle = sessions_->Open("ns", prompt, kBranchLength);
  ASSERT_TRUE(OpenedOnBothSides(handle, 1));
  // Twenty tokens at once, with a limit of eight per Step: three Steps.
  Path piled;
  for (int i = 0; i < 4; ++i) piled.insert(piled.end(), {1, 2, 3, 4, 5});
  EXPECT_TRUE(Step(handle, piled, 4)[0].tokens.empty());
  EXPECT_TRUE(Step(handle, {}, 4)[0].tokens.empty());
  const std::vector<engine::DraftTree> caught_up = Step(handle, {1, 2}, 4);
  EXPECT_EQ(sessions_->Stats().step_failures, 0);
  ASSERT_FALSE(caught_up[0].tokens.empty()) << "no drafts once caught up";
  EXPECT_EQ(caught_up[0].tokens.front(), 3);
  // Every window of the twenty made it into the global trie.
  EXPECT_TRUE(HasOutputPath({5, 1, 2, 3}));
  EXPECT_TRUE(HasOutputPath({2, 3, 4, 5}));
  EXPECT_TRUE(HasOutputPath({4, 5, 1, 2}));
  sessions_->Close(handle, {});
  ASSERT_TRUE(WaitFor([&] { return OpenOnDraftsvc() == 0; }));
}

}  // namespace
}  // namespace lookahead
