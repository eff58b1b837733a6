#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lookahead::metrics {
namespace {

// Doubles up to 2^53 are exact integers; below it integral increments go to
// an integer counter and integral values print without exponent.
constexpr double kMaxExactInteger = 9007199254740992.0;

double FromBits(uint64_t bits) { return absl::bit_cast<double>(bits); }
uint64_t ToBits(double value) { return absl::bit_cast<uint64_t>(value); }

// Adds `delta` to the double stored as bits in `*bits`, without a lock.
void AtomicAdd(std::atomic<uint64_t>* bits, double delta) {
  uint64_t old_bits = bits->load(std::memory_order_relaxed);
  while (!bits->compare_exchange_weak(old_bits,
                                      ToBits(FromBits(old_bits) + delta),
                                      std::memory_order_relaxed)) {
  }
}

bool IsNameStart(char c, bool allow_colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         (allow_colon && c == ':');
}

bool IsNameChar(char c, bool allow_colon) {
  return IsNameStart(c, allow_colon) || (c >= '0' && c <= '9');
}

// Metric names: [a-zA-Z_:][a-zA-Z0-9_:]*; label names the same without ':'.
bool IsValidName(const std::string& name, bool allow_colon) {
  if (name.empty() || !IsNameStart(name[0], allow_colon)) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return IsNameChar(c, allow_colon); });
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// HELP text escapes backslash and newline; label values also escape '"'.
void AppendEscaped(const std::string& text, bool escape_quote,
                   std::string* out) {
  for (char c : text) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && escape_quote) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

void AppendHeader(const std::string& name, const std::string& help,
                  const char* type, std::string* out) {
  absl::StrAppend(out, "# HELP ", name, " ");
  AppendEscaped(help, /*escape_quote=*/false, out);
  absl::StrAppend(out, "\n# TYPE ", name, " ", type, "\n");
}

// Returns `a="x",b="y"` (no braces) for the given names and values.
std::string LabelPairs(const std::vector<std::string>& names,
                       const std::vector<std::string>& values) {
  std::string pairs;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) pairs.push_back(',');
    absl::StrAppend(&pairs, names[i], "=\"");
    AppendEscaped(values[i], /*escape_quote=*/true, &pairs);
    pairs.push_back('"');
  }
  return pairs;
}

// Appends `series{pairs} value` (no braces when `pairs` is empty).
void AppendSample(const std::string& series, const std::string& pairs,
                  double value, std::string* out) {
  out->append(series);
  if (!pairs.empty()) absl::StrAppend(out, "{", pairs, "}");
  absl::StrAppend(out, " ", FormatValue(value), "\n");
}

const char* TypeName(const Counter*) { return "counter"; }
const char* TypeName(const Gauge*) { return "gauge"; }
const char* TypeName(const Histogram*) { return "histogram"; }

void RenderMetric(const std::string& name, const std::string& pairs,
                  const Counter& counter, std::string* out) {
  AppendSample(name, pairs, counter.Value(), out);
}

void RenderMetric(const std::string& name, const std::string& pairs,
                  const Gauge& gauge, std::string* out) {
  AppendSample(name, pairs, gauge.Value(), out);
}

void RenderMetric(const std::string& name, const std::string& pairs,
                  const Histogram& histogram, std::string* out) {
  // Counts first, so _count always equals the +Inf bucket; the sum is read
  // a moment later and may include an observation the counts miss.
  const std::vector<uint64_t> counts = histogram.CumulativeCounts();
  const std::string bucket = name + "_bucket";
  const std::string prefix = pairs.empty() ? "" : pairs + ",";
  for (size_t i = 0; i < counts.size(); ++i) {
    const std::string le = i < histogram.upper_bounds().size()
                               ? FormatValue(histogram.upper_bounds()[i])
                               : "+Inf";
    AppendSample(bucket, absl::StrCat(prefix, "le=\"", le, "\""),
                 static_cast<double>(counts[i]), out);
  }
  AppendSample(name + "_sum", pairs, histogram.Sum(), out);
  AppendSample(name + "_count", pairs, static_cast<double>(counts.back()), out);
}

