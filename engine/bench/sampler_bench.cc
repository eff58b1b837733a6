// SampleToken's cost per call on a vocabulary of the real model's size: the
// sampler runs once per verified row (the root and every draft node), so
// at temperature > 0 it is paid per row like the forward pass.
//
//   bazel run -c opt //engine/bench:sampler_bench
//
// Logits are normal with a spread like the real model's (sd 3, a few
// peaked rows); "every token" is the plain Gumbel-max loop the sampler's
// shortcuts avoid (two logs per token), timed on the same rows.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "engine/model/sampler.h"
#include "kernels/counter_rng.h"

namespace lookahead::engine {
namespace {

constexpr int kVocab = 49152;
constexpr int kRows = 64;

// Where the timed calls' tokens go, so that they are not optimized away.
volatile int32_t g_sink = 0;

std::vector<std::vector<float>> Rows(float peak) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(kVocab));
  for (auto& row : rows) {
    for (float& v : row) v = normal(rng);
    row[rng() % kVocab] += peak;  // the model's favorite, by `peak`
  }
  return rows;
}

// Every token's noisy score, the reference the sampler must equal.
int32_t EveryToken(const std::vector<float>& logits, const SamplingParams& p,
                   int64_t position) {
  float max_logit = logits[0];
  for (float v : logits) max_logit = std::max(max_logit, v);
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  int32_t best = 0;
  double best_score = -INFINITY;
  for (int32_t i = 0; i < kVocab; ++i) {
    const double score =
        (static_cast<double>(logits[i]) - max_logit) * inv_t -
        std::log(-std::log(kernels::CounterUniform(p.seed, position, i)));
    if (score > best_score) {
      best_score = score;
      best = i;
    }
  }
  return best;
}

// The fastest of 7 rounds of 0.1 s (this machine is shared and noisy).
template <typename Fn>
double MicrosPerCall(Fn fn) {
  double best = 1e30;
  int64_t calls = 0;
  for (int round = 0; round < 7; ++round) {
    const int64_t first = calls;
    const auto start = std::chrono::steady_clock::now();
    std::chrono::duration<double> elapsed{};
    do {
      fn(calls++);
      elapsed = std::chrono::steady_clock::now() - start;
    } while (elapsed.count() < 0.1);
    best = std::min(best, elapsed.count() / double(calls - first) * 1e6);
  }
  return best;
}

int Main() {
  std::printf("SampleToken, vocabulary %d, 1 thread: us per call\n\n", kVocab);
  std::printf("%-28s %6s | %10s | %12s | %s\n", "params", "peak", "sampler",
              "every token", "same token");
  struct Case {
    const char* name;
    SamplingParams params;
  };
  const Case cases[] = {
      {"greedy", {0.0f, 0, 1.0f, 7}},
      {"temperature 0.7", {0.7f, 0, 1.0f, 7}},
      {"temperature 1.0", {1.0f, 0, 1.0f, 7}},
      {"temperature 1.5", {1.5f, 0, 1.0f, 7}},
      {"temperature 0.7, top_p 0.9", {0.7f, 0, 0.9f, 7}},
      {"temperature 0.7, top_k 40", {0.7f, 40, 1.0f, 7}},
      {"temperature 1.5, top_p 0.95", {1.5f, 0, 0.95f, 7}},
  };
  for (float peak : {0.0f, 12.0f}) {
    const std::vector<std::vector<float>> rows = Rows(peak);
    for (const Case& c : cases) {
      int32_t sink = 0;
      const double sampler = MicrosPerCall([&](int64_t i) {
        sink += SampleToken(rows[i % kRows], c.params, i);
      });
      bool same = true;
      double every = 0.0;
      if (!c.params.greedy() && c.params.top_k == 0 && c.params.top_p == 1.0f) {
        every = MicrosPerCall([&](int64_t i) {
          sink += EveryToken(rows[i % kRows], c.params, i);
        });
        for (int64_t i = 0; i < kRows; ++i) {
          same = same && SampleToken(rows[i], c.params, i) ==
                             EveryToken(rows[i], c.params, i);
        }
      }
      char every_text[16] = "";
      if (every > 0) std::snprintf(every_text, sizeof(every_text), "%.1f", every);
      std::printf("%-28s %6.0f | %10.1f | %12s | %s\n", c.name, peak, sampler,
                  every_text, every > 0 ? (same ? "yes" : "NO") : "");
      g_sink = sink;  // the calls' results are used
    }
  }
  return 0;
}

}  // namespace
}  // namespace lookahead::engine

int main() { return lookahead::engine::Main(); }
