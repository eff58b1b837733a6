// What each self-drafter form costs and earns on the real model
// (SmolLM2-135M-Instruct Q4_1): the assistant's cost per draft token (one
// one-token pass on 1 thread, as draftsvc runs it) relative to the
// verifier's one-token pass (the full model on 2 threads), and how well its
// 4-token greedy chains agree with the target's greedy decode of chat-like
// and code-like prompts: from every position of the target's 64-token
// output, the fraction of chain tokens equal to the target's token at that
// position, and the mean accepted length (matching prefix, 0..4).
//
// Then a greedy decode loop: the target verifies each step's assistant
// chain (budget 2 and 4) while a pre-draft worker drafts ahead, against
// plain decoding in the same round (outputs checked identical): EDL,
// tokens/s, speedup, pre-draft hit rate.
//
//   bazel build //draftsvc:assistant_bench &&
//     .bazel/bin/draftsvc/assistant_bench [forms] [repeats] [loop_threads]
//
// forms: comma-separated ParseAssistantLayers texts, each optionally with
// @int8 (the assistant's default activations) or @f32 (default below);
// repeats: rounds of the timing (default 5), reported as the median (each
// round times every form once, interleaved, so a busy machine slows all
// alike); loop_threads: the drafted loop's verifier threads (default 2; 1
// gives the assistant and the verifier one core each; plain decoding
// always has 2).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "draftsvc/sources/assistant/assistant_drafter.h"
#include "draftsvc/sources/assistant/assistant_model.h"
#include "engine/model/batch.h"
#include "engine/model/llama_model.h"
#include "engine/model/sampler.h"
#include "engine/testing/engine_test_util.h"