// A family whose samples a function computes at scrape time.
class CallbackCollector final : public Collector {
 public:
  CallbackCollector(std::string name, std::string help, const char* type,
                    std::vector<std::string> label_names,
                    std::function<std::vector<LabeledValue>()> fn)
      : name_(std::move(name)),
        help_(std::move(help)),
        type_(type),
        label_names_(std::move(label_names)),
        fn_(std::move(fn)) {}

  void Render(std::string* out) const override {
    std::vector<LabeledValue> samples = fn_();
    samples.erase(std::remove_if(samples.begin(), samples.end(),
                                 [&](const LabeledValue& s) {
                                   return s.label_values.size() !=
                                          label_names_.size();
                                 }),
                  samples.end());
    if (samples.empty()) return;
    // Sorted for stable output; Prometheus rejects a scrape that repeats a
    // series, so keep only the first sample of each label combination.
    auto by_labels = [](const LabeledValue& a, const LabeledValue& b) {
      return a.label_values < b.label_values;
    };
    std::stable_sort(samples.begin(), samples.end(), by_labels);
    AppendHeader(name_, help_, type_, out);
    const std::vector<std::string>* previous = nullptr;
    for (const LabeledValue& sample : samples) {
      if (previous != nullptr && *previous == sample.label_values) continue;
      AppendSample(name_, LabelPairs(label_names_, sample.label_values),
                   sample.value, out);
      previous = &sample.label_values;
    }
  }

 private:
  const std::string name_;
  const std::string help_;
  const char* const type_;
  const std::vector<std::string> label_names_;
  const std::function<std::vector<LabeledValue>()> fn_;
};

std::function<std::vector<LabeledValue>()> Unlabeled(
    std::function<double()> fn) {
  return [fn = std::move(fn)] {
    return std::vector<LabeledValue>{LabeledValue{{}, fn()}};
  };
}

}  // namespace

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == 0) return "0";  // -0 too
  if (value == std::floor(value) && std::fabs(value) <= kMaxExactInteger) {
    return absl::StrFormat("%.0f", value);
  }
  // The shortest %g text that parses back to the same double.
  char buffer[32];
  for (int precision = 1; precision < 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) return buffer;
  }
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

// --- Counter, Gauge, Histogram ---

void Counter::Increment(double delta) {
  if (!(delta >= 0)) return;  // negative or NaN
  if (delta == std::floor(delta) && delta <= kMaxExactInteger) {
    whole_.fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed);
  } else {
    AtomicAdd(&fraction_bits_, delta);
  }
}

double Counter::Value() const {
  return static_cast<double>(whole_.load(std::memory_order_relaxed)) +
         FromBits(fraction_bits_.load(std::memory_order_relaxed));
}

void Gauge::Set(double value) {
  bits_.store(ToBits(value), std::memory_order_relaxed);
}

void Gauge::Increment(double delta) { AtomicAdd(&bits_, delta); }

double Gauge::Value() const {
  return FromBits(bits_.load(std::memory_order_relaxed));
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      buckets_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    buckets_[i].store(0, std::memory_order_relaxed);
  }
}

void Histogram::Observe(double value) {
  // The first bound >= value: "le" buckets include their bound. NaN
  // compares false with every bound, so send it to +Inf explicitly.
  size_t bucket = upper_bounds_.size();
  if (!std::isnan(value)) {
    bucket =
        std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) -
        upper_bounds_.begin();
  }
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_bits_, value);
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> counts(upper_bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    counts[i] = total;
  }
  return counts;
}

uint64_t Histogram::Count() const { return CumulativeCounts().back(); }

double Histogram::Sum() const {
  return FromBits(sum_bits_.load(std::memory_order_relaxed));
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) return {};
  std::vector<double> bounds;
  for (double bound = start; count > 0 && std::isfinite(bound); --count) {
    bounds.push_back(bound);
    bound *= factor;
  }
  return bounds;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  if (!std::isfinite(start) || !(width > 0) || count < 1) return {};
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i) {
    const double bound = start + width * i;
    if (!std::isfinite(bound)) break;
    bounds.push_back(bound);
  }
  return bounds;
}

// --- Family ---

template <typename T>
Family<T>::Family(std::string name, std::string help,
                  std::vector<std::string> labels,
                  std::vector<double> upper_bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(labels)),
      upper_bounds_(std::move(upper_bounds)),
      scratch_(NewMetric()) {}

