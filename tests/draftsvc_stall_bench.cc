// What a stopped draftsvc costs a running stream: per-token latency (each
// message's gap since the previous one, shared by its tokens) of plain
// decoding, of drafted decoding with draftsvc running, and of drafted
// decoding while draftsvc is stopped (SIGSTOP: its sockets stay open, so
// every call runs into the deadline), on the same requests, in one run.
// Prints p50 and p99 of each and the stopped/plain p99 ratio; asserts only
// that every output equals plain decoding's and no stream failed.
//
//   bazel test //tests:draftsvc_stall_bench --test_output=all
//   LOOKAHEAD_STALL_FLAGS=--draft_sync bazel test \
//       //tests:draftsvc_stall_bench --test_output=all \
//       --test_env=LOOKAHEAD_STALL_FLAGS     # the waiting mode, to compare
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/service_pair.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;
using Clock = std::chrono::steady_clock;

constexpr int kRounds = 3;

struct Latencies {
  std::vector<double> ms_per_token;  // one sample per token
  std::vector<std::vector<int32_t>> outputs;
  int failures = 0;
};

// Streams `request` and adds each token's share of its message's gap.
void Stream(ServicePair& pair, const v1::GenerateRequest& request,
            Latencies* out) {
  grpc::ClientContext context;
  auto reader = pair.generation().Generate(&context, request);
  v1::GenerateResponse message;
  std::vector<int32_t> tokens;
  Clock::time_point last = Clock::now();
  bool first = true;
  while (reader->Read(&message)) {
    const Clock::time_point now = Clock::now();
    const int n = message.token_ids_size();
    tokens.insert(tokens.end(), message.token_ids().begin(),
                  message.token_ids().end());
    // The first message carries the prompt's prefill: not a decoding step.
    if (!first && n > 0) {
      const double gap =
          std::chrono::duration<double, std::milli>(now - last).count();
      for (int i = 0; i < n; ++i) out->ms_per_token.push_back(gap / n);
    }
    if (n > 0) {
      first = false;
      last = now;
    }
  }
  if (!reader->Finish().ok()) ++out->failures;
  out->outputs.push_back(std::move(tokens));
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  return v[i];
}

std::vector<v1::GenerateRequest> Requests() {
  std::vector<v1::GenerateRequest> requests(3);
  requests[0].set_text(
      "The GNU General Public License is a free, copyleft license for "
      "software and other kinds of works. The licenses for most software "
      "and other practical works are designed to take away your freedom to "
      "share and change the works. By contrast, the GNU General Public "
      "License is intended to guarantee your freedom to share and change "
      "all versions of a program. Repeat the first sentence:");
  requests[0].set_max_new_tokens(128);
  requests[1] = ChatRequest(
      "List the months of the year, one per line, each with its number of "
      "days.",
      128);
  requests[2] = ChatRequest("Write a short story about a lighthouse.", 128);
  return requests;
}

TEST(DraftsvcStallBench, StoppedDraftsvcCostsNoStepTime) {
  PairOptions options;
  options.name = "stall_bench";
  if (const char* flags = std::getenv("LOOKAHEAD_STALL_FLAGS")) {
    for (absl::string_view flag : absl::StrSplit(flags, ' ', absl::SkipEmpty())) {
      options.verifysvc_flags.emplace_back(flag);
    }
  }
  auto started = ServicePair::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServicePair& pair = **started;
  const PrintLogsOnFailure logs_on_failure(pair);
  const std::vector<v1::GenerateRequest> requests = Requests();

  Latencies plain, running, stopped;
  std::vector<v1::GenerateRequest> off = requests;
  for (v1::GenerateRequest& r : off) SetDraftMode(&r, v1::DRAFT_MODE_OFF);
  // Rounds interleave the three conditions, so drift in the machine's speed
  // falls on all of them.
  for (int round = 0; round < kRounds; ++round) {
    for (const v1::GenerateRequest& r : off) Stream(pair, r, &plain);
    for (const v1::GenerateRequest& r : requests) Stream(pair, r, &running);
    pair.SignalDraftsvc(SIGSTOP);
    for (const v1::GenerateRequest& r : requests) Stream(pair, r, &stopped);
    pair.SignalDraftsvc(SIGCONT);
  }

  const double plain_p99 = Percentile(plain.ms_per_token, 0.99);
  auto print = [&](const char* name, const Latencies& l) {
    std::printf("%-26s %5zu tokens  ms/token p50 %6.2f  p99 %6.2f  "
                "(p99 %.2fx plain's)\n",
                name, l.ms_per_token.size(), Percentile(l.ms_per_token, 0.5),
                Percentile(l.ms_per_token, 0.99),
                Percentile(l.ms_per_token, 0.99) / plain_p99);
  };
  std::printf("verifysvc flags:");
  for (const std::string& f : options.verifysvc_flags) {
    std::printf(" %s", f.c_str());
  }
  std::printf("\n");
  print("plain", plain);
  print("drafts, draftsvc running", running);
  print("drafts, draftsvc stopped", stopped);

  EXPECT_EQ(plain.failures + running.failures + stopped.failures, 0);
  for (size_t i = 0; i < plain.outputs.size(); ++i) {
    EXPECT_EQ(running.outputs[i], plain.outputs[i]) << "request " << i;
    EXPECT_EQ(stopped.outputs[i], plain.outputs[i]) << "request " << i;
  }
}

}  // namespace
}  // namespace lookahead::testing
