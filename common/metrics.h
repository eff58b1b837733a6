// Prometheus metrics: counters, gauges and fixed-bucket histograms, grouped
// in labeled families and rendered in the text exposition format 0.0.4.
// Thread safety: everything is safe for concurrent use. Increment/Set/Observe
// are lock-free (relaxed atomics); a family takes its mutex only to look up
// or create a label combination, so cache the returned pointer on hot paths.
#ifndef LOOKAHEAD_COMMON_METRICS_H_
#define LOOKAHEAD_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace lookahead::metrics {

// The Content-Type of Registry::Render()'s output.
inline constexpr char kContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";

// A monotonically increasing value, e.g. requests_total.
class Counter {
 public:
  void Increment() { whole_.fetch_add(1, std::memory_order_relaxed); }
  // Negative and NaN deltas are ignored: a counter never goes down.
  void Increment(double delta);
  double Value() const;

 private:
  template <typename>
  friend class Family;
  Counter() = default;

  // Integral increments add here exactly; the rest accumulate as double bits.
  std::atomic<uint64_t> whole_{0};
  std::atomic<uint64_t> fraction_bits_{0};
};

// A value that goes up and down, e.g. open_streams.
class Gauge {
 public:
  void Set(double value);
  void Increment(double delta = 1.0);
  void Decrement(double delta = 1.0) { Increment(-delta); }
  double Value() const;

 private:
  template <typename>
  friend class Family;
  Gauge() = default;

  std::atomic<uint64_t> bits_{0};  // a double's bits; 0 is +0.0
};

// Counts observations into fixed buckets, e.g. request_duration_seconds.
// Bucket i holds values v <= upper_bounds[i] (and above the previous bound);
// an implicit last bucket (le="+Inf") holds the rest, NaN included.
class Histogram {
 public:
  void Observe(double value);

  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // Cumulative counts, one per bound plus +Inf last (as exported).
  std::vector<uint64_t> CumulativeCounts() const;
  // The number of observations (== CumulativeCounts().back()).
  uint64_t Count() const;
  double Sum() const;

 private:
  template <typename>
  friend class Family;
  explicit Histogram(std::vector<double> upper_bounds);

  const std::vector<double> upper_bounds_;  // strictly increasing, finite
  // Non-cumulative counts; upper_bounds_.size() + 1 entries (+Inf last).
  const std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<uint64_t> sum_bits_{0};
};

// Bucket bounds start, start*factor, ... (`count` of them).
// REQUIRES: start > 0, factor > 1, count >= 1; otherwise returns {}.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Bucket bounds start, start+width, ... (`count` of them).
// REQUIRES: width > 0, count >= 1; otherwise returns {}.
std::vector<double> LinearBuckets(double start, double width, int count);

// One rendered metric family (internal to the library and Registry).
class Collector {
 public:
  virtual ~Collector() = default;
  // Appends "# HELP", "# TYPE" and sample lines to `out`; nothing if the
  // family has no samples.
  virtual void Render(std::string* out) const = 0;
};

// All metrics of one name, one per combination of label values.
// T is Counter, Gauge or Histogram.
template <typename T>
class Family final : public Collector {
 public:
  // Returns the metric for `label_values` (in label_names() order), created
  // at zero on first use. The pointer is valid for the family's lifetime.
  // REQUIRES: label_values.size() == label_names().size(). On a mismatch a
  // caller bug is logged and a scratch metric that is never exported is
  // returned, so the caller neither crashes nor corrupts a real series.
  T* WithLabels(const std::vector<std::string>& label_values);

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  void Render(std::string* out) const override;

 private:
  friend class Registry;
  Family(std::string name, std::string help, std::vector<std::string> labels,
         std::vector<double> upper_bounds);
  std::unique_ptr<T> NewMetric() const;  // zeroed

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> upper_bounds_;  // Histogram only
  const std::unique_ptr<T> scratch_;        // for label-count mismatches
  std::atomic<bool> mismatch_logged_{false};

  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_
      ABSL_GUARDED_BY(mu_);
};

extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;
using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// One sample of a labeled callback: label values in label_names order.
struct LabeledValue {
  std::vector<std::string> label_values;
  double value = 0;
};

// Owns metric families and renders them, sorted by name. Every Add* returns
// INVALID_ARGUMENT for a bad metric or label name (the message says which
// and why) and ALREADY_EXISTS for a name, or a histogram's _bucket/_sum/
// _count series name, that is taken. Counter names must end in "_total".
// Returned pointers are owned by the registry and live as long as it does.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  absl::StatusOr<CounterFamily*> AddCounter(
      const std::string& name, const std::string& help,
      const std::vector<std::string>& label_names);
  absl::StatusOr<Counter*> AddCounter(const std::string& name,
                                      const std::string& help);

  absl::StatusOr<GaugeFamily*> AddGauge(
      const std::string& name, const std::string& help,
      const std::vector<std::string>& label_names);
  absl::StatusOr<Gauge*> AddGauge(const std::string& name,
                                  const std::string& help);

  // `upper_bounds` must be finite and strictly increasing; +Inf is implied.
  // "le" is not allowed as a label name.
  absl::StatusOr<HistogramFamily*> AddHistogram(
      const std::string& name, const std::string& help,
      const std::vector<std::string>& label_names,
      std::vector<double> upper_bounds);
  absl::StatusOr<Histogram*> AddHistogram(const std::string& name,
                                          const std::string& help,
                                          std::vector<double> upper_bounds);

  // Values computed at scrape time. `fn` runs on the scraping thread with no
  // registry lock held; it must be thread-safe and stay callable for the
  // registry's lifetime (stop the MetricsServer before destroying what it
  // captures). Labeled samples with the wrong number of values are dropped,
  // as are repeats of a label combination after the first.
  absl::Status AddGaugeCallback(const std::string& name,
                                const std::string& help,
                                std::function<double()> fn);
  absl::Status AddLabeledGaugeCallback(
      const std::string& name, const std::string& help,
      const std::vector<std::string>& label_names,
      std::function<std::vector<LabeledValue>()> fn);
  // For monotonic totals kept elsewhere (e.g. RocksDB statistics).
  absl::Status AddCounterCallback(const std::string& name,
                                  const std::string& help,
                                  std::function<double()> fn);
  absl::Status AddLabeledCounterCallback(
      const std::string& name, const std::string& help,
      const std::vector<std::string>& label_names,
      std::function<std::vector<LabeledValue>()> fn);

  // Returns every family in the text exposition format 0.0.4.
  std::string Render() const;

 private:
  // Validates the names, reserves `name` and its series names, and takes
  // ownership of the collector that `make` builds.
  absl::StatusOr<Collector*> Add(
      const std::string& name, const std::string& type,
      const std::vector<std::string>& label_names,
      const std::function<std::unique_ptr<Collector>()>& make);

  mutable absl::Mutex mu_;
  // Keyed by name, so Render() output is sorted and deterministic.
  std::map<std::string, std::unique_ptr<Collector>> collectors_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> series_names_ ABSL_GUARDED_BY(mu_);
};

// Formats a sample value the way Prometheus parses it: "+Inf", "-Inf",
// "NaN", integers without exponent or fraction, else the shortest text that
// reads back as the same double.
std::string FormatValue(double value);

}  // namespace lookahead::metrics

#endif  // LOOKAHEAD_COMMON_METRICS_H_
