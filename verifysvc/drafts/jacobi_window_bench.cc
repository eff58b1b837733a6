// What the Jacobi window costs and earns on the real model (SmolLM2-135M
// Q4_1, native CPU pass, 2 matmul threads): the forward time of a verify
// pass (the root alone, and the root with a 16-node draft chain) without
// and with the window's W * (N - 1) rows, and
// a greedy decode of a chat prompt with the window in every pass and drafts
// from its n-grams (JacobiDecode) against plain decoding: identical tokens,
// EDL, how often column 0's guess of the next token held, how many harvested
// n-grams began with (first hits) or equalled (exact) the decoded tokens at
// the positions they guessed, tokens/s.
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

  // 1. Forward cost of one verify pass: the root alone or the root and a
  // 16-node draft chain (a typical trie step), then each + a window.
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
  engine::DraftTree chain16;
  for (int i = 0; i < 16; ++i) {
    chain16.tokens.push_back((*prompt)[i % prompt->size()]);
    chain16.parents.push_back(i - 1);
  }
  const engine::DraftTree* drafts[2] = {nullptr, &chain16};
  for (const engine::DraftTree* draft : drafts) {
    const int tree_rows = 1 + (draft == nullptr ? 0 : draft->size());
    std::vector<std::vector<double>> ms(configs.size());
    for (int r = 0; r < repeats + 1; ++r) {
      for (size_t c = 0; c < configs.size(); ++c) {
        engine::SequenceRows rows =
            *engine::RowsFromTree(engine::MakeVerifyInput(
                cache.get(), root,
                draft == nullptr ? engine::DraftTree() : *draft));
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
    std::printf(
        "\nverify pass of %d tree rows (prompt %zu tokens), median of %d:\n",
        tree_rows, prompt->size(), repeats);
    std::printf("%-8s %5s %9s %8s\n", "W,N", "rows", "ms", "x alone");
    const double base = Median(ms[0]);
    for (size_t c = 0; c < configs.size(); ++c) {
      const int rows =
          tree_rows + configs[c].first * std::max(0, configs[c].second - 1);
      std::printf("%d,%-6d %5d %9.2f %8.2f\n", configs[c].first,
                  configs[c].second, rows, Median(ms[c]), Median(ms[c]) / base);
    }
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
  std::printf("%-9s %6s %6s %5s %12s %11s %11s %6s %8s %7s\n", "W,N", "same",
              "steps", "EDL", "accepted", "col0 hits", "first hits", "exact",
              "tok/s", "x plain");
  // The last run, "fwd1": (4, 4) moving one position per step whatever was
  // accepted (shift_by_accepted = false, ALWAYS_FWD_ONE).
  for (size_t c = 1; c <= configs.size(); ++c) {
    const bool fixed = c == configs.size();
    const std::pair<int, int> wn = fixed ? configs[3] : configs[c];
    JacobiDecodeOptions o;
    o.window.window = wn.first;
    o.window.ngram = wn.second;
    o.window.max_ngrams = wn.first;
    o.window.shift_by_accepted = !fixed;
    o.max_new_tokens = kTokens;
    const absl::Time start = absl::Now();
    auto jacobi = JacobiDecode(model, *prompt, o);
    const double s = absl::ToDoubleSeconds(absl::Now() - start);
    if (!jacobi.ok()) {
      std::fprintf(stderr, "%s\n", jacobi.status().ToString().c_str());
      return 1;
    }
    char accepted[32], hits[32], first[32], exact[32];
    std::snprintf(first, sizeof(first), "%lld/%lld",
                  static_cast<long long>(jacobi->ngram_first_hits),
                  static_cast<long long>(jacobi->ngrams_checked));
    std::snprintf(exact, sizeof(exact), "%lld",
                  static_cast<long long>(jacobi->ngram_exact_hits));
    std::snprintf(accepted, sizeof(accepted), "%lld/%lld",
                  static_cast<long long>(jacobi->accepted_draft_tokens),
                  static_cast<long long>(jacobi->draft_tokens));
    std::snprintf(hits, sizeof(hits), "%lld/%lld",
                  static_cast<long long>(jacobi->first_token_hits),
                  static_cast<long long>(jacobi->harvest_steps));
    char label[16];
    std::snprintf(label, sizeof(label), "%d,%d%s", wn.first, wn.second,
                  fixed ? " fwd1" : "");
    std::printf("%-9s %6s %6d %5.2f %12s %11s %11s %6s %8.1f %7.2f\n", label,
                jacobi->tokens == plain->tokens ? "yes" : "NO",
                jacobi->steps + 1,
                double(jacobi->tokens.size()) / (jacobi->steps + 1), accepted,
                hits, first, exact, kTokens / s, plain_s / s);
  }
  return 0;
}

}  // namespace
}  // namespace lookahead::verifysvc

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 15;
  return lookahead::verifysvc::Run(std::max(1, repeats));
}
