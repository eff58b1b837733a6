// engine_bench: latency of the verifier's forward pass on the real model.
//
// Prints (1) plain decoding ms/token at batch 1 for a few thread settings,
// (2) tree-verify forward latency for 1..128 tree tokens at several context
// lengths (the "critical decoding length" curve: how many draft tokens one
// pass verifies for about the cost of one), (3) batched forward latency.
// Run: bazel run -c opt //engine/bench:engine_bench -- [--reps=5]
// On a GPU (the CUDA build, tools/gpu_check.sh): --device=cuda
// --dtype=bfloat16 [--cuda_kernels=false] --thread_sweep= --contexts=256,2048
// --tree_sizes=1,2,4,...,256.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/model/device_options.h"
#include "engine/model/llama_model.h"
#include "engine/model/threading.h"
#include "engine/testing/engine_test_util.h"

ABSL_FLAG(std::string, model, "", "GGUF path (default: the embedded model)");
ABSL_FLAG(int, reps, 5, "timed repetitions per point (median reported)");
ABSL_FLAG(std::string, contexts, "64,256,1024", "context lengths");
ABSL_FLAG(std::string, tree_sizes, "1,2,4,8,16,32,64,128", "tree sizes");
ABSL_FLAG(std::string, thread_sweep, "1x1,1x2,2x1,2x2",
          "intra_op x blas thread settings for the decode sweep");
ABSL_FLAG(int, decode_tokens, 48, "tokens per plain-decode measurement");
ABSL_FLAG(std::string, decode_contexts, "64",
          "context lengths the plain-decode measurement starts from "
          "(llama-bench's -d)");
ABSL_FLAG(int, prefill_tokens, 0,
          "if > 0: also time a prefill of this many tokens into an empty "
          "cache (llama-bench's -p), per thread setting");
ABSL_FLAG(int, intra_op, 1, "intra-op threads for the curve");
ABSL_FLAG(int, matmul_threads, 0, "packed matmul threads (0: every core)");
ABSL_FLAG(bool, pin_threads, true, "pin the matmul pool's workers");
ABSL_FLAG(bool, packed_linear, true, "packed matmul kernel (false: OpenBLAS)");
ABSL_FLAG(int, blas, lookahead::engine::DefaultBlasThreads(),
          "OpenBLAS threads for the curve");
ABSL_FLAG(std::string, weights, "native",
          "native or f32 (ModelOptions::weights)");
ABSL_FLAG(std::string, activations, "f32",
          "f32 or int8 (ModelOptions::activations, native weights only)");
ABSL_FLAG(bool, kv_f16, false,
          "float16 KV cache (ModelOptions::kv_f16, native weights only)");
ABSL_FLAG(int64_t, head_tokens, 0,
          "LM head over ids below this only (ModelOptions::head_tokens, "
          "native weights only; an assistant's form); 0: every id");
ABSL_FLAG(std::string, device, "cpu", "cpu, cuda or cuda:N");
ABSL_FLAG(std::string, dtype, "float32", "float32, bfloat16 or float16");
ABSL_FLAG(bool, cuda_kernels, true,
          "on CUDA: tree attention through kernels/cuda (false: LibTorch)");
ABSL_FLAG(std::string, prompt_ids, "",
          "if set: comma-separated prompt token ids; print 16 greedy tokens "
          "and exit (a sanity check against a reference)");

namespace lookahead::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int> ParseInts(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int x;
    if (absl::SimpleAtoi(part, &x)) out.push_back(x);
  }
  return out;
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

