// Session leases and caps of the real draftsvc binary, over gRPC.
//
// Leases: with --session_lease_s=1, sessions nobody steps expire with no
// traffic at all (the sweeper), as CloseSession would close them (their
// trailing output windows reach the global trie, their prompt tries go);
// the sessions gauge and Stats drop, lookahead_draft_sessions_expired_total
// counts them, a session stepped all along stays, and an expired id can be
// opened again. Caps: --max_sessions and --max_sessions_per_namespace answer
// RESOURCE_EXHAUSTED naming the cap and its flag.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/draft.grpc.pb.h"
#include "tests/service_session_probe.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

constexpr int32_t kVocab = 50000;
constexpr int kBranchLength = 8;
// Generous: the lease is 1 s and the sweeper runs every 0.1 s, but a busy
// CI machine may stall the server for seconds.
constexpr int kExpireWithinMs = 30000;

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(10));
  return context;
}

grpc::Status Open(v1::DraftService::Stub& stub, const std::string& id,
                  const std::string& ns, int prompt_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  v1::OpenSessionRequest request;
  request.set_session_id(id);
  request.set_namespace_(ns);
  request.set_vocab_size(kVocab);
  request.set_branch_length(kBranchLength);
  for (int i = 0; i < prompt_tokens; ++i) {
    request.add_prompt_tokens(static_cast<int32_t>(rng() % kVocab));
  }
  v1::OpenSessionResponse response;
  return stub.OpenSession(Context().get(), request, &response);
}

