// draftsvc stops answering (SIGSTOP) for far longer than the verifier's
// draft deadline, under running streams, then comes back (SIGCONT).
//
// A stopped process keeps its sockets open, so unlike a kill nothing
// resets the connection: every draft RPC runs into the verifier's deadline.
// The streams must go on plainly with no client error and exactly the
// tokens of plain decoding, and once draftsvc runs again a repeat request
// is drafted again (accepted draft tokens grow, usage.edl > 1).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/service_pair.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

// How long draftsvc stays stopped: 100 times the verifier's 20 ms deadline.
constexpr auto kStopped = std::chrono::seconds(2);
constexpr int kResumeWithinMs = 10000;

std::string StatsLine(const v1::GenerationStatsResponse& s) {
  return absl::StrCat("draftsvc_available=", s.draftsvc_available(),
                      " draft_step_failures=", s.draft_step_failures(),
                      " accepted_draft_tokens=", s.accepted_draft_tokens());
}

TEST(ServiceDraftsvcStallTest, StreamsGoOnPlainlyAndDraftsResumeAfterSigcont) {
  PairOptions options;
  options.name = "stall";
  auto started = ServicePair::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServicePair& pair = **started;
  const PrintLogsOnFailure logs_on_failure(pair);

  // Raw text goes on without an end-of-turn token; a chat answer and a
  // seeded sample run beside it.
  std::vector<v1::GenerateRequest> requests(3);
  requests[0].set_text(
      "The GNU General Public License is a free, copyleft license for "
      "software and other kinds of works.");
  requests[0].set_max_new_tokens(400);
  requests[1] = ChatRequest(
      "List the months of the year, one per line, each with its number of "
      "days.",
      160);
  requests[2] = ChatRequest("Write a short story about a lighthouse.", 160);
  SetSeededSampling(&requests[2], 77);
  std::vector<Generation> plain;
  for (const v1::GenerateRequest& request : requests) {
    plain.push_back(pair.Reference(request));
    ASSERT_TRUE(plain.back().status.ok())
        << plain.back().status.error_message();
  }

  std::atomic<bool> stopped{false};
  std::thread stopper;
  std::vector<Generation> got(requests.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < requests.size(); ++i) {
    clients.emplace_back([&, i] {
      StreamHooks hooks;
      hooks.on_message = [&](grpc::ClientContext*, int message) {
        // Stop once draftsvc has answered a Step: the sessions are open,
        // so the stall meets Steps (not opens, which have their own
        // deadline and count as no step failure).
        if (i != 0 || message < 4 || stopped.load()) return;
        if (pair.ProposedDraftTokens() == 0 || stopped.exchange(true)) return;
        stopper = std::thread([&] {
          pair.SignalDraftsvc(SIGSTOP);
          std::this_thread::sleep_for(kStopped);
          pair.SignalDraftsvc(SIGCONT);
        });
      };
      got[i] = pair.Generate(requests[i], hooks);
    });
  }
  for (std::thread& t : clients) t.join();
  if (stopper.joinable()) stopper.join();
  ASSERT_TRUE(stopped.load()) << "the stream ended before draftsvc stopped";
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, plain[i].tokens)
        << "\n  with the stall: " << TokensToString(got[i].tokens)
        << "\n  drafts off:     " << TokensToString(plain[i].tokens);
  }
  absl::StatusOr<v1::GenerationStatsResponse> after = pair.Stats();
  ASSERT_TRUE(after.ok()) << after.status();
  std::printf("after the stall (%zu tokens in stream 0): %s\n",
              got[0].tokens.size(), StatsLine(*after).c_str());
  EXPECT_GT(after->draft_step_failures(), 0)
      << "no draft step ran into the deadline while draftsvc was stopped";

  // draftsvc runs again: drafts come back for a repeat request.
  const auto resumed = std::chrono::steady_clock::now();
  const int64_t accepted_before = after->accepted_draft_tokens();
  int64_t accepted_now = accepted_before;
  for (int tries = 1;; ++tries) {
    const Generation repeat = pair.Generate(requests[1]);
    ASSERT_TRUE(repeat.status.ok()) << repeat.status.error_message();
    EXPECT_EQ(repeat.tokens, plain[1].tokens) << "repeat " << tries;
    absl::StatusOr<v1::GenerationStatsResponse> now = pair.Stats();
    ASSERT_TRUE(now.ok()) << now.status();
    accepted_now = now->accepted_draft_tokens();
    const double elapsed = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - resumed)
                               .count();
    std::printf("repeat %d at %.1f s after SIGCONT: edl %.3f; %s\n", tries,
                elapsed, repeat.usage.edl(), StatsLine(*now).c_str());
    if (repeat.usage.edl() > 1.0 && accepted_now > accepted_before) break;
    ASSERT_LT(elapsed * 1000, kResumeWithinMs)
        << "drafts did not resume after SIGCONT";
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace
}  // namespace lookahead::testing
