// The assistant draft source end to end: real draftsvc and verifysvc
// binaries over loopback gRPC, the real model, draftsvc started with
// --self_draft (the target's own GGUF as the assistant, every layer on one
// thread: it drafts the target's greedy tokens).
//
//   * The assistant alone and mixed with the tries and the n-gram pool give
//     exactly plain decoding's tokens, greedy and with seeded sampling.
//   * Usage.sources shows the assistant's drafts, and for the greedy
//     assistant-only request accepted assistant tokens.
//   * draftsvc exports the assistant's series.
//   * The verifier's in-process assistant (--assistant_model, here the
//     target's own file: it drafts the target's greedy tokens) gives
//     exactly plain decoding's tokens too, greedy and seeded.
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/gguf/model_files.h"
#include "gtest/gtest.h"
#include "tests/service_pair.h"
#include "tests/service_session_probe.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

constexpr int kNewTokens = 24;

// (draft, accepted) tokens Usage.sources reports for `source`.
std::pair<int64_t, int64_t> SourceUsage(const v1::Usage& usage,
                                        v1::DraftSource source) {
  for (const v1::SourceUsage& s : usage.sources()) {
    if (s.source() == source) {
      return {s.draft_tokens(), s.accepted_draft_tokens()};
    }
  }
  return {0, 0};
}

// The suite's chat request, hierarchical drafts from `sources` (none: the
// server's defaults) in `name_space`.
v1::GenerateRequest Request(std::vector<v1::DraftSource> sources,
                            const std::string& name_space) {
  v1::GenerateRequest request = ChatRequest(
      "Write three short sentences about the sea and the sky.", kNewTokens);
  SetDraftMode(&request, v1::DRAFT_MODE_TRIE_HIERARCHICAL);
  for (v1::DraftSource source : sources) {
    request.mutable_draft()->add_sources(source);
  }
  request.mutable_draft()->set_namespace_(name_space);
  return request;
}

class ServiceAssistantTest : public SharedPairTest<ServiceAssistantTest> {
 public:  // Read by SharedPairTest.
  static PairOptions Options() {
    PairOptions options;
    options.name = "assistant";
    // Deadlines no pass on a loaded 2-core machine misses, so that drafts
    // do not depend on timing: the assistant's (the default 2 ms would
    // leave some Steps with only pre-drafts; the flag's maximum, 1000 ms,
    // because without AVX-512 VNNI one int8 pass on one thread costs ~2x
    // the verifier's, 13-30 ms, and a chain of 8 after catching up with the
    // prompt took more than 200 ms on an AMD EPYC) and the verifier's wait
    // for the Step (default 20 ms, less than a few passes of this
    // assistant).
    options.draftsvc_flags = {"--self_draft", "--assistant_deadline_ms=1000"};
    // The assistant drafts every step it is asked to, so its path is
    // checked whatever its cost gate would decide on this machine; each
    // step waits for its drafts (--draft_sync: an asynchronous answer from
    // an assistant as slow as the target arrives after the sequence has
    // moved past it).
    options.verifysvc_flags = {"--draft_deadline_ms=10000",
                               "--cost_gates=false", "--draft_sync"};
    return options;
  }
};

TEST_F(ServiceAssistantTest, AssistantAloneAndMixedAreLossless) {
  struct Choice {
    const char* name;
    std::vector<v1::DraftSource> sources;
  };
  const std::vector<Choice> choices = {
      {"assistant", {v1::DRAFT_SOURCE_ASSISTANT}},
      {"mixed",
       {v1::DRAFT_SOURCE_PROMPT, v1::DRAFT_SOURCE_NGRAM,
        v1::DRAFT_SOURCE_ASSISTANT}},
  };
  for (const Choice& choice : choices) {
    for (bool sampled : {false, true}) {
      SCOPED_TRACE(absl::StrCat(choice.name, sampled ? " sampled" : " greedy"));
      v1::GenerateRequest request =
          Request(choice.sources, absl::StrCat("asst-", choice.name));
      if (sampled) SetSeededSampling(&request, 777);
      // Wall times are reported, never asserted.
      const absl::Time t0 = absl::Now();
      const Generation plain = pair_->Reference(request);
      const absl::Time t1 = absl::Now();
      const Generation fast = pair_->Generate(request);
      const absl::Time t2 = absl::Now();
      ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
      ASSERT_TRUE(fast.status.ok()) << fast.status.error_message();
      // Up to kNewTokens: the model may end its answer sooner (EOS), and
      // does in the int8 form on one of these; enough to compare either way.
      ASSERT_GE(plain.tokens.size(), static_cast<size_t>(kNewTokens) / 2);
      ASSERT_LE(plain.tokens.size(), static_cast<size_t>(kNewTokens));
      ExpectSameTokens(fast, plain);
      ASSERT_TRUE(fast.has_usage);
      const auto [drafted, accepted] =
          SourceUsage(fast.usage, v1::DRAFT_SOURCE_ASSISTANT);
      std::printf(
          "%-9s %s: edl %.2f, assistant %lld/%lld accepted, %.0f ms (plain "
          "%.0f ms)\n",
          choice.name, sampled ? "sampled" : "greedy ", fast.usage.edl(),
          static_cast<long long>(accepted), static_cast<long long>(drafted),
          absl::ToDoubleMilliseconds(t2 - t1),
          absl::ToDoubleMilliseconds(t1 - t0));
      EXPECT_LE(accepted, drafted);
      if (!sampled && choice.sources.size() == 1) {
        // The self-drafter runs the target's every layer: its greedy
        // drafts are the target's own tokens.
        EXPECT_GT(accepted, 0) << pair_->Logs();
      }
    }
  }
}

