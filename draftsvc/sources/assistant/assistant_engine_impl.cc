#include "draftsvc/sources/assistant/assistant_engine_impl.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "draftsvc/sources/assistant/assistant_drafter.h"
#include "draftsvc/sources/assistant/assistant_model.h"
#include "engine/model/native_linear.h"

namespace lookahead::draftsvc {
namespace {

class DrafterEngine final : public AssistantEngine {
 public:
  DrafterEngine(std::unique_ptr<AssistantModel> model,
                std::unique_ptr<AssistantDrafter> drafter)
      : model_(std::move(model)), drafter_(std::move(drafter)) {}
  ~DrafterEngine() override {
    drafter_.reset();  // Joins the pre-draft workers before the model goes.
  }

  const std::string& description() const override {
    return model_->description();
  }
  absl::Status CheckVocabulary(int32_t vocab_size) const override {
    return model_->CheckVocabulary(vocab_size);
  }
  absl::Status Open(absl::string_view session_id,
                    absl::Span<const int32_t> prompt,
                    const engine::SamplingParams& sampling) override {
    return drafter_->Open(session_id, prompt, sampling);
  }
  absl::Status Advance(absl::string_view session_id,
                       absl::Span<const int32_t> accepted) override {
    return drafter_->Advance(session_id, accepted);
  }
  absl::StatusOr<AssistantDraft> Draft(absl::string_view session_id, int budget,
                                       absl::Time deadline) override {
    return drafter_->Draft(session_id, budget, deadline);
  }
  absl::Status Close(absl::string_view session_id) override {
    return drafter_->Close(session_id);
  }
  double TakeSeconds(absl::string_view session_id) override {
    return drafter_->TakeSeconds(session_id);
  }
  AssistantDrafterStats stats() const override { return drafter_->stats(); }
  double seconds_per_pass() const override {
    return drafter_->seconds_per_pass();
  }
  double RecentSecondsPerPass(absl::Duration max_age) override {
    return drafter_->RecentSecondsPerPass(max_age);
  }

 private:
  const std::unique_ptr<AssistantModel> model_;
  std::unique_ptr<AssistantDrafter> drafter_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AssistantEngine>> CreateAssistantEngine(
    const std::string& model_path, const AssistantModelOptions& model,
    const AssistantDrafterOptions& drafter) {
  AssistantOptions options;
  options.layers = model.layers;
  absl::StatusOr<engine::LinearActivations> activations =
      engine::ParseLinearActivations(model.activations);
  if (!activations.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--assistant_activations: ", activations.status().message()));
  }
  options.model.activations = *activations;
  if (model.threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--assistant_threads=", model.threads, " must be >= 1"));
  }
  options.model.matmul_threads = model.threads;
  if (model.head_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--assistant_head_tokens=", model.head_tokens,
                     " must be >= 0 (0: every id)"));
  }
  options.model.head_tokens = model.head_tokens;
  ASSIGN_OR_RETURN(std::unique_ptr<AssistantModel> loaded,
                   AssistantModel::Load(model_path, /*vocab_size=*/0, options));
  absl::StatusOr<std::unique_ptr<AssistantDrafter>> created =
      AssistantDrafter::Create(loaded.get(), drafter);
  if (!created.ok()) {
    return absl::Status(
        created.status().code(),
        absl::StrCat("assistant drafter: ", created.status().message()));
  }
  return std::make_unique<DrafterEngine>(std::move(loaded),
                                         *std::move(created));
}

}  // namespace lookahead::draftsvc
