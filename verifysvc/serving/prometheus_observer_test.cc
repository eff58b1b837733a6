// PrometheusObserver: what the scheduler reports becomes the series the
// dashboard reads (here the prefix cache's; tests/prometheus_test.py
// scrapes the whole service pair).

#include "verifysvc/serving/prometheus_observer.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::verifysvc {
namespace {

using ::testing::HasSubstr;

TEST(PrometheusObserverTest, ExportsPrefixCacheSeries) {
  metrics::Registry registry;
  auto m = VerifierMetrics::Create(&registry, "m", 4);
  ASSERT_TRUE(m.ok()) << m.status();
  PrometheusObserver observer(m->get());
  observer.OnPrefixLookup(/*prompt_tokens=*/100, /*hit_tokens=*/64);
  observer.OnPrefixLookup(50, 0);
  observer.OnPrefixCacheState(/*bytes=*/4096, /*capacity_bytes=*/8192,
                              /*new_evictions=*/3);
  observer.OnPrefixCacheState(2048, 8192, 2);
  const std::string text = registry.Render();
  EXPECT_THAT(
      text, HasSubstr("lookahead_prefix_cache_lookup_tokens_total{model=\"m\"} "
                      "150\n"));
  EXPECT_THAT(text,
              HasSubstr("lookahead_prefix_cache_hit_tokens_total{model=\"m\"} "
                        "64\n"));
  EXPECT_THAT(text,
              HasSubstr("lookahead_prefix_cache_bytes{model=\"m\"} 2048\n"));
  EXPECT_THAT(text, HasSubstr("lookahead_prefix_cache_capacity_bytes{model="
                              "\"m\"} 8192\n"));
  EXPECT_THAT(text,
              HasSubstr("lookahead_prefix_cache_evictions_total{model=\"m\"} "
                        "5\n"));
}

TEST(PrometheusObserverTest, ExportsDraftTokensPerSource) {
  metrics::Registry registry;
  auto m = VerifierMetrics::Create(&registry, "m", 4);
  ASSERT_TRUE(m.ok()) << m.status();
  PrometheusObserver observer(m->get());
  observer.OnDraftSourceVerified(engine::DraftSourceTag::kTrie, 10, 4);
  observer.OnDraftSourceVerified(engine::DraftSourceTag::kNgram, 6, 3);
  observer.OnDraftSourceVerified(engine::DraftSourceTag::kTrie, 5, 0);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("lookahead_spec_decode_num_draft_tokens_per_"
                              "source_total{model=\"m\",source=\"trie\"} "
                              "15\n"));
  EXPECT_THAT(text, HasSubstr("lookahead_spec_decode_num_accepted_tokens_per_"
                              "source_total{model=\"m\",source=\"trie\"} "
                              "4\n"));
  EXPECT_THAT(text, HasSubstr("lookahead_spec_decode_num_draft_tokens_per_"
                              "source_total{model=\"m\",source=\"ngram\"} "
                              "6\n"));
  EXPECT_THAT(text, HasSubstr("lookahead_spec_decode_num_accepted_tokens_per_"
                              "source_total{model=\"m\",source=\"ngram\"} "
                              "3\n"));
  // Every source has its series from the start (0 until it drafts).
  EXPECT_THAT(text, HasSubstr("lookahead_spec_decode_num_accepted_tokens_per_"
                              "source_total{model=\"m\",source=\"assistant"
                              "\"} 0\n"));
}

TEST(PrometheusObserverTest, ExportsTheCostModelAfterEachStep) {
  metrics::Registry registry;
  auto m = VerifierMetrics::Create(&registry, "m", 4);
  ASSERT_TRUE(m.ok()) << m.status();
  PrometheusObserver observer(m->get());
  std::vector<std::pair<int, double>> cost = {{1, 0.0027}, {2, 0.0037}};
  StepReport step;
  step.step_cost = cost;
  observer.OnStep(step);
  cost[1].second = 0.0035;  // the model moved after the next pass
  observer.OnStep(step);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("lookahead_step_cost_seconds{model=\"m\","
                              "tokens=\"1\"} 0.0027\n"));
  EXPECT_THAT(text, HasSubstr("lookahead_step_cost_seconds{model=\"m\","
                              "tokens=\"2\"} 0.0035\n"));
}

TEST(PrometheusObserverTest, ExportsCostGateDecisions) {
  metrics::Registry registry;
  auto m = VerifierMetrics::Create(&registry, "m", 4);
  ASSERT_TRUE(m.ok()) << m.status();
  PrometheusObserver observer(m->get());
  observer.OnCostGate(GatedMechanism::kJacobiWindow, false);
  observer.OnCostGate(GatedMechanism::kJacobiWindow, false);
  observer.OnCostGate(GatedMechanism::kAssistant, true);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("lookahead_cost_gate_steps_total{model=\"m\","
                              "mechanism=\"jacobi_window\",decision=\"skip\"} "
                              "2\n"));
  EXPECT_THAT(text, HasSubstr("lookahead_cost_gate_steps_total{model=\"m\","
                              "mechanism=\"assistant\",decision=\"run\"} "
                              "1\n"));
  // Every combination from the start, at 0.
  EXPECT_THAT(text, HasSubstr("lookahead_cost_gate_steps_total{model=\"m\","
                              "mechanism=\"assistant\",decision=\"skip\"} "
                              "0\n"));
}

// The verifier's assistant runs in series with the verify passes: its time
// is its own series and part of the speedup's denominator, beside the
// decoding steps' forward time.
TEST(PrometheusObserverTest, ExportsAssistantPassesAndChargesThemToDecode) {
  metrics::Registry registry;
  auto m = VerifierMetrics::Create(&registry, "m", 4);
  ASSERT_TRUE(m.ok()) << m.status();
  PrometheusObserver observer(m->get());
  StepReport step;
  step.decoding_sequences = 1;
  step.forward_seconds = 0.04;
  observer.OnStep(step);
  observer.OnAssistantPasses(/*seconds=*/0.03, /*passes=*/3);
  observer.OnAssistantPasses(0.01, 1);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("lookahead_assistant_seconds_total{model=\"m\"} "
                              "0.04\n"));
  EXPECT_THAT(text,
              HasSubstr("lookahead_assistant_passes_total{model=\"m\"} 4\n"));
  EXPECT_THAT(text,
              HasSubstr("lookahead_decode_seconds_total{model=\"m\"} 0.08\n"));
}

}  // namespace
}  // namespace lookahead::verifysvc