TEST_F(ServiceAssistantTest, DraftsvcExportsTheAssistantsSeries) {
  const Generation served =
      pair_->Generate(Request({v1::DRAFT_SOURCE_ASSISTANT}, "asst-metrics"));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  absl::StatusOr<v1::StatsResponse> stats = pair_->DraftStats("asst-metrics");
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->namespaces_size(), 1);
  int64_t proposed = 0;
  for (const v1::SourceStats& s : stats->namespaces(0).sources()) {
    if (s.source() == v1::DRAFT_SOURCE_ASSISTANT)
      proposed = s.proposed_tokens();
  }
  EXPECT_GT(proposed, 0);
  std::string line;
  for (const char* series : {"lookahead_assistant_drafted_tokens_total",
                             "lookahead_assistant_predraft_hits_total",
                             "lookahead_assistant_predraft_misses_total",
                             "lookahead_assistant_deadline_cuts_total",
                             "lookahead_assistant_seconds_per_token",
                             "lookahead_assistant_pass_seconds",
                             "lookahead_assistant_cached_tokens",
                             "lookahead_assistant_evictions_total",
                             "lookahead_assistant_sessions"}) {
    absl::StatusOr<double> value =
        ScrapeMetric(pair_->draftsvc_metrics_port(), series);
    ASSERT_TRUE(value.ok()) << series << ": " << value.status();
    absl::StrAppend(&line, " ", series, "=", *value);
  }
  std::printf("draftsvc:%s\n", line.c_str());
  // Measured when the assistant loaded, before any session ran a pass.
  absl::StatusOr<double> pass = ScrapeMetric(
      pair_->draftsvc_metrics_port(), "lookahead_assistant_pass_seconds");
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_GT(*pass, 0);
  absl::StatusOr<double> drafted =
      ScrapeMetric(pair_->draftsvc_metrics_port(),
                   "lookahead_assistant_drafted_tokens_total");
  ASSERT_TRUE(drafted.ok());
  EXPECT_GT(*drafted, 0);
}

// The same services with the verifier's cost gates on (the default): the
// Jacobi window and the assistant run only on the steps their gates allow,
// and every mix stays exactly plain decoding. The gates' decisions are
// counted in lookahead_cost_gate_steps_total and printed (which way they go
// depends on this machine's cost curve).
class ServiceCostGateTest : public SharedPairTest<ServiceCostGateTest> {
 public:  // Read by SharedPairTest.
  static PairOptions Options() {
    PairOptions options;
    options.name = "gates";
    options.draftsvc_flags = {"--self_draft", "--assistant_deadline_ms=200"};
    options.verifysvc_flags = {"--draft_deadline_ms=10000"};
    return options;
  }
};