namespace lookahead::draftsvc {
namespace {

constexpr int kChain = 4;
constexpr int kNewTokens = 64;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median seconds of a one-token pass after `prompt` (the pass is discarded
// each time, so every one sees the same context).
double PassSeconds(const engine::LlamaModel& model,
                   const std::vector<int32_t>& prompt, int passes) {
  auto cache = *model.NewCache(static_cast<int>(prompt.size()) + 8);
  (void)*model.Prefill(cache.get(), prompt);
  std::vector<double> times;
  const int32_t token = prompt.back();
  for (int i = 0; i < passes; ++i) {
    engine::TreeInput in =
        engine::ChainInput(cache.get(), absl::MakeConstSpan(&token, 1));
    const absl::Time start = absl::Now();
    auto rows = model.Forward(absl::MakeConstSpan(&in, 1));
    times.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    if (!rows.ok()) std::abort();
    cache->DiscardPending();
  }
  return Median(times);
}

// The target's greedy decode of `n` tokens after `prompt`.
std::vector<int32_t> Decode(const engine::LlamaModel& model,
                            const std::vector<int32_t>& prompt, int n) {
  auto cache = *model.NewCache(static_cast<int>(prompt.size()) + n + 1);
  torch::Tensor logits = *model.Prefill(cache.get(), prompt);
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < n) {
    torch::Tensor row = logits.contiguous();
    out.push_back(engine::ArgMax(absl::Span<const float>(
        row.data_ptr<float>(), static_cast<size_t>(row.numel()))));
    logits = *model.Prefill(cache.get(), absl::MakeConstSpan(&out.back(), 1));
  }
  return out;
}

struct Agreement {
  int64_t chains = 0, tokens = 0, equal = 0, accepted = 0;
};

// Drafts a kChain chain from every position of `output` after `prompt`,
// advancing the session by the target's token each time (as a verifier
// that rejects nothing the target would not have produced).
Agreement Measure(const AssistantModel& assistant,
                  const std::vector<int32_t>& prompt,
                  const std::vector<int32_t>& output) {
  AssistantDrafterOptions options;
  options.predraft_threads = 0;
  options.max_chain_tokens = kChain;
  options.top2_levels = 0;
  auto drafter = *AssistantDrafter::Create(&assistant, options);
  if (!drafter->Open("bench", prompt, {}).ok()) std::abort();
  Agreement a;
  for (int i = 0; i + kChain <= static_cast<int>(output.size()); ++i) {
    auto draft = drafter->Draft("bench", kChain, absl::InfiniteFuture());
    if (!draft.ok() || draft->tree.size() != kChain) std::abort();
    ++a.chains;
    bool prefix = true;
    for (int k = 0; k < kChain; ++k) {
      const bool eq = draft->tree.tokens[k] == output[i + k];
      a.tokens += 1;
      a.equal += eq;
      prefix = prefix && eq;
      a.accepted += prefix;
    }
    if (!drafter->Advance("bench", {output[i]}).ok()) std::abort();
  }
  return a;
}

struct LoopResult {
  double seconds = 0;
  int tokens = 0, steps = 0;
  AssistantDrafterStats stats;
};

// Greedy decoding of `n` tokens by `target`, each step verifying the
// assistant's draft of `budget` nodes (none when `assistant` is null: plain
// decoding) drafted within `deadline` of the step's start, with pre-draft
// workers running beside the verifier.
LoopResult Loop(const engine::LlamaModel& target,
                const AssistantModel* assistant,
                const std::vector<int32_t>& prompt, int n, int budget,
                absl::Duration deadline, int predraft_threads,
                std::vector<int32_t>* out) {
  LoopResult r;
  std::unique_ptr<AssistantDrafter> drafter;
  auto cache = *target.NewCache(static_cast<int>(prompt.size()) + n + 64);
  const absl::Time start = absl::Now();
  torch::Tensor logits = *target.Prefill(cache.get(), prompt);
  torch::Tensor row = logits.contiguous();
  int32_t root = engine::ArgMax(absl::Span<const float>(
      row.data_ptr<float>(), static_cast<size_t>(row.numel())));
  out->assign(1, root);
  if (assistant != nullptr) {
    AssistantDrafterOptions options;
    options.predraft_threads = predraft_threads;
    options.max_chain_tokens = budget;
    options.top2_levels = 0;
    drafter = *AssistantDrafter::Create(assistant, options);
    std::vector<int32_t> context = prompt;
    context.push_back(root);
    if (!drafter->Open("loop", context, {}).ok()) std::abort();
  }
  while (static_cast<int>(out->size()) < n) {
    engine::DraftTree tree;
    if (drafter != nullptr) {
      auto draft = drafter->Draft("loop", budget, absl::Now() + deadline);
      if (!draft.ok()) std::abort();
      tree = draft->tree;
    }
    auto emitted = target.VerifyAndAccept(cache.get(), root, tree, {});
    if (!emitted.ok()) std::abort();
    ++r.steps;
    out->insert(out->end(), emitted->begin(), emitted->end());
    root = emitted->back();
    if (drafter != nullptr && !drafter->Advance("loop", *emitted).ok()) {
      std::abort();
    }
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r.tokens = static_cast<int>(out->size());
  if (drafter != nullptr) r.stats = drafter->stats();
  return r;
}

int Run(const std::vector<std::string>& forms, int repeats, int loop_threads) {
  engine::ModelOptions target_options;
  target_options.matmul_threads = 2;
  auto real = engine::LoadRealModel(target_options);
  if (!real.ok()) {
    std::fprintf(stderr, "%s\n", real.status().ToString().c_str());
    return 1;
  }
  const engine::LlamaModel& target = *real->model;
  std::printf("target: %s, 2 threads\n", target.DescribeWeights().c_str());
  const std::vector<std::pair<const char*, std::string>> prompts = {
      {"chat", "What are the main causes of inflation? Explain briefly."},
      {"chat", "Give me three tips for sleeping better at night."},
      {"chat", "Write a short note thanking a colleague for their help."},
      {"code",
       "Write a Python function that checks whether a string is a "
       "palindrome."},
      {"code", "Write a C function that reverses a singly linked list."},
      {"code",
       "Write a Python class for a stack with push, pop and peek methods."},
  };
  std::vector<std::vector<int32_t>> inputs, outputs;
  for (const auto& [kind, text] : prompts) {
    auto ids = real->tokenizer->EncodeChat({{"user", text}}, true);
    if (!ids.ok()) {
      std::fprintf(stderr, "%s\n", ids.status().ToString().c_str());
      return 1;
    }
    inputs.push_back(*ids);
    outputs.push_back(Decode(target, *ids, kNewTokens));
  }

  std::vector<std::unique_ptr<AssistantModel>> assistants;
  for (const std::string& form : forms) {
    // FORM[@ACTIVATIONS]: a ParseAssistantLayers text, then optionally
    // @int8 (the default) or @f32.
    const std::vector<std::string> parts = absl::StrSplit(form, '@');
    AssistantOptions options;
    options.layers = parts[0];
    if (parts.size() > 1) {
      auto activations = engine::ParseLinearActivations(parts[1]);
      if (!activations.ok()) {
        std::fprintf(stderr, "%s\n", activations.status().ToString().c_str());
        return 1;
      }
      options.model.activations = *activations;
    }
    auto assistant =
        AssistantModel::Load(engine::RealModelPath(), 49152, options);
    if (!assistant.ok()) {
      std::fprintf(stderr, "%s\n", assistant.status().ToString().c_str());
      return 1;
    }
    assistants.push_back(*std::move(assistant));
  }

  // Costs: interleaved rounds, medians.
  std::vector<std::vector<double>> cost(forms.size());
  std::vector<double> verifier;
  for (int r = 0; r < repeats; ++r) {
    verifier.push_back(PassSeconds(target, inputs[0], 30));
    for (size_t f = 0; f < forms.size(); ++f) {
      cost[f].push_back(PassSeconds(assistants[f]->model(), inputs[0], 30));
    }
  }
  const double verify_s = Median(verifier);
  std::printf("verifier one-token pass: %.2f ms (median of %d rounds)\n\n",
              verify_s * 1e3, repeats);
  std::printf("%-16s %6s %9s %8s | %-26s | %-26s | %11s\n", "form", "layers",
              "ms/token", "x verify", "chat: token-eq  acc-len/4",
              "code: token-eq  "
              "acc-len/4",
              "acc tok/s");
  for (size_t f = 0; f < forms.size(); ++f) {
    Agreement kinds[2];
    for (size_t p = 0; p < prompts.size(); ++p) {
      Agreement a = Measure(*assistants[f], inputs[p], outputs[p]);
      Agreement& k = kinds[std::string(prompts[p].first) == "code"];
      k.chains += a.chains;
      k.tokens += a.tokens;
      k.equal += a.equal;
      k.accepted += a.accepted;
    }
    const double s = Median(cost[f]);
    const double all_acc = double(kinds[0].accepted + kinds[1].accepted) /
                           double(kinds[0].chains + kinds[1].chains);
    std::printf(
        "%-16s %6d %9.2f %8.2f | %13.3f %12.2f | %13.3f %12.2f | %11.1f\n",
        forms[f].c_str(), assistants[f]->config().block_count, s * 1e3,
        s / verify_s, double(kinds[0].equal) / kinds[0].tokens,
        double(kinds[0].accepted) / kinds[0].chains,
        double(kinds[1].equal) / kinds[1].tokens,
        double(kinds[1].accepted) / kinds[1].chains, all_acc / (kChain * s));
    std::fflush(stdout);
  }

  // The verifier of the drafted loop: the target on loop_threads (1: the
  // assistant and the verifier one core each) against plain decoding on 2.
  std::unique_ptr<engine::GgufFile> loop_file;
  std::unique_ptr<engine::LlamaModel> loop_model;
  if (loop_threads != 2) {
    loop_file = *engine::OpenRealModel();
    engine::ModelOptions options;
    options.matmul_threads = loop_threads;
    loop_model = *engine::LlamaModel::Load(*loop_file, options);
  }
  const engine::LlamaModel& verifier_model =
      loop_model != nullptr ? *loop_model : target;
  // In the loop: the verifier checks each step's assistant
  // chain; pre-drafting runs beside it. Tokens/s against plain decoding in
  // the same round, medians over rounds.
  std::printf(
      "\ndecode loop, %d tokens, prompts 0 and 3, verifier %d thread(s), "
      "assistant 1 thread + 1 pre-draft worker, deadline 10 ms; plain "
      "decoding on 2 threads\n",
      kNewTokens, loop_threads);
  std::printf("%-16s %6s %6s %8s %8s %9s %9s\n", "form", "budget", "EDL",
              "tok/s", "plain", "speedup", "hit-rate");
  for (size_t f = 0; f < forms.size(); ++f) {
    for (int budget : {2, 4}) {
      std::vector<double> ratio, tps, plain_tps, edl, hits;
      for (int r = 0; r < std::max(1, repeats / 2); ++r) {
        for (int p : {0, 3}) {
          std::vector<int32_t> a, b;
          LoopResult plain = Loop(target, nullptr, inputs[p], kNewTokens,
                                  budget, absl::Milliseconds(10), 1, &a);
          LoopResult drafted =
              Loop(verifier_model, assistants[f].get(), inputs[p], kNewTokens,
                   budget, absl::Milliseconds(10), 1, &b);
          // The last step may emit past n.
          a.resize(kNewTokens);
          b.resize(kNewTokens);
          if (a != b) {
            std::fprintf(stderr, "outputs differ!\n");
            return 1;
          }
          tps.push_back(drafted.tokens / drafted.seconds);
          plain_tps.push_back(plain.tokens / plain.seconds);
          ratio.push_back(tps.back() / plain_tps.back());
          edl.push_back(double(drafted.tokens) / drafted.steps);
          const auto& st = drafted.stats;
          hits.push_back(
              double(st.predraft_hits) /
              std::max<int64_t>(1, st.predraft_hits + st.predraft_misses));
        }
      }
      std::printf("%-16s %6d %6.2f %8.1f %8.1f %9.2f %9.2f\n", forms[f].c_str(),
                  budget, Median(edl), Median(tps), Median(plain_tps),
                  Median(ratio), Median(hits));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace lookahead::draftsvc

int main(int argc, char** argv) {
  std::string forms = "all@f32,all@int8,skip:22-23@int8,first:20@int8";
  if (argc > 1) forms = argv[1];
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const int loop_threads = argc > 3 ? std::atoi(argv[3]) : 2;
  return lookahead::draftsvc::Run(absl::StrSplit(forms, ','),
                                  std::max(1, repeats),
                                  std::max(1, loop_threads));
}
