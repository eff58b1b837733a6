// prefix_cache_bench: time to first token of a RAG request on the real
// model through the scheduler, cold (its document never seen) versus warm
// (the same document seen before, a different question), with the prefix
// cache on. Each round uses a different slice of the document file, so a
// cold request is really cold. Prints one line per round and the medians.
//
//   bazel run -c opt //verifysvc/serving:prefix_cache_bench -- \
//     [--document_tokens=1000] [--rounds=3] [--block_tokens=32]
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/prefix_cache.h"
#include "engine/testing/engine_test_util.h"
#include "verifysvc/serving/recording_sink.h"
#include "verifysvc/serving/scheduler.h"

ABSL_FLAG(std::string, document_file, "/usr/share/common-licenses/GPL-3",
          "text the documents are cut from (rounds x document_tokens tokens)");
ABSL_FLAG(int, document_tokens, 1000, "tokens of each round's document");
ABSL_FLAG(int, rounds, 3, "documents (each timed cold, then warm)");
ABSL_FLAG(int, block_tokens, 32, "prefix cache block size");
ABSL_FLAG(int, cache_mib, 512, "prefix cache capacity");

namespace lookahead::verifysvc {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Submits `prompt` for one token; returns its usage.
absl::StatusOr<Usage> FirstToken(Scheduler* scheduler,
                                 std::vector<int32_t> prompt) {
  GenerationRequest request;
  request.prompt = std::move(prompt);
  request.max_new_tokens = 1;
  RecordingSink sink;
  if (absl::Status s = scheduler->Submit(request, &sink); !s.ok()) return s;
  if (!sink.Wait(absl::Seconds(600))) {
    return absl::DeadlineExceededError("no answer in 600 s");
  }
  if (!sink.status().ok()) return sink.status();
  return sink.usage();
}

absl::Status Run() {
  ASSIGN_OR_RETURN(engine::RealModel real, engine::LoadRealModel());
  std::ifstream file(absl::GetFlag(FLAGS_document_file));
  std::stringstream text;
  text << file.rdbuf();
  if (!file || text.str().empty()) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read --document_file=", absl::GetFlag(FLAGS_document_file)));
  }
  const std::vector<int32_t> corpus = real.tokenizer->Encode(text.str());
  const int doc_tokens = absl::GetFlag(FLAGS_document_tokens);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (doc_tokens < 1 || rounds < 1 ||
      static_cast<int64_t>(corpus.size()) < int64_t{doc_tokens} * rounds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the document file has ", corpus.size(), " tokens, fewer than ", rounds,
        " rounds x ", doc_tokens, " (or a flag is < 1)"));
  }

  ASSIGN_OR_RETURN(std::unique_ptr<engine::KvCache> probe,
                   real.model->NewCache(1));
  engine::PrefixCacheOptions cache_options;
  cache_options.block_tokens = absl::GetFlag(FLAGS_block_tokens);
  cache_options.capacity_bytes = int64_t{absl::GetFlag(FLAGS_cache_mib)} << 20;
  ASSIGN_OR_RETURN(std::unique_ptr<engine::PrefixCache> prefix,
                   engine::PrefixCache::Create(cache_options, probe->shape(),
                                               real.model->KvDtype(),
                                               real.model->options().device));
  SchedulerOptions options;
  options.prefix_cache = prefix.get();
  ASSIGN_OR_RETURN(StepCostModel cost,
                   StepCostModel::Create({{1, 0.02}, {64, 0.1}}));
  ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                   Scheduler::Create(real.model.get(), real.tokenizer.get(),
                                     /*drafts=*/nullptr, cost, options));

  const std::vector<int32_t> head = real.tokenizer->Encode(
      "System: answer from the context only.\nContext: ");
  const std::vector<int32_t> questions[2] = {
      real.tokenizer->Encode("\nQuestion: What may I do with copies?\nAnswer:"),
      real.tokenizer->Encode("\nQuestion: Who holds the copyright?\nAnswer:")};
  // Warm-up (one-time allocations), on text no round uses.
  std::vector<int32_t> warmup = head;
  warmup.push_back(questions[0].back());
  RETURN_IF_ERROR(FirstToken(scheduler.get(), warmup).status());

  std::vector<double> cold_ms, warm_ms;
  std::printf("%5s %7s %7s %10s %10s %8s\n", "round", "prompt", "cached",
              "cold_ms", "warm_ms", "speedup");
  for (int r = 0; r < rounds; ++r) {
    std::vector<int32_t> prompt[2];
    for (int q = 0; q < 2; ++q) {
      prompt[q] = head;
      prompt[q].insert(prompt[q].end(), corpus.begin() + r * doc_tokens,
                       corpus.begin() + (r + 1) * doc_tokens);
      prompt[q].insert(prompt[q].end(), questions[q].begin(),
                       questions[q].end());
    }
    ASSIGN_OR_RETURN(Usage cold, FirstToken(scheduler.get(), prompt[0]));
    ASSIGN_OR_RETURN(Usage warm, FirstToken(scheduler.get(), prompt[1]));
    cold_ms.push_back(cold.time_to_first_token_seconds * 1e3);
    warm_ms.push_back(warm.time_to_first_token_seconds * 1e3);
    std::printf("%5d %7d %7d %10.1f %10.1f %7.1fx\n", r, warm.prompt_tokens,
                warm.cached_prompt_tokens, cold_ms.back(), warm_ms.back(),
                cold_ms.back() / warm_ms.back());
  }
  const engine::PrefixCacheStats stats = prefix->Stats();
  std::printf(
      "median time to first token: cold %.1f ms, warm %.1f ms (%.1fx); "
      "prefix cache %lld blocks, %.1f MiB\n",
      Median(cold_ms), Median(warm_ms), Median(cold_ms) / Median(warm_ms),
      static_cast<long long>(stats.blocks), stats.bytes / 1048576.0);
  scheduler->Shutdown(absl::Seconds(1));
  return absl::OkStatus();
}

}  // namespace
}  // namespace lookahead::verifysvc

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status status = lookahead::verifysvc::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "prefix_cache_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
