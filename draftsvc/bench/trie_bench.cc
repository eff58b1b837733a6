// trie_bench: draftsvc speed and size figures on a synthetic corpus.
//
//   * retrieval latency p50/p99 (us) at ~1M and ~10M global-trie nodes for
//     decoding length 16/32/64 (DraftIndex::Retrieve, hierarchical mode);
//   * insert throughput (accepted tokens/s) through DraftIndex + TrieStore,
//     periodic-sync and --sync modes, measured until Flush() returns;
//   * restart rebuild time (TrieStore::Open + full scan into a new index)
//     and bytes per node in memory and on disk.
//
// Corpus: vocab 49152; a pool of "phrases" whose tokens follow a Zipf law,
// concatenated in Zipf-chosen order with random noise tokens between them,
// so windows repeat (retrieval finds matches) while new nodes keep coming.
//
//   bazel run -c opt //draftsvc:trie_bench -- [--sizes=1000000,10000000]
//       [--benchmark_min_time=0.5]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "draftsvc/index/draft_index.h"
#include "draftsvc/storage/trie_store.h"

ABSL_FLAG(std::string, sizes, "1000000,10000000",
          "Global-trie node counts to build for the retrieval benchmarks.");
ABSL_FLAG(int, branch_length, 8, "Window length - 1 (the paper's default).");
ABSL_FLAG(int64_t, insert_tokens, 200000,
          "Accepted tokens inserted through DraftIndex + TrieStore.");
ABSL_FLAG(int64_t, rebuild_max_nodes, 10000000,
          "Also time the restart rebuild of stores up to this many nodes.");
ABSL_FLAG(std::string, dir, "",
          "Scratch directory for RocksDB (default: $TMPDIR or /tmp).");

