#include "common/metrics.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::metrics {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(FormatValueTest, PrometheusParsableText) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-0.0), "0");
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(-7), "-7");
  EXPECT_EQ(FormatValue(1234567), "1234567");
  EXPECT_EQ(FormatValue(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(FormatValue(1.5), "1.5");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(1e-9), "1e-09");
  EXPECT_EQ(FormatValue(1e20), "1e+20");
  EXPECT_EQ(FormatValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatValue(kInf), "+Inf");
  EXPECT_EQ(FormatValue(-kInf), "-Inf");
  EXPECT_EQ(FormatValue(kNaN), "NaN");
}

TEST(FormatValueTest, RoundTripsRandomDoubles) {
  double value = 0.7;
  for (int i = 0; i < 2000; ++i) {
    value = value * 1.37 + 1e-3 / (i + 1);
    const double signed_value = (i % 2) ? value : -value / 1e6;
    EXPECT_EQ(std::strtod(FormatValue(signed_value).c_str(), nullptr),
              signed_value)
        << FormatValue(signed_value);
  }
}

TEST(RegistryTest, CounterGoldenText) {
  Registry registry;
  absl::StatusOr<Counter*> plain =
      registry.AddCounter("lookahead_requests_total", "Requests served.");
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<CounterFamily*> family = registry.AddCounter(
      "lookahead_finished_total", "Finished generations by reason.",
      {"service", "reason"});
  ASSERT_TRUE(family.ok()) << family.status();

  (*plain)->Increment();
  (*plain)->Increment(2);
  (*family)->WithLabels({"verify", "stop"})->Increment(0.5);
  (*family)->WithLabels({"verify", "length"})->Increment();
  (*family)->WithLabels({"verify", "stop"})->Increment(-3);    // ignored
  (*family)->WithLabels({"verify", "stop"})->Increment(kNaN);  // ignored

  EXPECT_EQ(registry.Render(),
            "# HELP lookahead_finished_total Finished generations by reason.\n"
            "# TYPE lookahead_finished_total counter\n"
            "lookahead_finished_total{service=\"verify\",reason=\"length\"} 1\n"
            "lookahead_finished_total{service=\"verify\",reason=\"stop\"} 0.5\n"
            "# HELP lookahead_requests_total Requests served.\n"
            "# TYPE lookahead_requests_total counter\n"
            "lookahead_requests_total 3\n");
}

TEST(RegistryTest, GaugeGoldenText) {
  Registry registry;
  absl::StatusOr<Gauge*> open = registry.AddGauge("open_streams", "Streams.");
  ASSERT_TRUE(open.ok()) << open.status();
  absl::StatusOr<GaugeFamily*> temps =
      registry.AddGauge("temperature_celsius", "Odd values.", {"probe"});
  ASSERT_TRUE(temps.ok()) << temps.status();

  (*open)->Increment();
  (*open)->Increment(4);
  (*open)->Decrement(2);
  (*temps)->WithLabels({"a"})->Set(-1.25);
  (*temps)->WithLabels({"b"})->Set(kInf);
  (*temps)->WithLabels({"c"})->Set(-kInf);
  (*temps)->WithLabels({"d"})->Set(kNaN);
  (*temps)->WithLabels({"e"})->Set(1e21);

  EXPECT_EQ((*open)->Value(), 3);
  EXPECT_EQ(registry.Render(),
            "# HELP open_streams Streams.\n"
            "# TYPE open_streams gauge\n"
            "open_streams 3\n"
            "# HELP temperature_celsius Odd values.\n"
            "# TYPE temperature_celsius gauge\n"
            "temperature_celsius{probe=\"a\"} -1.25\n"
            "temperature_celsius{probe=\"b\"} +Inf\n"
            "temperature_celsius{probe=\"c\"} -Inf\n"
            "temperature_celsius{probe=\"d\"} NaN\n"
            "temperature_celsius{probe=\"e\"} 1e+21\n");
}

