// Tokenizer throughput on the real SmolLM2 vocabulary: encode (English
// prose and code), decode, and streaming detokenization.
//   bazel run -c opt //engine/bench:tokenizer_benchmark
// Needs the model (tools/setup.sh); LOOKAHEAD_MODEL_DIR overrides the
// default $HOME/.cache/lookahead/models.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/model_files.h"
#include "engine/text/text_stream.h"
#include "engine/text/tokenizer.h"

namespace lookahead::engine {
namespace {

constexpr char kProse[] =
    "The history of the lighthouse is closely tied to the history of "
    "seafaring. Long before electric lamps, coastal communities lit fires on "
    "hilltops to guide ships away from rocks and toward safe harbors. In 1822 "
    "Augustin Fresnel introduced a lens that could throw a beam more than "
    "twenty miles.\n\n";
constexpr char kCode[] =
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n"
    "    return fibonacci(n - 1) + fibonacci(n - 2)  # 0, 1, 1, 2, 3\n\n";

const Tokenizer* LoadOnce() {
  static const Tokenizer* tokenizer = [] {
    const std::string path = DefaultModelPath();
    auto file = GgufFile::Open(path);
    if (!file.ok()) {
      std::fprintf(stderr, "%s; run tools/setup.sh\n",
                   file.status().ToString().c_str());
      return static_cast<const Tokenizer*>(nullptr);
    }
    auto t = Tokenizer::FromGguf(**file);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      return static_cast<const Tokenizer*>(nullptr);
    }
    return static_cast<const Tokenizer*>(t->release());
  }();
  return tokenizer;
}

std::string Repeat(const char* s, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += s;
  return out;
}

void BM_Encode(benchmark::State& state, const char* unit) {
  const Tokenizer* t = LoadOnce();
  if (t == nullptr) {
    state.SkipWithError("model not found");
    return;
  }
  const std::string text = Repeat(unit, 64);
  size_t tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = t->Encode(text);
    tokens += ids.size();
    benchmark::DoNotOptimize(ids);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          text.size());
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens),
                                                  benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_Encode, prose, kProse);
BENCHMARK_CAPTURE(BM_Encode, code, kCode);

void BM_DecodeAndStream(benchmark::State& state) {
  const Tokenizer* t = LoadOnce();
  if (t == nullptr) {
    state.SkipWithError("model not found");
    return;
  }
  const std::vector<int32_t> ids = t->Encode(Repeat(kProse, 64));
  const bool stream = state.range(0) != 0;
  for (auto _ : state) {
    if (stream) {
      TextStream s(t);
      size_t bytes = 0;
      for (int32_t id : ids) bytes += s.Feed(id)->size();
      benchmark::DoNotOptimize(bytes);
    } else {
      benchmark::DoNotOptimize(t->Decode(ids));
    }
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * ids.size()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeAndStream)->Arg(0)->Arg(1);

}  // namespace
}  // namespace lookahead::engine
