// Many clients at once, and clients that leave early, against the real
// service pair (draftsvc + verifysvc binaries, loopback gRPC, real model).
//
//   * 16 concurrent streams with mixed prompts, sampling, lengths and draft
//     modes: each output is exactly its plain-decoding output computed alone
//     (so batch composition changes nothing), and the scheduler really
//     batched them (Stats.max_forward_sequences > 1).
//   * A client that cancels after its first message, and one whose deadline
//     passes mid-stream: the server drops the sequence (running_sequences
//     falls, requests_cancelled counts it) and the streams beside it finish
//     exactly as plain decoding would.
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/service_pair.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

const char* const kPrompts[] = {
    "List the days of the week, one per line.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick "
    "brown fox jumps over the lazy dog.",
    "What is 12 + 30? Show your steps.",
    "Explique en une phrase ce qu'est la photosynthèse.",
    "Name three rivers in Europe and the countries they flow through.",
};
constexpr int kNumPrompts = sizeof(kPrompts) / sizeof(kPrompts[0]);

class ServiceConcurrencyTest : public SharedPairTest<ServiceConcurrencyTest> {
 public:  // Read by SharedPairTest.
  static PairOptions Options() {
    PairOptions options;
    options.name = "concurrency";
    return options;
  }
};

// Request i of the concurrent mix: prompts, greedy or seeded, 24..56 new
// tokens, drafts off / hierarchical / parallel.
v1::GenerateRequest MixedRequest(int i) {
  v1::GenerateRequest request =
      ChatRequest(kPrompts[i % kNumPrompts], 24 + 8 * (i % 5));
  if (i % 2 == 1) SetSeededSampling(&request, 500 + i);
  switch (i % 4) {
    case 0:
      SetDraftMode(&request, v1::DRAFT_MODE_OFF);
      break;
    case 3:
      SetDraftMode(&request, v1::DRAFT_MODE_TRIE_PARALLEL);
      break;
    default:
      break;  // the server default: hierarchical
  }
  return request;
}

TEST_F(ServiceConcurrencyTest, SixteenStreamsMatchPlainDecodingAndBatch) {
  constexpr int kClients = 16;
  std::vector<v1::GenerateRequest> requests;
  std::vector<Generation> plain;
  for (int i = 0; i < kClients; ++i) {
    requests.push_back(MixedRequest(i));
    plain.push_back(pair_->Reference(requests.back()));  // alone, one by one
    ASSERT_TRUE(plain.back().status.ok())
        << "reference " << i << ": " << plain.back().status.error_message();
  }

  std::vector<Generation> got(kClients);
  std::atomic<int> ready{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kClients) std::this_thread::yield();
      got[i] = pair_->Generate(requests[i]);
    });
  }
  for (std::thread& t : clients) t.join();

  int64_t accepted = 0;
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE(
        absl::StrCat("client ", i, ": ", requests[i].ShortDebugString()));
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, plain[i].tokens)
        << "\n  concurrent: " << TokensToString(got[i].tokens)
        << "\n  alone, off: " << TokensToString(plain[i].tokens);
    accepted += got[i].usage.accepted_draft_tokens();
  }
  absl::StatusOr<v1::GenerationStatsResponse> stats = pair_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  std::printf("accepted draft tokens in the concurrent run: %lld\n",
              static_cast<long long>(accepted));
  std::printf("Stats: %s\n", stats->DebugString().c_str());
  EXPECT_GT(stats->max_forward_sequences(), 1) << "no batching happened";
}