TEST(RegistryTest, HistogramGoldenText) {
  Registry registry;
  absl::StatusOr<HistogramFamily*> family = registry.AddHistogram(
      "rpc_duration_seconds", "RPC latency.", {"method"}, {0.005, 0.1, 1});
  ASSERT_TRUE(family.ok()) << family.status();
  Histogram* draft = (*family)->WithLabels({"Draft"});
  for (double v : {0.001, 0.005, 0.05, 0.5, 0.5, 30.0}) draft->Observe(v);
  absl::StatusOr<Histogram*> plain =
      registry.AddHistogram("accepted_tokens", "Per step.", {1, 2});
  ASSERT_TRUE(plain.ok()) << plain.status();

  EXPECT_EQ(registry.Render(),
            "# HELP accepted_tokens Per step.\n"
            "# TYPE accepted_tokens histogram\n"
            "accepted_tokens_bucket{le=\"1\"} 0\n"
            "accepted_tokens_bucket{le=\"2\"} 0\n"
            "accepted_tokens_bucket{le=\"+Inf\"} 0\n"
            "accepted_tokens_sum 0\n"
            "accepted_tokens_count 0\n"
            "# HELP rpc_duration_seconds RPC latency.\n"
            "# TYPE rpc_duration_seconds histogram\n"
            "rpc_duration_seconds_bucket{method=\"Draft\",le=\"0.005\"} 2\n"
            "rpc_duration_seconds_bucket{method=\"Draft\",le=\"0.1\"} 3\n"
            "rpc_duration_seconds_bucket{method=\"Draft\",le=\"1\"} 5\n"
            "rpc_duration_seconds_bucket{method=\"Draft\",le=\"+Inf\"} 6\n"
            "rpc_duration_seconds_sum{method=\"Draft\"} 31.056\n"
            "rpc_duration_seconds_count{method=\"Draft\"} 6\n");
}

TEST(RegistryTest, EscapesHelpAndLabelValues) {
  Registry registry;
  absl::StatusOr<GaugeFamily*> family = registry.AddGauge(
      "escaped", "Path C:\\tmp\nsecond line \"quoted\"", {"value"});
  ASSERT_TRUE(family.ok()) << family.status();
  (*family)->WithLabels({"a\\b \"c\"\nd"})->Set(1);

  // HELP escapes backslash and newline only; label values also '"'.
  EXPECT_EQ(registry.Render(),
            "# HELP escaped Path C:\\\\tmp\\nsecond line \"quoted\"\n"
            "# TYPE escaped gauge\n"
            "escaped{value=\"a\\\\b \\\"c\\\"\\nd\"} 1\n");
}

TEST(HistogramTest, BucketEdges) {
  Registry registry;
  absl::StatusOr<Histogram*> h =
      registry.AddHistogram("edges", "Edges.", {-1, 0, 1, 2.5});
  ASSERT_TRUE(h.ok()) << h.status();
  (*h)->Observe(-kInf);                      // le=-1
  (*h)->Observe(-1);                         // le=-1: bound is in
  (*h)->Observe(std::nextafter(-1.0, 0.0));  // le=0
  (*h)->Observe(0);                          // le=0
  (*h)->Observe(1);                          // le=1
  (*h)->Observe(2.5);                        // le=2.5
  (*h)->Observe(std::nextafter(2.5, 3.0));   // +Inf
  (*h)->Observe(kInf);                       // +Inf
  (*h)->Observe(kNaN);                       // +Inf
  EXPECT_THAT((*h)->CumulativeCounts(), ElementsAre(2, 4, 5, 6, 9));
  EXPECT_EQ((*h)->Count(), 9u);
  EXPECT_TRUE(std::isnan((*h)->Sum()));
  EXPECT_THAT(registry.Render(), HasSubstr("edges_bucket{le=\"-1\"} 2\n"
                                           "edges_bucket{le=\"0\"} 4\n"
                                           "edges_bucket{le=\"1\"} 5\n"
                                           "edges_bucket{le=\"2.5\"} 6\n"
                                           "edges_bucket{le=\"+Inf\"} 9\n"
                                           "edges_sum NaN\n"
                                           "edges_count 9\n"));
}

TEST(HistogramTest, NoBoundsMeansOnlyInf) {
  Registry registry;
  absl::StatusOr<Histogram*> h = registry.AddHistogram("only_inf", "H.", {});
  ASSERT_TRUE(h.ok()) << h.status();
  (*h)->Observe(3);
  EXPECT_THAT(registry.Render(), HasSubstr("only_inf_bucket{le=\"+Inf\"} 1\n"
                                           "only_inf_sum 3\n"
                                           "only_inf_count 1\n"));
}

TEST(HistogramTest, BucketHelpers) {
  EXPECT_THAT(ExponentialBuckets(0.001, 10, 4),
              ElementsAre(0.001, 0.01, 0.1, 1.0));
  EXPECT_THAT(ExponentialBuckets(1, 2, 5), ElementsAre(1, 2, 4, 8, 16));
  EXPECT_THAT(LinearBuckets(0, 0.5, 3), ElementsAre(0, 0.5, 1));
  EXPECT_TRUE(ExponentialBuckets(0, 2, 3).empty());
  EXPECT_TRUE(ExponentialBuckets(1, 1, 3).empty());
  EXPECT_TRUE(LinearBuckets(0, -1, 3).empty());
  EXPECT_TRUE(LinearBuckets(0, 1, 0).empty());
}

