#include "draftsvc/sources/assistant/assistant_model.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "engine/gguf/model_config.h"
#include "engine/gguf/model_files.h"
#include "engine/model/batch.h"
#include "engine/model/sampler.h"

namespace lookahead::draftsvc {
namespace {

int32_t Greedy(const torch::Tensor& logits_row) {
  torch::Tensor row = logits_row.to(torch::kCPU).contiguous();
  return engine::ArgMax(absl::Span<const float>(
      row.data_ptr<float>(), static_cast<size_t>(row.numel())));
}

// The same status with "assistant model <path>: " in front.
absl::Status InPath(const std::string& path, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("assistant model ", path,
                                                  ": ", status.message()));
}

absl::Status VocabularyMatches(const std::string& path, int32_t own,
                               int32_t target) {
  if (own == target) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("assistant model ", path, " has a vocabulary of ", own,
                   " ids; the target's has ", target,
                   ": an assistant must share the target's tokenizer"));
}

}  // namespace

absl::Status AssistantModel::CheckVocabulary(int32_t vocab_size) const {
  return VocabularyMatches(path_, config().vocab_size, vocab_size);
}

absl::StatusOr<std::vector<int>> ParseAssistantLayers(absl::string_view spec,
                                                      int block_count) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("assistant layers ", QuoteInput(spec), ": ", why,
                     "; use all, first:K, every:S or skip:A-B over layers [0, ",
                     block_count, ")"));
  };
  if (spec == "all") return std::vector<int>();
  const std::vector<absl::string_view> parts = absl::StrSplit(spec, ':');
  if (parts.size() != 2) return bad("unknown form");
  std::vector<int> keep;
  if (parts[0] == "first" || parts[0] == "every") {
    int n = 0;
    if (!absl::SimpleAtoi(parts[1], &n) || n < 1 || n > block_count) {
      return bad(absl::StrCat("want an integer in [1, ", block_count, "]"));
    }
    for (int l = 0; l < block_count; ++l) {
      if (parts[0] == "first" ? l < n : l % n == 0) keep.push_back(l);
    }
  } else if (parts[0] == "skip") {
    const std::vector<absl::string_view> range = absl::StrSplit(parts[1], '-');
    int a = 0, b = 0;
    if (range.size() != 2 || !absl::SimpleAtoi(range[0], &a) ||
        !absl::SimpleAtoi(range[1], &b) || a < 0 || b < a || b >= block_count) {
      return bad("want A-B with 0 <= A <= B < layers");
    }
    for (int l = 0; l < block_count; ++l) {
      if (l < a || l > b) keep.push_back(l);
    }
    if (keep.empty()) return bad("keeps no layer");
  } else {
    return bad("unknown form");
  }
  return keep;
}

absl::StatusOr<std::unique_ptr<AssistantModel>> AssistantModel::Load(
    const std::string& path, int32_t vocab_size,
    const AssistantOptions& options) {
  absl::StatusOr<std::unique_ptr<engine::GgufFile>> file =
      engine::OpenModelFile(path);
  if (!file.ok()) return InPath(path, file.status());
  absl::StatusOr<engine::ModelConfig> config =
      engine::ModelConfig::FromGguf(**file);
  if (!config.ok()) return InPath(path, config.status());
  if (vocab_size > 0) {
    RETURN_IF_ERROR(VocabularyMatches(path, config->vocab_size, vocab_size));
  }
  engine::ModelOptions model_options = options.model;
  ASSIGN_OR_RETURN(model_options.keep_layers,
                   ParseAssistantLayers(options.layers, config->block_count));
  absl::StatusOr<std::unique_ptr<engine::LlamaModel>> model =
      engine::LlamaModel::Load(**file, model_options);
  if (!model.ok()) return InPath(path, model.status());
  const int kept = (*model)->config().block_count;
  std::string description = absl::StrCat(
      path, ": layers ", options.layers, " (", kept, " of ",
      config->block_count, "), ",
      model_options.matmul_threads > 0
          ? absl::StrCat(model_options.matmul_threads, " thread(s)")
          : std::string("all cores"),
      ", ", (*model)->DescribeWeights());
  return std::unique_ptr<AssistantModel>(
      new AssistantModel(path, *std::move(file), *std::move(model),
                         config->block_count, std::move(description)));
}

absl::StatusOr<std::vector<int32_t>> AssistantModel::Continue(
    absl::Span<const int32_t> context, int n) const {
  if (context.empty()) {
    return absl::InvalidArgumentError("context is empty: give >= 1 token");
  }
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("n is ", n, "; use >= 1"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<engine::KvCache> cache,
                   model_->NewCache(static_cast<int>(context.size()) + n));
  ASSIGN_OR_RETURN(torch::Tensor logits, model_->Prefill(cache.get(), context));
  std::vector<int32_t> out = {Greedy(logits)};
  while (static_cast<int>(out.size()) < n) {
    engine::TreeInput step =
        engine::ChainInput(cache.get(), absl::MakeConstSpan(&out.back(), 1));
    ASSIGN_OR_RETURN(std::vector<torch::Tensor> rows,
                     model_->Forward(absl::MakeConstSpan(&step, 1)));
    RETURN_IF_ERROR(cache->CommitPath({0}));
    out.push_back(Greedy(rows[0][0]));
  }
  return out;
}

}  // namespace lookahead::draftsvc