TEST_F(ServiceCostGateTest, GatedMixIsLosslessAndCountsEveryDecision) {
  for (bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    v1::GenerateRequest request = ChatRequest(
        "Write three short sentences about the sea and the sky.", kNewTokens);
    SetDraftMode(&request, v1::DRAFT_MODE_TRIE_HIERARCHICAL);
    for (v1::DraftSource source :
         {v1::DRAFT_SOURCE_PROMPT, v1::DRAFT_SOURCE_NGRAM,
          v1::DRAFT_SOURCE_ASSISTANT}) {
      request.mutable_draft()->add_sources(source);
    }
    request.mutable_draft()->set_lookahead_window(5);
    request.mutable_draft()->set_lookahead_ngram(3);
    request.mutable_draft()->set_lookahead_guess(5);
    request.mutable_draft()->set_namespace_("gates");
    if (sampled) SetSeededSampling(&request, 4711);
    const Generation plain = pair_->Reference(request);
    const Generation fast = pair_->Generate(request);
    ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
    ASSERT_TRUE(fast.status.ok()) << fast.status.error_message();
    ExpectSameTokens(fast, plain);
    ASSERT_TRUE(fast.has_usage);
  }
  // Both requests decoded with both mechanisms asked for: every sequence
  // step with a draft session counted one decision per mechanism.
  double decisions[2] = {0, 0};
  int m = 0;
  for (const char* mechanism : {"jacobi_window", "assistant"}) {
    std::string line;
    for (const char* decision : {"run", "skip"}) {
      absl::StatusOr<double> value = ScrapeMetricSum(
          pair_->verifysvc_metrics_port(), "lookahead_cost_gate_steps_total",
          {absl::StrCat("mechanism=\"", mechanism, "\""),
           absl::StrCat("decision=\"", decision, "\"")});
      ASSERT_TRUE(value.ok()) << value.status();
      decisions[m] += *value;
      absl::StrAppend(&line, " ", decision, " ", *value);
    }
    std::printf("cost gate %s:%s\n", mechanism, line.c_str());
    ++m;
  }
  EXPECT_GT(decisions[0], 0);
  EXPECT_EQ(decisions[0], decisions[1]);
}

// The verifier's own assistant (verifysvc/drafts/assistant_source.h): the
// target's file as its assistant, its gate off and every step asking for
// drafts (a free ask at any pass cost), so that it drafts every step where
// the other sources are weak, whatever this machine's costs.
class ServiceLocalAssistantTest
    : public SharedPairTest<ServiceLocalAssistantTest> {
 public:  // Read by SharedPairTest.
  static PairOptions Options() {
    PairOptions options;
    options.name = "local-assistant";
    options.verifysvc_flags = {
        absl::StrCat("--assistant_model=", engine::DefaultModelPath()),
        "--cost_gates=false", "--free_ask_min_pass_ms=0.001"};
    return options;
  }
};

TEST_F(ServiceLocalAssistantTest, DraftsAreLosslessGreedyAndSeeded) {
  for (bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    v1::GenerateRequest request = Request({}, "local-assistant");
    if (sampled) SetSeededSampling(&request, 99);
    const Generation plain = pair_->Reference(request);
    const Generation fast = pair_->Generate(request);
    ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
    ASSERT_TRUE(fast.status.ok()) << fast.status.error_message();
    ASSERT_GE(plain.tokens.size(), static_cast<size_t>(kNewTokens) / 2);
    ExpectSameTokens(fast, plain);
    ASSERT_TRUE(fast.has_usage);
    const auto [drafted, accepted] =
        SourceUsage(fast.usage, v1::DRAFT_SOURCE_ASSISTANT);
    std::printf("local assistant %s: edl %.2f, %lld/%lld accepted\n",
                sampled ? "sampled" : "greedy ", fast.usage.edl(),
                static_cast<long long>(accepted),
                static_cast<long long>(drafted));
    EXPECT_LE(accepted, drafted);
    EXPECT_GT(drafted, 0) << pair_->Logs();
    // The target drafting for itself: its greedy drafts are its tokens.
    if (!sampled) EXPECT_GT(accepted, 0);
  }
  // Its passes have their own series on the verifier, are part of the
  // speedup estimate's denominator, and its gate (off: always run)
  // counted each step it was asked.
  std::string line;
  double values[3] = {0, 0, 0};
  int k = 0;
  for (const char* series :
       {"lookahead_assistant_seconds_total", "lookahead_assistant_passes_total",
        "lookahead_decode_seconds_total"}) {
    absl::StatusOr<double> value =
        ScrapeMetricSum(pair_->verifysvc_metrics_port(), series, {});
    ASSERT_TRUE(value.ok()) << series << ": " << value.status();
    values[k++] = *value;
    absl::StrAppend(&line, " ", series, "=", *value);
  }
  std::printf("verifysvc:%s\n", line.c_str());
  EXPECT_GT(values[0], 0);
  EXPECT_GT(values[1], 0);
  EXPECT_GT(values[2], values[0]);
  absl::StatusOr<double> runs = ScrapeMetricSum(
      pair_->verifysvc_metrics_port(), "lookahead_cost_gate_steps_total",
      {"mechanism=\"assistant\"", "decision=\"run\""});
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_GT(*runs, 0);
}

}  // namespace
}  // namespace lookahead::testing