int Run() {
  if (!ConfigureThreads({}).ok()) return 1;
  std::string path = absl::GetFlag(FLAGS_model);
  if (path.empty()) path = RealModelPath();
  auto file = GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  const auto t0 = Clock::now();
  ModelOptions model_options;
  model_options.matmul_threads = absl::GetFlag(FLAGS_matmul_threads);
  model_options.packed_linear = absl::GetFlag(FLAGS_packed_linear);
  model_options.pin_threads = absl::GetFlag(FLAGS_pin_threads);
  model_options.cuda_kernels = absl::GetFlag(FLAGS_cuda_kernels);
  if (absl::StatusOr<WeightFormat> weights =
          ParseWeightFormat(absl::GetFlag(FLAGS_weights));
      weights.ok()) {
    model_options.weights = *weights;
  } else {
    std::fprintf(stderr, "%s\n", weights.status().ToString().c_str());
    return 1;
  }
  if (absl::StatusOr<LinearActivations> activations =
          ParseLinearActivations(absl::GetFlag(FLAGS_activations));
      activations.ok()) {
    model_options.activations = *activations;
  } else {
    std::fprintf(stderr, "%s\n", activations.status().ToString().c_str());
    return 1;
  }
  model_options.kv_f16 = absl::GetFlag(FLAGS_kv_f16);
  model_options.head_tokens = absl::GetFlag(FLAGS_head_tokens);
  if (absl::Status s =
          ParseDeviceOptions(absl::GetFlag(FLAGS_device),
                             absl::GetFlag(FLAGS_dtype), &model_options);
      !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  auto loaded = LlamaModel::Load(**file, model_options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(loaded.status().message()).c_str());
    return 1;
  }
  const LlamaModel& model = **loaded;
  const int vocab = model.config().vocab_size;
  std::printf("weights: %s\n", model.DescribeWeights().c_str());
  std::printf("model %s: %d layers, D=%d, vocab=%d on %s%s; load %.0f ms\n",
              path.c_str(), model.config().block_count,
              model.config().embedding_length, vocab,
              DescribeDevice(model_options).c_str(),
              model_options.device.is_cuda()
                  ? (model_options.cuda_kernels ? ", tree-attention kernel"
                                                : ", LibTorch attention")
                  : "",
              Ms(t0, Clock::now()));
  if (!absl::GetFlag(FLAGS_prompt_ids).empty()) {
    std::vector<int32_t> prompt;
    for (int id : ParseInts(absl::GetFlag(FLAGS_prompt_ids)))
      prompt.push_back(id);
    auto cache = model.NewCache();
    if (!cache.ok() || prompt.empty()) return 1;
    auto logits = model.Prefill(cache->get(), prompt);
    if (!logits.ok()) return 1;
    const torch::Tensor host = logits->to(torch::kCPU);
    int32_t token = ArgMax(absl::MakeConstSpan(host.data_ptr<float>(), vocab));
    std::printf("greedy:");
    for (int i = 0; i < 16; ++i) {
      std::printf(" %d", token);
      auto out = model.VerifyAndAccept(cache->get(), token, {}, {});
      if (!out.ok()) return 1;
      token = (*out)[0];
    }
    std::printf("\n");
    return 0;
  }
  std::mt19937 rng(1);
  const int reps = absl::GetFlag(FLAGS_reps);

  // (1) Plain decoding at batch 1 from each context, per thread setting;
  // and a prefill from empty if asked.
  const int n = absl::GetFlag(FLAGS_decode_tokens);
  const int prefill = absl::GetFlag(FLAGS_prefill_tokens);
  for (absl::string_view setting : absl::StrSplit(
           absl::GetFlag(FLAGS_thread_sweep), ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(setting, 'x');
    int intra = 1, blas = 1;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &intra) ||
        !absl::SimpleAtoi(parts[1], &blas)) {
      continue;
    }
    ThreadOptions options;
    options.intra_op_threads = intra;
    options.blas_threads = blas;
    if (!ConfigureThreads(options).ok()) continue;
    std::printf("\nplain greedy decoding, batch 1, threads %s\n",
                std::string(setting).c_str());
    std::printf("%-14s %10s %10s\n", "context", "ms/token", "tokens/s");
    for (int context : ParseInts(absl::GetFlag(FLAGS_decode_contexts))) {
      auto cache = *model.NewCache(context + n + 2);
      const std::vector<int32_t> prompt = RandomTokens(rng, context, vocab);
      (void)model.Prefill(cache.get(),
                          absl::MakeConstSpan(prompt).subspan(0, context - 1));
      int32_t token = prompt.back();
      (void)model.VerifyAndAccept(cache.get(), token, {}, {});  // warm up
      token = prompt.back();
      const auto start = Clock::now();
      for (int i = 0; i < n; ++i) {
        auto out = model.VerifyAndAccept(cache.get(), token, {}, {});
        if (!out.ok()) return 1;
        token = (*out)[0];
      }
      const double ms = Ms(start, Clock::now()) / n;
      std::printf("%-14s %10.1f %10.1f\n",
                  absl::StrCat(context, " -> +", n).c_str(), ms, 1000.0 / ms);
    }
    if (prefill > 0) {
      const std::vector<int32_t> prompt = RandomTokens(rng, prefill, vocab);
      double best = 1e30;
      for (int rep = 0; rep < std::max(1, reps); ++rep) {
        auto cache = *model.NewCache(prefill + 1);
        const auto start = Clock::now();
        if (!model.Prefill(cache.get(), prompt).ok()) return 1;
        best = std::min(best, Ms(start, Clock::now()));
      }
      std::printf("prefill %d tokens: %.0f ms (best of %d), %.1f tokens/s\n",
                  prefill, best, std::max(1, reps), 1000.0 * prefill / best);
    }
  }

  ThreadOptions chosen;
  chosen.intra_op_threads = absl::GetFlag(FLAGS_intra_op);
  chosen.blas_threads = absl::GetFlag(FLAGS_blas);
  if (!ConfigureThreads(chosen).ok()) return 1;

  // (2) Tree-verify forward latency (ms) by context and tree size.
  const std::vector<int> contexts = ParseInts(absl::GetFlag(FLAGS_contexts));
  const std::vector<int> sizes = ParseInts(absl::GetFlag(FLAGS_tree_sizes));
  std::printf(
      "\ntree verify forward latency, ms (median of %d), threads %dx%d\n", reps,
      chosen.intra_op_threads, chosen.blas_threads);
  std::printf("%-8s", "tokens");
  for (int c : contexts)
    std::printf(" %9s", ("ctx" + std::to_string(c)).c_str());
  std::printf("\n");
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int c : contexts) {
    caches.push_back(*model.NewCache(c + 256));
    const std::vector<int32_t> prompt = RandomTokens(rng, c, vocab);
    if (!model.Prefill(caches.back().get(), prompt).ok()) return 1;
  }
  for (int n : sizes) {
    std::printf("%-8d", n);
    for (size_t ci = 0; ci < contexts.size(); ++ci) {
      std::vector<double> times;
      for (int r = 0; r <= reps; ++r) {
        TreeInput in;
        in.cache = caches[ci].get();
        in.tokens = RandomTokens(rng, n, vocab);
        for (int i = 0; i < n; ++i) {
          in.parents.push_back(static_cast<int32_t>(rng() % (i + 1)) - 1);
        }
        in.parents[0] = -1;
        const auto start = Clock::now();
        auto out = model.Forward(absl::MakeConstSpan(&in, 1));
        if (!out.ok()) return 1;
        if (r > 0) times.push_back(Ms(start, Clock::now()));  // r=0 warms up
        caches[ci]->DiscardPending();
      }
      std::printf(" %9.1f", Median(times));
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  // (3) Batched forward: B sequences x 8 tree tokens each, context 256.
  std::printf("\nbatched forward, 8 tree tokens per sequence, context 256\n");
  std::printf("%-6s %10s %14s\n", "batch", "ms", "ms/sequence");
  for (int b : {1, 2, 4, 8}) {
    std::vector<std::unique_ptr<KvCache>> bc;
    std::vector<TreeInput> batch;
    for (int s = 0; s < b; ++s) {
      bc.push_back(*model.NewCache(300));
      const std::vector<int32_t> prompt = RandomTokens(rng, 256, vocab);
      if (!model.Prefill(bc.back().get(), prompt).ok()) return 1;
      TreeInput in;
      in.cache = bc.back().get();
      in.tokens = RandomTokens(rng, 8, vocab);
      in.parents = {-1, 0, 0, 1, 1, 2, 3, 4};
      batch.push_back(in);
    }
    std::vector<double> times;
    for (int r = 0; r <= reps; ++r) {
      const auto start = Clock::now();
      if (!model.Forward(batch).ok()) return 1;
      if (r > 0) times.push_back(Ms(start, Clock::now()));
    }
    std::printf("%-6d %10.1f %14.1f\n", b, Median(times), Median(times) / b);
  }
  return 0;
}

}  // namespace
}  // namespace lookahead::engine

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return lookahead::engine::Run();
}