// Steps one session with `accepted`; returns the entry (RPC failures fail
// the test).
v1::SessionDraft StepOne(v1::DraftService::Stub& stub, const std::string& id,
                         const std::vector<int32_t>& accepted) {
  v1::StepRequest request;
  v1::SessionStep* step = request.add_steps();
  step->set_session_id(id);
  for (int32_t t : accepted) step->add_accepted_tokens(t);
  step->set_decoding_length(8);
  v1::StepResponse response;
  const grpc::Status status = stub.Step(Context().get(), request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.drafts_size() == 1 ? response.drafts(0) : v1::SessionDraft();
}

v1::StatsResponse Stats(v1::DraftService::Stub& stub) {
  v1::StatsResponse response;
  const grpc::Status status =
      stub.Stats(Context().get(), v1::StatsRequest(), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

int64_t OpenSessions(v1::DraftService::Stub& stub) {
  int64_t open = 0;
  const v1::StatsResponse stats = Stats(stub);
  for (const v1::NamespaceStats& s : stats.namespaces()) {
    open += s.open_sessions();
  }
  return open;
}

// Polls `done` every 20 ms (running `between` each time) until it holds or
// `timeout_ms` passes.
bool WaitFor(const std::function<bool()>& done, int timeout_ms,
             const std::function<void()>& between = nullptr) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    if (between) between();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

double Metric(const LoneDraftsvc& server, const std::string& name) {
  absl::StatusOr<double> value = ScrapeMetric(server.metrics_port(), name);
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *value : -1;
}

TEST(DraftsvcLeaseTest, IdleSessionsExpireWithoutTrafficSteppedOnesStay) {
  auto started = LoneDraftsvc::Start("lease", {"--session_lease_s=1"});
  ASSERT_TRUE(started.ok()) << started.status();
  LoneDraftsvc& server = **started;
  v1::DraftService::Stub& stub = server.stub();
  const int64_t rss_empty = RssBytes(server.pid());

  // Four sessions with 4000-token prompts (~36K prompt-trie nodes each).
  for (int i = 1; i <= 4; ++i) {
    const grpc::Status opened =
        Open(stub, absl::StrCat("v/", i), "lease", 4000, i);
    ASSERT_TRUE(opened.ok()) << opened.error_message();
  }
  EXPECT_EQ(Metric(server, "lookahead_draft_sessions"), 4);
  EXPECT_EQ(Metric(server, "lookahead_draft_sessions_expired_total"), 0);
  const int64_t rss_open = RssBytes(server.pid());
  // v/2 gets 3 output tokens: shorter than a window (branch_length + 1),
  // so only closing it puts them (as trailing windows) in the global trie.
  ASSERT_EQ(StepOne(stub, "v/2", {7, 8, 9}).code(), 0);
  ASSERT_EQ(Stats(stub).namespaces(0).output_nodes(), 0);

  // v/1 is stepped all along; the other three expire with no traffic.
  const bool three_expired =
      WaitFor([&] { return OpenSessions(stub) == 1; }, kExpireWithinMs,
              [&] { EXPECT_EQ(StepOne(stub, "v/1", {}).code(), 0); });
  ASSERT_TRUE(three_expired) << OpenSessions(stub) << " sessions still open\n"
                             << server.Log();
  EXPECT_EQ(StepOne(stub, "v/1", {}).code(), 0) << "the stepped one expired";
  EXPECT_EQ(Metric(server, "lookahead_draft_sessions"), 1);
  EXPECT_EQ(Metric(server, "lookahead_draft_sessions_expired_total"), 3);
  // As CloseSession: v/2's trailing windows [7 8 9] and [8 9] went in
  // (nodes 7, 7.8, 7.8.9, 8, 8.9).
  EXPECT_EQ(Stats(stub).namespaces(0).output_nodes(), 5);

  // Now nobody steps v/1 either.
  ASSERT_TRUE(
      WaitFor([&] { return OpenSessions(stub) == 0; }, kExpireWithinMs));
  EXPECT_EQ(Stats(stub).namespaces(0).prompt_nodes(), 0);
  EXPECT_EQ(Metric(server, "lookahead_draft_sessions"), 0);
  EXPECT_EQ(Metric(server, "lookahead_draft_sessions_expired_total"), 4);
  const v1::SessionDraft gone = StepOne(stub, "v/1", {1});
  EXPECT_EQ(gone.code(), grpc::StatusCode::NOT_FOUND) << gone.message();
  // Report only: the sweeper's malloc_trim follows the expiry.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int64_t rss_expired = RssBytes(server.pid());
  std::printf(
      "draftsvc RSS: %.1f MiB empty, %.1f MiB with 4 sessions, %.1f MiB "
      "after they expired\n",
      rss_empty / 1048576.0, rss_open / 1048576.0, rss_expired / 1048576.0);

  // An expired id is free again.
  const grpc::Status reopened = Open(stub, "v/1", "lease", 16, 1);
  EXPECT_TRUE(reopened.ok()) << reopened.error_message();
}

TEST(DraftsvcLeaseTest, CapsAnswerResourceExhaustedNamingTheFlag) {
  auto started = LoneDraftsvc::Start(
      "caps", {"--max_sessions=4", "--max_sessions_per_namespace=2"});
  ASSERT_TRUE(started.ok()) << started.status();
  v1::DraftService::Stub& stub = (*started)->stub();

  ASSERT_TRUE(Open(stub, "a/1", "a", 8, 1).ok());
  ASSERT_TRUE(Open(stub, "a/2", "a", 8, 2).ok());
  const grpc::Status third_in_a = Open(stub, "a/3", "a", 8, 3);
  EXPECT_EQ(third_in_a.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(third_in_a.error_message().find("--max_sessions_per_namespace"),
            std::string::npos)
      << third_in_a.error_message();
  EXPECT_NE(third_in_a.error_message().find("\"a\""), std::string::npos)
      << third_in_a.error_message();

  ASSERT_TRUE(Open(stub, "b/1", "b", 8, 4).ok());
  ASSERT_TRUE(Open(stub, "b/2", "b", 8, 5).ok());
  const grpc::Status fifth = Open(stub, "c/1", "c", 8, 6);
  EXPECT_EQ(fifth.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(fifth.error_message().find("flag --max_sessions)"),
            std::string::npos)
      << fifth.error_message();

  // Closing one frees its slot in both caps.
  v1::CloseSessionRequest close;
  close.set_session_id("a/1");
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(stub.CloseSession(Context().get(), close, &closed).ok());
  const grpc::Status again = Open(stub, "a/3", "a", 8, 3);
  EXPECT_TRUE(again.ok()) << again.error_message();
  EXPECT_EQ(OpenSessions(stub), 4);
}

}  // namespace
}  // namespace lookahead::testing
