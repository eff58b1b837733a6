// Session leases against the real service pair (draftsvc + verifysvc with the
// real model, loopback gRPC).
//
// A verifier killed with SIGKILL under 16 streams leaves 16 draftsvc
// sessions with large private prompt tries; with --session_lease_s=3 they
// are gone a few seconds later without any traffic (sessions gauge and
// Stats back to 0, lookahead_draft_sessions_expired_total 16), and the
// test prints draftsvc's RSS before, with and after them.
//
// A verifier stopped (SIGSTOP) mid-generation past the lease finds its
// session expired when it resumes, reopens it and finishes: the client sees
// nothing, the tokens equal plain decoding's.
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/service_pair.h"
#include "tests/service_session_probe.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

constexpr int kStreams = 16;
// Generous waits: a loaded 2-core machine can stall the services.
constexpr int kWaitMs = 120000;

std::string PairDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

pid_t PidOf(const std::string& pair_name, const std::string& server) {
  return FindPidByArg(
      absl::StrCat("--port_file=", PairDir(pair_name), "/", server, ".port"));
}

struct DraftSessionsSeen {
  int64_t open = 0;
  int64_t prompt_nodes = 0;
};

DraftSessionsSeen DraftSessionsNow(ServicePair& pair) {
  DraftSessionsSeen seen;
  absl::StatusOr<v1::StatsResponse> stats = pair.DraftStats();
  if (!stats.ok()) return {-1, -1};
  for (const v1::NamespaceStats& s : stats->namespaces()) {
    seen.open += s.open_sessions();
    seen.prompt_nodes += s.prompt_nodes();
  }
  return seen;
}

// Polls `done` every `poll_ms` until it holds or `timeout_ms` passes.
bool WaitFor(const std::function<bool()>& done, int timeout_ms,
             int poll_ms = 20) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return true;
}