TEST_F(ServiceConcurrencyTest, CancelledStreamLeavesAndOthersFinish) {
  // Two streams that must finish, and one long one that cancels itself
  // after its first message.
  v1::GenerateRequest keep_a = ChatRequest(kPrompts[1], 64);
  v1::GenerateRequest keep_b = ChatRequest(kPrompts[5], 64);
  SetSeededSampling(&keep_b, 99);
  v1::GenerateRequest doomed = ChatRequest(
      "Write a very long story about a dragon who learns to cook.", 256);
  const Generation plain_a = pair_->Reference(keep_a);
  const Generation plain_b = pair_->Reference(keep_b);
  ASSERT_TRUE(plain_a.status.ok()) << plain_a.status.error_message();
  ASSERT_TRUE(plain_b.status.ok()) << plain_b.status.error_message();

  absl::StatusOr<v1::GenerationStatsResponse> start = pair_->Stats();
  ASSERT_TRUE(start.ok()) << start.status();
  std::atomic<int> finished{0};
  Generation got_a, got_b, got_doomed;
  std::thread a([&] {
    got_a = pair_->Generate(keep_a);
    finished.fetch_add(1);
  });
  std::thread b([&] {
    got_b = pair_->Generate(keep_b);
    finished.fetch_add(1);
  });

  // Cancels once all three run, and keeps the snapshot taken just before.
  v1::GenerationStatsResponse before_cancel;
  StreamHooks hooks;
  hooks.on_message = [&](grpc::ClientContext* context, int message) {
    if (message != 1) return;
    pair_->WaitForStats(
        [](const v1::GenerationStatsResponse& s) {
          return s.running_sequences() >= 3;
        },
        5000, &before_cancel);
    context->TryCancel();
  };
  got_doomed = pair_->Generate(doomed, hooks);
  EXPECT_EQ(got_doomed.status.error_code(), grpc::StatusCode::CANCELLED)
      << got_doomed.status.error_message();

  v1::GenerationStatsResponse after_cancel;
  const bool dropped = pair_->WaitForStats(
      [&](const v1::GenerationStatsResponse& s) {
        return s.requests_cancelled() == start->requests_cancelled() + 1 &&
               s.running_sequences() < before_cancel.running_sequences();
      },
      3000, &after_cancel);
  const int finished_when_dropped = finished.load();
  a.join();
  b.join();
  std::printf(
      "running before cancel %d, after %d (other streams finished by then: "
      "%d of 2); requests_cancelled %lld -> %lld\n",
      before_cancel.running_sequences(), after_cancel.running_sequences(),
      finished_when_dropped,
      static_cast<long long>(start->requests_cancelled()),
      static_cast<long long>(after_cancel.requests_cancelled()));
  EXPECT_GE(before_cancel.running_sequences(), 3)
      << "the three streams were never running together";
  EXPECT_TRUE(dropped) << "the cancelled sequence was not dropped: "
                       << after_cancel.ShortDebugString();

  ASSERT_TRUE(got_a.status.ok()) << got_a.status.error_message();
  ASSERT_TRUE(got_b.status.ok()) << got_b.status.error_message();
  EXPECT_EQ(got_a.tokens, plain_a.tokens) << "greedy stream beside a cancel";
  EXPECT_EQ(got_b.tokens, plain_b.tokens) << "sampled stream beside a cancel";
}

TEST_F(ServiceConcurrencyTest, DeadlineExceededStreamIsDropped) {
  absl::StatusOr<v1::GenerationStatsResponse> start = pair_->Stats();
  ASSERT_TRUE(start.ok()) << start.status();
  v1::GenerateRequest request = ChatRequest(
      "Write a very long story about a lighthouse keeper and the sea.", 1500);
  // Plain decoding, so its speed is known: 100-190 tokens/s alone here.
  SetDraftMode(&request, v1::DRAFT_MODE_OFF);
  StreamHooks hooks;
  hooks.deadline_ms = 1500;  // long past the prefill, far short of 1500 tokens
  const Generation got = pair_->Generate(request, hooks);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << got.status.error_message();
  EXPECT_GT(got.messages, 0) << "the deadline passed before decoding began";

  v1::GenerationStatsResponse after;
  const bool dropped = pair_->WaitForStats(
      [&](const v1::GenerationStatsResponse& s) {
        return s.requests_cancelled() == start->requests_cancelled() + 1 &&
               s.running_sequences() == 0;
      },
      3000, &after);
  std::printf("after the deadline (%d messages received): %s\n", got.messages,
              after.ShortDebugString().c_str());
  EXPECT_TRUE(dropped) << "the expired sequence was not dropped";
}

}  // namespace
}  // namespace lookahead::testing