template <typename T>
std::unique_ptr<T> Family<T>::NewMetric() const {
  if constexpr (std::is_same_v<T, Histogram>) {
    return std::unique_ptr<T>(new T(upper_bounds_));
  } else {
    return std::unique_ptr<T>(new T());
  }
}

template <typename T>
T* Family<T>::WithLabels(const std::vector<std::string>& label_values) {
  if (label_values.size() != label_names_.size()) {
    if (!mismatch_logged_.exchange(true)) {
      std::fprintf(stderr,
                   "metrics: %s takes %zu label values, got %zu; updates go "
                   "to an unexported scratch metric (caller bug)\n",
                   name_.c_str(), label_names_.size(), label_values.size());
    }
    return scratch_.get();
  }
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = children_.find(label_values);
    if (it != children_.end()) return it->second.get();
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<T>& child = children_[label_values];
  if (child == nullptr) child = NewMetric();
  return child.get();
}

template <typename T>
void Family<T>::Render(std::string* out) const {
  // Map nodes are never erased, so the pointers outlive the lock.
  std::vector<std::pair<const std::vector<std::string>*, const T*>> children;
  {
    absl::ReaderMutexLock lock(&mu_);
    children.reserve(children_.size());
    for (const auto& [values, metric] : children_) {
      children.emplace_back(&values, metric.get());
    }
  }
  if (children.empty()) return;
  AppendHeader(name_, help_, TypeName(static_cast<const T*>(nullptr)), out);
  for (const auto& [values, metric] : children) {
    RenderMetric(name_, LabelPairs(label_names_, *values), *metric, out);
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// --- Registry ---

absl::StatusOr<Collector*> Registry::Add(
    const std::string& name, const std::string& type,
    const std::vector<std::string>& label_names,
    const std::function<std::unique_ptr<Collector>()>& make) {
  if (!IsValidName(name, /*allow_colon=*/true)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name \"", name,
                     "\" is invalid: it must match [a-zA-Z_:][a-zA-Z0-9_:]*"));
  }
  if (type == "counter" && !EndsWith(name, "_total")) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter name \"", name,
                     "\" must end in \"_total\" (e.g. \"", name, "_total\")"));
  }
  for (size_t i = 0; i < label_names.size(); ++i) {
    const std::string& label = label_names[i];
    if (!IsValidName(label, /*allow_colon=*/false)) {
      return absl::InvalidArgumentError(
          absl::StrCat("label name \"", label, "\" of metric \"", name,
                       "\" is invalid: it must match [a-zA-Z_][a-zA-Z0-9_]*"));
    }
    if (label.rfind("__", 0) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("label name \"", label, "\" of metric \"", name,
                       "\" is reserved: names starting with \"__\" are "
                       "Prometheus's own"));
    }
    if (type == "histogram" && label == "le") {
      return absl::InvalidArgumentError(
          absl::StrCat("label name \"le\" of histogram \"", name,
                       "\" is reserved for bucket bounds"));
    }
    if (std::find(label_names.begin(), label_names.begin() + i, label) !=
        label_names.begin() + i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label name \"", label, "\" of metric \"", name, "\" repeats"));
    }
  }
  std::vector<std::string> series = {name};
  if (type == "histogram") {
    series = {name + "_bucket", name + "_sum", name + "_count"};
  }

  absl::MutexLock lock(&mu_);
  if (collectors_.count(name) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("metric \"", name, "\" is already registered"));
  }
  for (const std::string& s : series) {
    auto it = series_names_.find(s);
    if (it != series_names_.end()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "series \"", s, "\" of metric \"", name,
          "\" is already exported by metric \"", it->second, "\""));
    }
  }
  for (const std::string& s : series) series_names_[s] = name;
  std::unique_ptr<Collector>& slot = collectors_[name];
  slot = make();
  return slot.get();
}

absl::StatusOr<CounterFamily*> Registry::AddCounter(
    const std::string& name, const std::string& help,
    const std::vector<std::string>& label_names) {
  absl::StatusOr<Collector*> added = Add(name, "counter", label_names, [&] {
    return std::unique_ptr<Collector>(
        new CounterFamily(name, help, label_names, {}));
  });
  if (!added.ok()) return added.status();
  return static_cast<CounterFamily*>(*added);
}

