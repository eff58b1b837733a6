#include "draftsvc/assistant_model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
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

}  // namespace

absl::StatusOr<std::unique_ptr<AssistantModel>> AssistantModel::Load(
    const std::string& path, int32_t vocab_size,
    const engine::ModelOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<engine::GgufFile> file,
                   engine::OpenModelFile(path));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::LlamaModel> model,
                   engine::LlamaModel::Load(*file, options));
  if (vocab_size > 0 && model->config().vocab_size != vocab_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "assistant model ", path, " has a vocabulary of ",
        model->config().vocab_size, " ids; the target's has ", vocab_size,
        ": an assistant must share the target's tokenizer"));
  }
  return std::unique_ptr<AssistantModel>(
      new AssistantModel(std::move(file), std::move(model)));
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
