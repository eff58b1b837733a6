// PrometheusObserver: what the scheduler reports becomes the series the
// dashboard reads (here the prefix cache's; tests/prometheus_test.py
// scrapes the whole service pair).

#include "verifysvc/serving/prometheus_observer.h"

#include <memory>
#include <string>

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

}  // namespace
}  // namespace lookahead::verifysvc