absl::StatusOr<Counter*> Registry::AddCounter(const std::string& name,
                                              const std::string& help) {
  absl::StatusOr<CounterFamily*> family = AddCounter(name, help, {});
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({});
}

absl::StatusOr<GaugeFamily*> Registry::AddGauge(
    const std::string& name, const std::string& help,
    const std::vector<std::string>& label_names) {
  absl::StatusOr<Collector*> added = Add(name, "gauge", label_names, [&] {
    return std::unique_ptr<Collector>(
        new GaugeFamily(name, help, label_names, {}));
  });
  if (!added.ok()) return added.status();
  return static_cast<GaugeFamily*>(*added);
}

absl::StatusOr<Gauge*> Registry::AddGauge(const std::string& name,
                                          const std::string& help) {
  absl::StatusOr<GaugeFamily*> family = AddGauge(name, help, {});
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({});
}

absl::StatusOr<HistogramFamily*> Registry::AddHistogram(
    const std::string& name, const std::string& help,
    const std::vector<std::string>& label_names,
    std::vector<double> upper_bounds) {
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram \"", name, "\": upper bound ", i, " is ",
          FormatValue(upper_bounds[i]),
          "; bounds must be finite (the +Inf bucket is always added)"));
    }
    if (i > 0 && !(upper_bounds[i] > upper_bounds[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram \"", name, "\": upper bound ", i, " (",
                       FormatValue(upper_bounds[i]), ") is not above bound ",
                       i - 1, " (", FormatValue(upper_bounds[i - 1]),
                       "); bounds must be strictly increasing"));
    }
  }
  absl::StatusOr<Collector*> added = Add(name, "histogram", label_names, [&] {
    return std::unique_ptr<Collector>(
        new HistogramFamily(name, help, label_names, std::move(upper_bounds)));
  });
  if (!added.ok()) return added.status();
  return static_cast<HistogramFamily*>(*added);
}

absl::StatusOr<Histogram*> Registry::AddHistogram(
    const std::string& name, const std::string& help,
    std::vector<double> upper_bounds) {
  absl::StatusOr<HistogramFamily*> family =
      AddHistogram(name, help, {}, std::move(upper_bounds));
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({});
}

absl::Status Registry::AddGaugeCallback(const std::string& name,
                                        const std::string& help,
                                        std::function<double()> fn) {
  return AddLabeledGaugeCallback(name, help, {}, Unlabeled(std::move(fn)));
}

absl::Status Registry::AddLabeledGaugeCallback(
    const std::string& name, const std::string& help,
    const std::vector<std::string>& label_names,
    std::function<std::vector<LabeledValue>()> fn) {
  return Add(name, "gauge", label_names,
             [&] {
               return std::unique_ptr<Collector>(new CallbackCollector(
                   name, help, "gauge", label_names, std::move(fn)));
             })
      .status();
}

absl::Status Registry::AddCounterCallback(const std::string& name,
                                          const std::string& help,
                                          std::function<double()> fn) {
  return AddLabeledCounterCallback(name, help, {}, Unlabeled(std::move(fn)));
}

absl::Status Registry::AddLabeledCounterCallback(
    const std::string& name, const std::string& help,
    const std::vector<std::string>& label_names,
    std::function<std::vector<LabeledValue>()> fn) {
  return Add(name, "counter", label_names,
             [&] {
               return std::unique_ptr<Collector>(new CallbackCollector(
                   name, help, "counter", label_names, std::move(fn)));
             })
      .status();
}

std::string Registry::Render() const {
  // Collectors are never removed, so the pointers outlive the lock; render
  // (and run callbacks) without it so a callback may take its own locks.
  std::vector<const Collector*> collectors;
  {
    absl::MutexLock lock(&mu_);
    collectors.reserve(collectors_.size());
    for (const auto& [name, collector] : collectors_) {
      collectors.push_back(collector.get());
    }
  }
  std::string out;
  for (const Collector* collector : collectors) collector->Render(&out);
  return out;
}

}  // namespace lookahead::metrics