TEST(FamilyTest, StablePointersAndCardinality) {
  Registry registry;
  absl::StatusOr<CounterFamily*> family =
      registry.AddCounter("per_namespace_total", "Per namespace.", {"ns"});
  ASSERT_TRUE(family.ok()) << family.status();
  Counter* first = (*family)->WithLabels({"ns0"});
  first->Increment();
  std::vector<Counter*> all;
  for (int i = 0; i < 1000; ++i) {
    all.push_back((*family)->WithLabels({absl::StrCat("ns", i)}));
  }
  EXPECT_EQ(all[0], first);  // still valid after 999 insertions
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ((*family)->WithLabels({absl::StrCat("ns", i)}), all[i]);
    for (int j = i + 1; j < std::min(i + 3, 1000); ++j) {
      EXPECT_NE(all[i], all[j]);
    }
  }
  EXPECT_EQ(first->Value(), 1);
  const std::vector<std::string> lines =
      absl::StrSplit(registry.Render(), '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 2u + 1000u);  // HELP, TYPE, one per combination
}

TEST(FamilyTest, EmptyFamilyIsNotRendered) {
  Registry registry;
  ASSERT_TRUE(registry.AddCounter("unused_total", "U.", {"x"}).ok());
  EXPECT_EQ(registry.Render(), "");
}

TEST(FamilyTest, WrongLabelCountGoesToUnexportedScratch) {
  Registry registry;
  absl::StatusOr<CounterFamily*> family =
      registry.AddCounter("two_labels_total", "T.", {"a", "b"});
  ASSERT_TRUE(family.ok()) << family.status();
  Counter* scratch = (*family)->WithLabels({"only_one"});
  ASSERT_NE(scratch, nullptr);
  scratch->Increment();
  EXPECT_EQ((*family)->WithLabels({"x", "y", "z"}), scratch);
  EXPECT_EQ(registry.Render(), "");
  (*family)->WithLabels({"x", "y"})->Increment();
  EXPECT_THAT(registry.Render(),
              HasSubstr("two_labels_total{a=\"x\",b=\"y\"} 1\n"));
}

TEST(RegistryTest, RejectsBadNamesWithMessages) {
  Registry registry;
  struct Case {
    absl::Status status;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {registry.AddGauge("9lives", "h").status(), "metric name \"9lives\""},
      {registry.AddGauge("", "h").status(), "metric name \"\""},
      {registry.AddGauge("has-dash", "h").status(), "[a-zA-Z_:]"},
      {registry.AddCounter("requests", "h").status(), "must end in \"_total\""},
      {registry.AddGauge("ok_name", "h", {"bad label"}).status(),
       "label name \"bad label\""},
      {registry.AddGauge("ok_name", "h", {"a:b"}).status(),
       "label name \"a:b\""},
      {registry.AddGauge("ok_name", "h", {"__name"}).status(), "reserved"},
      {registry.AddGauge("ok_name", "h", {"a", "a"}).status(), "repeats"},
      {registry.AddHistogram("lat", "h", {"le"}, {1}).status(),
       "\"le\" of histogram"},
      {registry.AddHistogram("lat", "h", {2, 1}).status(), "strictly"},
      {registry.AddHistogram("lat", "h", {1, 1}).status(), "strictly"},
      {registry.AddHistogram("lat", "h", {1, kInf}).status(), "finite"},
      {registry.AddHistogram("lat", "h", {kNaN}).status(), "finite"},
      {registry.AddGaugeCallback("bad name", "h", [] { return 1.0; }),
       "metric name"},
      {registry.AddCounterCallback("bytes", "h", [] { return 1.0; }), "_total"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument) << c.status;
    EXPECT_THAT(c.status.message(), HasSubstr(c.message_part));
  }
  // None of the failed calls registered anything.
  EXPECT_EQ(registry.Render(), "");
  EXPECT_TRUE(registry.AddGauge("ok_name", "h").ok());
  EXPECT_TRUE(registry.AddHistogram("lat", "h", {1}).ok());
  EXPECT_TRUE(registry.AddGauge("colons:are_ok", "h", {"_x1"}).ok());
}