namespace lookahead::draftsvc {
namespace {

constexpr int32_t kVocab = 49152;
constexpr char kNs[] = "bench";

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Samples from a Zipf(s) law over [0, n) by inverting a precomputed CDF.
class ZipfSampler {
 public:
  ZipfSampler(int n, double s) : cdf_(n) {
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      sum += 1.0 / std::pow(i + 1, s);
      cdf_[i] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }
  int operator()(std::mt19937_64& rng) const {
    double u = std::uniform_real_distribution<>(0, 1)(rng);
    return static_cast<int>(std::lower_bound(cdf_.begin(), cdf_.end(), u) -
                            cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

// Endless token stream with repeats (see the file comment).
class Corpus {
 public:
  explicit Corpus(uint64_t seed, int phrases = 400000)
      : rng_(seed), tokens_(kVocab, 1.05), phrase_pick_(phrases, 0.9) {
    // A random permutation so frequent tokens are not all small ids.
    std::vector<int32_t> perm(kVocab);
    for (int i = 0; i < kVocab; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng_);
    perm_ = std::move(perm);
    phrases_.resize(phrases);
    for (auto& p : phrases_) {
      p.resize(4 + rng_() % 21);
      for (auto& t : p) t = perm_[tokens_(rng_)];
    }
  }
  // Appends `n` tokens to `out`.
  void Next(size_t n, std::vector<int32_t>* out) {
    const size_t target = out->size() + n;
    while (out->size() < target) {
      if (rng_() % 5 == 0) {
        const int noise = 1 + rng_() % 3;
        for (int i = 0; i < noise && out->size() < target; ++i) {
          out->push_back(perm_[tokens_(rng_)]);
        }
      } else {
        const auto& p = phrases_[phrase_pick_(rng_)];
        for (size_t i = 0; i < p.size() && out->size() < target; ++i) {
          out->push_back(p[i]);
        }
      }
    }
  }

 private:
  std::mt19937_64 rng_;
  ZipfSampler tokens_;
  ZipfSampler phrase_pick_;
  std::vector<int32_t> perm_;
  std::vector<std::vector<int32_t>> phrases_;
};

IndexOptions BenchIndexOptions() {
  IndexOptions o;
  o.default_branch_length = absl::GetFlag(FLAGS_branch_length);
  o.capacity_nodes = int64_t{1} << 40;  // No pruning while building.
  o.max_step_tokens = 1 << 16;
  o.max_prompt_tokens = 1 << 16;
  return o;
}

// An index grown (without a store) until its global trie holds `nodes`.
struct BuiltIndex {
  int64_t target_nodes = 0;
  std::unique_ptr<DraftIndex> index;
  int64_t tokens = 0;
  double build_seconds = 0;
  std::vector<std::string> query_sessions;
};

std::unique_ptr<BuiltIndex> BuildIndex(int64_t nodes) {
  auto built = std::make_unique<BuiltIndex>();
  built->target_nodes = nodes;
  built->index = std::make_unique<DraftIndex>(BenchIndexOptions(), nullptr);
  DraftIndex& index = *built->index;
  Corpus corpus(1);
  std::vector<int32_t> chunk;
  const auto start = Clock::now();
  int session = 0;
  auto node_count = [&] {
    return index.Stats(kNs).empty() ? 0 : index.Stats(kNs)[0].output_nodes;
  };
  while (session == 0 || node_count() < nodes) {
    // One "request": a short prompt, then 8 Steps of 64 accepted tokens.
    const std::string id = absl::StrCat("build", session++);
    chunk.clear();
    corpus.Next(16, &chunk);
    if (!index.OpenSession(id, kNs, kVocab, chunk, 0).ok()) std::abort();
    for (int step = 0; step < 8; ++step) {
      chunk.clear();
      corpus.Next(64, &chunk);
      if (!index.Append(id, chunk, nullptr).ok()) std::abort();
      built->tokens += 64;
    }
    if (!index.CloseSession(id).ok()) std::abort();
  }
  built->build_seconds = SecondsSince(start);
  // Queries: sessions whose prompts are fresh text from the same source.
  Corpus queries(2);
  for (int q = 0; q < 512; ++q) {
    chunk.clear();
    queries.Next(32, &chunk);
    const std::string id = absl::StrCat("query", q);
    if (!index.OpenSession(id, kNs, kVocab, chunk, 0).ok()) std::abort();
    built->query_sessions.push_back(id);
  }
  return built;
}

struct LatencyResult {
  std::string name;
  double p50_us = 0, p99_us = 0, mean_nodes = 0;
};

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(q * (v.size() - 1));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

void RetrieveBenchmark(benchmark::State& state, BuiltIndex* built,
                       int32_t decoding_length, LatencyResult* result) {
  std::vector<double> latencies;
  latencies.reserve(1 << 20);
  int64_t nodes = 0;
  size_t q = 0;
  for (auto _ : state) {
    const std::string& id =
        built->query_sessions[q++ % built->query_sessions.size()];
    const auto start = Clock::now();
    absl::StatusOr<MixedDraft> tree = built->index->Retrieve(
        id, decoding_length, 0, DraftMode::kHierarchical);
    latencies.push_back(SecondsSince(start) * 1e6);
    if (!tree.ok()) {
      state.SkipWithError(std::string(tree.status().message()).c_str());
      break;
    }
    nodes += static_cast<int64_t>(tree->nodes.size());
    benchmark::DoNotOptimize(tree);
  }
  const double mean_nodes =
      latencies.empty() ? 0 : static_cast<double>(nodes) / latencies.size();
  result->p50_us = Percentile(latencies, 0.50);
  result->p99_us = Percentile(latencies, 0.99);
  result->mean_nodes = mean_nodes;
  state.counters["p50_us"] = result->p50_us;
  state.counters["p99_us"] = result->p99_us;
  state.counters["draft_nodes"] = mean_nodes;
}

std::string ScratchDir(const std::string& name) {
  std::string base = absl::GetFlag(FLAGS_dir);
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base = tmp != nullptr ? tmp : "/tmp";
  }
  std::string dir = absl::StrCat(base, "/trie_bench_", getpid(), "_", name);
  std::filesystem::remove_all(dir);
  return dir;
}

struct InsertResult {
  std::string name;
  double tokens_per_second = 0;
  double disk_bytes_per_node = 0;
};

// Accepted tokens through DraftIndex + TrieStore (32 sessions taking turns,
// 16-token Steps), timed until the store's Flush() returns.
void InsertBenchmark(benchmark::State& state, bool sync, InsertResult* result) {
  for (auto _ : state) {
    const std::string dir = ScratchDir(sync ? "insert_sync" : "insert");
    TrieStoreOptions store_options;
    store_options.sync = sync;
    auto store = TrieStore::Open(dir, store_options);
    if (!store.ok()) {
      state.SkipWithError(store.status().ToString().c_str());
      break;
    }
    DraftIndex index(BenchIndexOptions(), store->get());
    Corpus corpus(3);
    std::vector<int32_t> chunk;
    constexpr int kSessions = 32;
    for (int s = 0; s < kSessions; ++s) {
      chunk.clear();
      corpus.Next(16, &chunk);
      if (!index.OpenSession(absl::StrCat("s", s), kNs, kVocab, chunk, 0)
               .ok()) {
        std::abort();
      }
    }
    const int64_t total = absl::GetFlag(FLAGS_insert_tokens);
    const auto start = Clock::now();
    for (int64_t done = 0, s = 0; done < total; done += 16, ++s) {
      chunk.clear();
      corpus.Next(16, &chunk);
      if (!index.Append(absl::StrCat("s", s % kSessions), chunk, nullptr)
               .ok()) {
        std::abort();
      }
    }
    absl::Status flushed = (*store)->Flush();
    const double seconds = SecondsSince(start);
    if (!flushed.ok()) state.SkipWithError(flushed.ToString().c_str());
    state.SetIterationTime(seconds);
    result->tokens_per_second = static_cast<double>(total) / seconds;
    const int64_t nodes = index.Stats(kNs)[0].output_nodes;
    result->disk_bytes_per_node = static_cast<double>((*store)->DiskBytes()) /
                                  std::max<int64_t>(nodes, 1);
    state.counters["tokens_per_s"] = result->tokens_per_second;
    state.counters["nodes"] = static_cast<double>(nodes);
    store->reset();
    std::filesystem::remove_all(dir);
  }
}

struct RebuildResult {
  std::string name;
  int64_t nodes = 0;
  double write_seconds = 0;
  double scan_seconds = 0;  // Open + scan alone, no index (second open).
  double rebuild_seconds = 0;
  double memory_bytes_per_node = 0;
  double disk_bytes_per_node = 0;
};

// Counts what a scan delivers.
class CountingVisitor : public TrieScanVisitor {
 public:
  absl::Status OnNamespace(absl::string_view, int32_t) override {
    return absl::OkStatus();
  }
  absl::Status OnNode(absl::string_view, absl::Span<const int32_t>,
                      int64_t) override {
    ++nodes;
    return absl::OkStatus();
  }
  int64_t nodes = 0;
};

// Feeds a scan into a fresh index (what DraftServer::Open does).
class Restorer : public TrieScanVisitor {
 public:
  explicit Restorer(DraftIndex& index) : index_(index) {}
  absl::Status OnNamespace(absl::string_view ns, int32_t vocab) override {
    return index_.RestoreNamespace(ns, vocab);
  }
  absl::Status OnNode(absl::string_view ns, absl::Span<const int32_t> path,
                      int64_t count) override {
    return index_.RestoreNode(ns, path, count);
  }

 private:
  DraftIndex& index_;
};

// Persists `built`'s global trie, closes the store, then times a restart:
// TrieStore::Open + full scan into a new DraftIndex.
void RebuildBenchmark(benchmark::State& state, BuiltIndex* built,
                      RebuildResult* result) {
  for (auto _ : state) {
    const std::string dir = ScratchDir("rebuild");
    {
      auto store = TrieStore::Open(dir, TrieStoreOptions());
      if (!store.ok()) {
        state.SkipWithError(store.status().ToString().c_str());
        break;
      }
      const auto start = Clock::now();
      TrieMutationBatch batch;
      auto submit = [&] {
        batch.name_space = kNs;
        batch.vocab_size = kVocab;
        (*store)->Submit(std::move(batch), [](absl::Status s) {
          if (!s.ok()) std::abort();
        });
        batch = TrieMutationBatch();
      };
      absl::Status s = built->index->ForEachNode(
          kNs, [&](absl::Span<const int32_t> path, int64_t count) {
            batch.mutations.push_back(
                {TrieMutation::Kind::kSetCount,
                 std::vector<int32_t>(path.begin(), path.end()), count});
            if (batch.mutations.size() == 8192) submit();
          });
      if (!s.ok()) std::abort();
      submit();
      if (!(*store)->Flush().ok()) std::abort();
      result->write_seconds = SecondsSince(start);
      if (!(*store)->Close().ok()) std::abort();
    }
    const auto start = Clock::now();
    auto store = TrieStore::Open(dir, TrieStoreOptions());
    if (!store.ok()) std::abort();
    DraftIndex rebuilt(BenchIndexOptions(), store->get());
    Restorer restorer(rebuilt);
    if (!(*store)->Scan(restorer).ok()) std::abort();
    result->rebuild_seconds = SecondsSince(start);
    state.SetIterationTime(result->rebuild_seconds);
    const NamespaceStats stats = rebuilt.Stats(kNs)[0];
    result->nodes = stats.output_nodes;
    result->memory_bytes_per_node = rebuilt.BytesPerNode();
    result->disk_bytes_per_node =
        static_cast<double>((*store)->DiskBytes()) / result->nodes;
    state.counters["nodes"] = static_cast<double>(result->nodes);
    state.counters["rebuild_s"] = result->rebuild_seconds;
    state.counters["mem_bytes_per_node"] = result->memory_bytes_per_node;
    state.counters["disk_bytes_per_node"] = result->disk_bytes_per_node;
    store->reset();
    {
      const auto scan_start = Clock::now();
      auto scanned = TrieStore::Open(dir, TrieStoreOptions());
      CountingVisitor counter;
      if (!scanned.ok() || !(*scanned)->Scan(counter).ok()) std::abort();
      result->scan_seconds = SecondsSince(scan_start);
    }
    std::filesystem::remove_all(dir);
  }
}

std::string SizeName(int64_t n) {
  if (n % 1000000 == 0) return absl::StrCat(n / 1000000, "M");
  if (n % 1000 == 0) return absl::StrCat(n / 1000, "K");
  return absl::StrCat(n);
}

int Main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  absl::ParseCommandLine(argc, argv);

  std::vector<std::unique_ptr<BuiltIndex>> indices;
  for (absl::string_view size :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    int64_t nodes = 0;
    if (!absl::SimpleAtoi(size, &nodes) || nodes <= 0) {
      std::fprintf(stderr, "bad --sizes entry \"%s\"\n",
                   std::string(size).c_str());
      return 2;
    }
    indices.push_back(BuildIndex(nodes));
    const BuiltIndex& b = *indices.back();
    std::printf(
        "built %s-node index: %lld nodes from %lld tokens in %.2f s "
        "(%.0f tokens/s in memory), %.1f bytes/node in memory\n",
        SizeName(nodes).c_str(),
        static_cast<long long>(b.index->Stats(kNs)[0].output_nodes),
        static_cast<long long>(b.tokens), b.build_seconds,
        b.tokens / b.build_seconds, b.index->BytesPerNode());
  }

  std::vector<std::unique_ptr<LatencyResult>> latencies;
  for (auto& built : indices) {
    for (int32_t length : {16, 32, 64}) {
      latencies.push_back(std::make_unique<LatencyResult>());
      LatencyResult* r = latencies.back().get();
      r->name = absl::StrCat("Retrieve/nodes:", SizeName(built->target_nodes),
                             "/decoding_length:", length);
      benchmark::RegisterBenchmark(r->name.c_str(), RetrieveBenchmark,
                                   built.get(), length, r)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  std::vector<std::unique_ptr<InsertResult>> inserts;
  for (bool sync : {false, true}) {
    inserts.push_back(std::make_unique<InsertResult>());
    InsertResult* r = inserts.back().get();
    r->name = sync ? "Insert/index+store/sync" : "Insert/index+store/periodic";
    benchmark::RegisterBenchmark(r->name.c_str(), InsertBenchmark, sync, r)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  std::vector<std::unique_ptr<RebuildResult>> rebuilds;
  for (auto& built : indices) {
    if (built->target_nodes > absl::GetFlag(FLAGS_rebuild_max_nodes)) continue;
    rebuilds.push_back(std::make_unique<RebuildResult>());
    RebuildResult* r = rebuilds.back().get();
    r->name = absl::StrCat("Rebuild/nodes:", SizeName(built->target_nodes));
    benchmark::RegisterBenchmark(r->name.c_str(), RebuildBenchmark, built.get(),
                                 r)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();

  std::printf("\n%-44s %10s %10s %12s\n", "retrieval", "p50 (us)", "p99 (us)",
              "draft nodes");
  for (const auto& r : latencies) {
    std::printf("%-44s %10.1f %10.1f %12.1f\n", r->name.c_str(), r->p50_us,
                r->p99_us, r->mean_nodes);
  }
  std::printf("\n%-44s %12s %14s\n", "insert", "tokens/s", "disk B/node");
  for (const auto& r : inserts) {
    std::printf("%-44s %12.0f %14.1f\n", r->name.c_str(), r->tokens_per_second,
                r->disk_bytes_per_node);
  }
  std::printf("\n%-20s %10s %10s %9s %12s %11s %12s\n", "restart", "nodes",
              "write (s)", "scan (s)", "rebuild (s)", "mem B/node",
              "disk B/node");
  for (const auto& r : rebuilds) {
    std::printf("%-20s %10lld %10.2f %9.2f %12.2f %11.1f %12.1f\n",
                r->name.c_str(), static_cast<long long>(r->nodes),
                r->write_seconds, r->scan_seconds, r->rebuild_seconds,
                r->memory_bytes_per_node, r->disk_bytes_per_node);
  }
  return 0;
}

}  // namespace
}  // namespace lookahead::draftsvc

int main(int argc, char** argv) {
  return lookahead::draftsvc::Main(argc, argv);
}
