// AssistantModel: a GGUF model that draftsvc loads and runs itself through
// the shared engine library (//engine), the basis of model-based drafts: an
// assistant model continues a context greedily ("stairs" drafting). It
// checks the model's vocabulary against the namespace's up front, so a
// mismatch is a clear error, never garbage drafts.
//
// Thread-safety: Continue may be called concurrently (each call has its own
// KV cache); the model is immutable after Load.
#ifndef LOOKAHEAD_DRAFTSVC_ASSISTANT_MODEL_H_
#define LOOKAHEAD_DRAFTSVC_ASSISTANT_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/gguf/gguf.h"
#include "engine/model/llama_model.h"

namespace lookahead::draftsvc {

class AssistantModel {
 public:
  // Loads the GGUF file at `path` on the CPU in float32. If `vocab_size` >
  // 0, FAILED_PRECONDITION (with both sizes) unless the model's vocabulary
  // has exactly that many ids. Errors of the file and the engine otherwise
  // (NOT_FOUND, DATA_LOSS, UNIMPLEMENTED for another architecture).
  static absl::StatusOr<std::unique_ptr<AssistantModel>> Load(
      const std::string& path, int32_t vocab_size,
      const engine::ModelOptions& options = {});

  const engine::ModelConfig& config() const { return model_->config(); }

  // The `n` (>= 1) tokens greedy decoding appends to `context` (>= 1 ids
  // in the vocabulary): one prefill, then n - 1 one-token passes.
  // INVALID_ARGUMENT for an empty context, n < 1 or a bad id.
  absl::StatusOr<std::vector<int32_t>> Continue(
      absl::Span<const int32_t> context, int n) const;

 private:
  AssistantModel(std::unique_ptr<engine::GgufFile> file,
                 std::unique_ptr<engine::LlamaModel> model)
      : file_(std::move(file)), model_(std::move(model)) {}

  const std::unique_ptr<engine::GgufFile> file_;  // mapped weights
  const std::unique_ptr<engine::LlamaModel> model_;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_ASSISTANT_MODEL_H_
