// What the Jacobi window costs and earns on the real model (SmolLM2-135M
// Q4_1, native CPU pass, 2 matmul threads): the forward time of a verify
// pass of the root alone vs the root plus the window's W * (N - 1) rows, and
// a greedy decode of a chat prompt with the window in every pass and drafts
// from its n-grams (JacobiDecode) against plain decoding: identical tokens,
// EDL, how often column 0's guess of the next token held, tokens/s.
//
//   bazel run //verifysvc/drafts:jacobi_window_bench -- [repeats]
//
// Times are medians over `repeats` (default 15) rounds; each round runs
// every configuration once, interleaved, so a busy machine slows all alike.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "engine/model/batch.h"
#include "engine/model/llama_model.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/reference_decode.h"
#include "verifysvc/drafts/jacobi_decode.h"
#include "verifysvc/drafts/jacobi_window.h"

namespace lookahead::verifysvc {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Run(int repeats) {
  engine::ModelOptions model_options;
  model_options.matmul_threads = 2;
  auto real = engine::LoadRealModel(model_options);
  if (!real.ok()) {
    std::fprintf(stderr, "%s\n", real.status().ToString().c_str());
    return 1;
  }
  const engine::LlamaModel& model = *real->model;
  std::printf("model: %s\n", model.DescribeWeights().c_str());
  std::vector<engine::ChatMessage> chat = {
      {"user",
       "Explain how a hash map works and write a short Python example that "
       "counts the words in a sentence."}};
  auto prompt = real->tokenizer->EncodeChat(chat, true);
  if (!prompt.ok()) {
    std::fprintf(stderr, "%s\n", prompt.status().ToString().c_str());
    return 1;
  }
  const std::vector<std::pair<int, int>> configs = {
      {0, 0}, {2, 3}, {4, 3}, {4, 4}, {8, 4}};

  // 1. Forward cost of one verify pass: the root alone, then + window.
  auto cache = *model.NewCache();
  torch::Tensor last = *model.Prefill(cache.get(), *prompt);
  const int32_t root = static_cast<int32_t>(last.argmax().item<int64_t>());
  std::vector<std::unique_ptr<JacobiWindow>> windows;
  for (auto [w, n] : configs) {
    if (w == 0) {
      windows.push_back(nullptr);
      continue;
    }
    JacobiOptions o;
    o.window = w;
    o.ngram = n;
    o.max_ngrams = w;
    o.vocab_size = model.config().vocab_size;
    windows.push_back(*JacobiWindow::Create(o, *prompt));
  }
  std::vector<std::vector<double>> ms(configs.size());
  for (int r = 0; r < repeats + 1; ++r) {
    for (size_t c = 0; c < configs.size(); ++c) {
      engine::SequenceRows rows = *engine::RowsFromTree(
          engine::MakeVerifyInput(cache.get(), root, engine::DraftTree()));
      if (windows[c] != nullptr && !windows[c]->AppendRows(&rows).ok()) {
        return 1;
      }
      const absl::Time start = absl::Now();
      auto logits = model.ForwardRows(absl::MakeConstSpan(&rows, 1));
      const double elapsed = absl::ToDoubleMilliseconds(absl::Now() - start);
      if (!logits.ok()) {
        std::fprintf(stderr, "%s\n", logits.status().ToString().c_str());
        return 1;
      }
      cache->DiscardPending();
      if (r > 0) ms[c].push_back(elapsed);  // round 0 warms up
    }
  }
  std::printf("\nverify pass of the root (prompt %zu tokens), median of %d:\n",
              prompt->size(), repeats);
  std::printf("%-8s %5s %9s %7s\n", "W,N", "rows", "ms", "x root");
  const double base = Median(ms[0]);
  for (size_t c = 0; c < configs.size(); ++c) {
    const int rows = 1 + configs[c].first * std::max(0, configs[c].second - 1);
    std::printf("%d,%-6d %5d %9.2f %7.2f\n", configs[c].first,
                configs[c].second, rows, Median(ms[c]), Median(ms[c]) / base);
  }

  // 2. A greedy decode with the window and its n-grams vs plain decoding.
  constexpr int kTokens = 64;
  engine::GenerationOptions plain_options;
  plain_options.max_new_tokens = kTokens;
  const absl::Time plain_start = absl::Now();
  auto plain = engine::Generate(model, *prompt, plain_options, nullptr);
  const double plain_s = absl::ToDoubleSeconds(absl::Now() - plain_start);
  if (!plain.ok()) return 1;
  std::printf("\ngreedy decode of %d tokens; plain %.2f s (%.1f tok/s)\n",
              kTokens, plain_s, kTokens / plain_s);
  std::printf("%-6s %9s %6s %5s %12s %11s %8s %7s\n", "W,N", "identical",
              "steps", "EDL", "accepted", "col0 hits", "tok/s", "x plain");
  for (size_t c = 1; c < configs.size(); ++c) {
    JacobiDecodeOptions o;
    o.window.window = configs[c].first;
    o.window.ngram = configs[c].second;
    o.window.max_ngrams = configs[c].first;
    o.max_new_tokens = kTokens;
    const absl::Time start = absl::Now();
    auto jacobi = JacobiDecode(model, *prompt, o);
    const double s = absl::ToDoubleSeconds(absl::Now() - start);
    if (!jacobi.ok()) {
      std::fprintf(stderr, "%s\n", jacobi.status().ToString().c_str());
      return 1;
    }
    char accepted[32], hits[32];
    std::snprintf(accepted, sizeof(accepted), "%lld/%lld",
                  static_cast<long long>(jacobi->accepted_draft_tokens),
                  static_cast<long long>(jacobi->draft_tokens));
    std::snprintf(hits, sizeof(hits), "%lld/%lld",
                  static_cast<long long>(jacobi->first_token_hits),
                  static_cast<long long>(jacobi->harvest_steps));
    std::printf(
        "%d,%-4d %9s %6d %5.2f %12s %11s %8.1f %7.2f\n", configs[c].first,
        configs[c].second, jacobi->tokens == plain->tokens ? "yes" : "NO",
        jacobi->steps + 1, double(jacobi->tokens.size()) / (jacobi->steps + 1),
        accepted, hits, kTokens / s, plain_s / s);
  }
  return 0;
}

}  // namespace
}  // namespace lookahead::verifysvc

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 15;
  return lookahead::verifysvc::Run(std::max(1, repeats));
}