double MiB(int64_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

TEST(ServiceSessionLeaseTest, KilledVerifiersSessionsExpireAndFreeMemory) {
  PairOptions options;
  options.name = "killed_verifier";
  options.draftsvc_flags = {"--session_lease_s=3"};
  auto started = ServicePair::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServicePair& pair = **started;
  const PrintLogsOnFailure logs_on_failure(pair);
  const pid_t draftsvc = PidOf(options.name, "draftsvc");
  const pid_t verifysvc = PidOf(options.name, "verifysvc");
  ASSERT_GT(draftsvc, 0);
  ASSERT_GT(verifysvc, 0);
  const int64_t rss_before = RssBytes(draftsvc);

  // 16 streams of 1800 random prompt tokens: each session's prompt trie
  // holds ~1800 x 17 nodes (verifysvc's windows are 16 + 1 tokens). The
  // sessions open when the sequences are admitted, long before prefill ends.
  std::vector<std::thread> clients;
  std::atomic<int> ended{0};
  for (int i = 0; i < kStreams; ++i) {
    std::mt19937 rng(i);
    std::vector<int32_t> prompt(1800);
    for (int32_t& t : prompt) t = 100 + static_cast<int32_t>(rng() % 40000);
    clients.emplace_back([&pair, &ended, prompt] {
      pair.Generate(TokensRequest(prompt, 200));
      ended.fetch_add(1);
    });
  }
  DraftSessionsSeen with;
  ASSERT_TRUE(WaitFor(
      [&] {
        with = DraftSessionsNow(pair);
        return with.open == kStreams;
      },
      kWaitMs))
      << with.open << " draftsvc sessions open";
  const int64_t rss_with = RssBytes(draftsvc);

  // kill -9 the verifier: nobody will close its sessions.
  ASSERT_EQ(kill(verifysvc, SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ended.load(), kStreams);

  DraftSessionsSeen after;
  ASSERT_TRUE(WaitFor(
      [&] {
        after = DraftSessionsNow(pair);
        return after.open == 0;
      },
      kWaitMs))
      << after.open << " sessions of the dead verifier never expired";
  const double expiry_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed)
          .count();
  EXPECT_EQ(after.prompt_nodes, 0);
  absl::StatusOr<double> gauge =
      ScrapeMetric(pair.draftsvc_metrics_port(), "lookahead_draft_sessions");
  ASSERT_TRUE(gauge.ok()) << gauge.status();
  EXPECT_EQ(*gauge, 0);
  absl::StatusOr<double> expired = ScrapeMetric(
      pair.draftsvc_metrics_port(), "lookahead_draft_sessions_expired_total");
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_EQ(*expired, kStreams);
  // Report only: give the sweeper's malloc_trim, which follows the expiry,
  // a moment before reading the RSS.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int64_t rss_after = RssBytes(draftsvc);
  std::printf(
      "draftsvc: %lld sessions with %lld prompt-trie nodes gone %.1f s after "
      "the verifier's SIGKILL (lease 3 s); RSS %.1f MiB before, %.1f MiB "
      "with them, %.1f MiB after expiry\n",
      static_cast<long long>(with.open),
      static_cast<long long>(with.prompt_nodes), expiry_s, MiB(rss_before),
      MiB(rss_with), MiB(rss_after));
  EXPECT_GT(with.prompt_nodes, kStreams * 1800 * 10);
  // Reported above rather than held tight: malloc may keep freed pages.
  EXPECT_LT(rss_after, rss_with);
}

TEST(ServiceSessionLeaseTest, StalledVerifierReopensItsExpiredSession) {
  PairOptions options;
  options.name = "stalled_verifier";
  options.draftsvc_flags = {"--session_lease_s=1"};
  auto started = ServicePair::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServicePair& pair = **started;
  const PrintLogsOnFailure logs_on_failure(pair);
  const pid_t verifysvc = PidOf(options.name, "verifysvc");
  ASSERT_GT(verifysvc, 0);

  const v1::GenerateRequest request = ChatRequest(
      "Count from 1 to 100, separated by commas, with nothing else.", 160);
  const Generation plain = pair.Reference(request);
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  ASSERT_GE(plain.tokens.size(), 100u) << "the answer is too short to "
                                          "outlive the stall";

  // As soon as the request's draftsvc session is open, the verifier stops
  // until draftsvc has expired it (no traffic: the sweeper does it), then
  // resumes. A watcher thread polls draftsvc rather than waiting for a
  // streamed message: on a loaded machine the client can read its 3rd
  // message after the verifier has already finished and closed the session.
  ASSERT_EQ(DraftSessionsNow(pair).open, 0);
  std::atomic<bool> open_when_stopped{false};
  std::atomic<bool> expired_while_stopped{false};
  std::atomic<bool> generation_done{false};
  std::thread staller([&] {
    if (!WaitFor([&] { return generation_done.load() ||
                              DraftSessionsNow(pair).open >= 1; },
                 kWaitMs, /*poll_ms=*/2) ||
        generation_done.load()) {
      return;
    }
    kill(verifysvc, SIGSTOP);
    open_when_stopped = DraftSessionsNow(pair).open >= 1;
    expired_while_stopped = WaitFor(
        [&] {
          absl::StatusOr<double> expired =
              ScrapeMetric(pair.draftsvc_metrics_port(),
                           "lookahead_draft_sessions_expired_total");
          return expired.ok() && *expired >= 1;
        },
        kWaitMs);
    kill(verifysvc, SIGCONT);
  });
  const Generation drafted = pair.Generate(request);
  generation_done = true;
  staller.join();
  ASSERT_TRUE(open_when_stopped)
      << "the generation ended before the verifier could be stopped";
  ASSERT_TRUE(drafted.status.ok()) << drafted.status.error_message();
  EXPECT_TRUE(expired_while_stopped);
  EXPECT_EQ(drafted.tokens, plain.tokens)
      << "drafted " << TokensToString(drafted.tokens) << "\nplain   "
      << TokensToString(plain.tokens);

  absl::StatusOr<v1::GenerationStatsResponse> stats = pair.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GE(stats->draft_sessions_reopened(), 1);
  std::printf(
      "reopened %lld sessions; usage: %lld draft tokens accepted of %lld "
      "verified, EDL %.2f\n",
      static_cast<long long>(stats->draft_sessions_reopened()),
      static_cast<long long>(drafted.usage.accepted_draft_tokens()),
      static_cast<long long>(drafted.usage.draft_tokens()),
      drafted.usage.edl());
  // The finished sequence closed its reopened session.
  EXPECT_TRUE(
      WaitFor([&] { return DraftSessionsNow(pair).open == 0; }, kWaitMs));
}

}  // namespace
}  // namespace lookahead::testing