TEST(RegistryTest, RejectsTakenNamesAndSeries) {
  Registry registry;
  ASSERT_TRUE(registry.AddHistogram("latency_seconds", "h", {1}).ok());
  ASSERT_TRUE(registry.AddCounter("hits_total", "h").ok());

  absl::Status again = registry.AddCounter("hits_total", "h", {"x"}).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.message(), HasSubstr("\"hits_total\" is already"));

  absl::Status clash = registry.AddGauge("latency_seconds_count", "h").status();
  EXPECT_EQ(clash.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(clash.message(),
              HasSubstr("exported by metric \"latency_seconds\""));

  ASSERT_TRUE(registry.AddGauge("queue_sum", "h").ok());
  absl::Status histogram_clash =
      registry.AddHistogram("queue", "h", {1}).status();
  EXPECT_EQ(histogram_clash.code(), absl::StatusCode::kAlreadyExists);
}

TEST(RegistryTest, CallbacksRunAtEveryScrape) {
  Registry registry;
  double nodes = 5;
  std::vector<LabeledValue> per_namespace = {
      {{"zeta"}, 2}, {{"alpha"}, 1}, {{"too", "many"}, 9}, {{"alpha"}, 7}};
  ASSERT_TRUE(
      registry.AddGaugeCallback("trie_nodes", "Nodes.", [&] { return nodes; })
          .ok());
  ASSERT_TRUE(registry
                  .AddLabeledGaugeCallback("trie_nodes_by_namespace", "By ns.",
                                           {"namespace"},
                                           [&] { return per_namespace; })
                  .ok());
  ASSERT_TRUE(registry
                  .AddCounterCallback("store_bytes_written_total", "Bytes.",
                                      [] { return 4096.0; })
                  .ok());
  // Taken names fail for callbacks too.
  EXPECT_EQ(
      registry.AddGaugeCallback("trie_nodes", "x", [] { return 0.0; }).code(),
      absl::StatusCode::kAlreadyExists);

  EXPECT_EQ(registry.Render(),
            "# HELP store_bytes_written_total Bytes.\n"
            "# TYPE store_bytes_written_total counter\n"
            "store_bytes_written_total 4096\n"
            "# HELP trie_nodes Nodes.\n"
            "# TYPE trie_nodes gauge\n"
            "trie_nodes 5\n"
            "# HELP trie_nodes_by_namespace By ns.\n"
            "# TYPE trie_nodes_by_namespace gauge\n"
            "trie_nodes_by_namespace{namespace=\"alpha\"} 1\n"
            "trie_nodes_by_namespace{namespace=\"zeta\"} 2\n");

  nodes = 6;
  per_namespace.clear();
  const std::string second = registry.Render();
  EXPECT_THAT(second, HasSubstr("trie_nodes 6\n"));
  EXPECT_THAT(second, ::testing::Not(HasSubstr("trie_nodes_by_namespace")));
}

// 8 threads hammer shared metrics (and create label combinations and
// render meanwhile); every total must come out exact.
TEST(ConcurrencyTest, TotalsAreExact) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100000;
  Registry registry;
  Counter* counter = *registry.AddCounter("ops_total", "Ops.");
  Counter* halves = *registry.AddCounter("halves_total", "Halves.");
  Gauge* gauge = *registry.AddGauge("level", "Level.");
  Histogram* histogram = *registry.AddHistogram("obs", "Obs.", {1, 2});
  CounterFamily* family = *registry.AddCounter("per_thread_total", "P.", {"t"});

  std::atomic<int> ready{0};  // start together so updates really overlap
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      Counter* mine = family->WithLabels({absl::StrCat(t % 4)});
      for (int i = 0; i < kPerThread; ++i) {
        counter->Increment();
        halves->Increment(0.5);
        gauge->Increment(i % 2 ? 1.0 : -0.25);
        histogram->Observe(static_cast<double>(i % 3) + 0.5);  // .5 1.5 2.5
        mine->Increment();
        if (i % 10000 == 0) {
          family->WithLabels({absl::StrCat("new", t, "_", i)})->Increment();
          if (t == 0) registry.Render();
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  constexpr int kTotal = kThreads * kPerThread;
  EXPECT_EQ(counter->Value(), kTotal);
  EXPECT_EQ(halves->Value(), kTotal * 0.5);
  EXPECT_EQ(gauge->Value(), kTotal / 2 * 1.0 - kTotal / 2 * 0.25);
  // i % 3 == 0, 1, 2 for 33334, 33333, 33333 of each thread's 100000.
  EXPECT_THAT(histogram->CumulativeCounts(),
              ElementsAre(kThreads * 33334, kThreads * 66667, kTotal));
  EXPECT_EQ(histogram->Sum(),
            kThreads * (33334 * 0.5 + 33333 * 1.5 + 33333 * 2.5));
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(family->WithLabels({absl::StrCat(t)})->Value(), 2 * kPerThread);
  }
  EXPECT_THAT(registry.Render(), HasSubstr("ops_total 800000\n"));
}

}  // namespace
}  // namespace lookahead::metrics
