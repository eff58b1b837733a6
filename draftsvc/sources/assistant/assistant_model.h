// AssistantModel: a GGUF model that draftsvc loads and runs itself through
// the shared engine library (//engine), the basis of model-based drafts: an
// assistant model continues a context ("stairs" drafting). It is either a
// separate small model with the target's vocabulary or a *self-drafter*: the
// target's own GGUF in a cheaper, lossy compute form (a subset of its layers
// (early exit / layer skipping, as in LayerSkip, Draft&Verify and SWIFT) on
// few threads). It checks the model's vocabulary against the namespace's up
// front, so a mismatch is a clear error, never garbage drafts. Drafts are
// only proposals: acceptance is always the verifier's, so a lossy assistant
// costs acceptance, never output.
//
// Thread-safety: the model is immutable after Load; Continue and forward
// passes may run concurrently on distinct KV caches.
#ifndef LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_MODEL_H_
#define LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/gguf/gguf.h"
#include "engine/model/llama_model.h"

namespace lookahead::draftsvc {

// Which of a file's layers the assistant runs, as flag text:
//   "all"       every layer (the target itself when it is the target's file)
//   "first:K"   layers 0..K-1, then the final norm and LM head (early exit)
//   "every:S"   layers 0, S, 2S, ... (layer skipping)
//   "skip:A-B"  every layer but A..B inclusive (SWIFT-style middle skip)
// Returns the layer indices for a file of `block_count` layers (empty for
// "all"); INVALID_ARGUMENT quoting the text and naming the forms otherwise,
// or when it keeps no layer or names one outside [0, block_count).
absl::StatusOr<std::vector<int>> ParseAssistantLayers(absl::string_view spec,
                                                      int block_count);

struct AssistantOptions {
  // ParseAssistantLayers text. Default "all": measured on SmolLM2-135M Q4_1
  // (draftsvc/bench/assistant_bench.cc; 2-core CPU shared with builds, so
  // costs are noisy medians), the LM head (49152 x 576) is a third of a
  // pass, so dropping layers saves little, while this untrained model's
  // intermediate layers do not predict its output: dropping 2 middle layers
  // (skip:22-23) costs 0.6-0.8x of "all" per token and keeps ~35% of the
  // target's greedy tokens (accepted length ~1.1 of a 4-chain); 6 layers
  // (skip:14-19) 0.8x and ~32% (1.1); every:2 or first:16 0.55-0.6x and
  // < 5%. "all" on 1 thread drafts exactly the target's greedy tokens (4.0
  // of 4) at 0.5-0.75x of the verifier's 2-thread one-token pass under
  // that load: the most accepted tokens per second of drafting by ~3x.
  std::string layers = "all";
  // The engine's options. Defaults differ from the verifier's: one matmul
  // thread and no pinning, because draftsvc shares the CPU with the
  // verifier and a drafter that takes every core slows the verify pass more
  // than its drafts gain; and int8 activations, the cheapest compute form
  // (a draft only needs to be likely; the verifier decides what is kept).
  // model.keep_layers is set from `layers`.
  engine::ModelOptions model = [] {
    engine::ModelOptions m;
    m.matmul_threads = 1;
    m.pin_threads = false;
    m.activations = engine::LinearActivations::kInt8;
    return m;
  }();
};

class AssistantModel {
 public:
  // Loads the GGUF file at `path` (native weights on the CPU unless
  // options.model says otherwise) keeping options.layers. If `vocab_size` >
  // 0, FAILED_PRECONDITION (with both sizes and the path) unless the
  // model's vocabulary has exactly that many ids. Otherwise the errors of
  // the file and the engine, prefixed with the path: NOT_FOUND (missing
  // file), DATA_LOSS / INVALID_ARGUMENT (corrupt file), UNIMPLEMENTED
  // (another architecture), INVALID_ARGUMENT (bad options.layers). Nothing
  // is returned half-loaded.
  static absl::StatusOr<std::unique_ptr<AssistantModel>> Load(
      const std::string& path, int32_t vocab_size,
      const AssistantOptions& options = {});

  const engine::ModelConfig& config() const { return model_->config(); }
  // OK iff the model's vocabulary has exactly `vocab_size` ids (a verifier
  // opening a session says its own); FAILED_PRECONDITION naming both sizes
  // and the path otherwise.
  absl::Status CheckVocabulary(int32_t vocab_size) const;
  // The model as loaded (config().block_count = kept layers).
  const engine::LlamaModel& model() const { return *model_; }
  // Layers of the file (before keeping a subset).
  int file_layers() const { return file_layers_; }
  // "SmolLM2.gguf: layers first:8 (8 of 30), 1 thread, native Q4_1 ..."
  // for logs and stats.
  const std::string& description() const { return description_; }

  // The `n` (>= 1) tokens greedy decoding appends to `context` (>= 1 ids
  // in the vocabulary): one prefill, then n - 1 one-token passes, in a
  // fresh cache (the reference AssistantDrafter's cached drafting is
  // checked against). INVALID_ARGUMENT for an empty context, n < 1 or a
  // bad id.
  absl::StatusOr<std::vector<int32_t>> Continue(
      absl::Span<const int32_t> context, int n) const;

 private:
  AssistantModel(std::string path, std::unique_ptr<engine::GgufFile> file,
                 std::unique_ptr<engine::LlamaModel> model, int file_layers,
                 std::string description)
      : path_(std::move(path)),
        file_(std::move(file)),
        model_(std::move(model)),
        file_layers_(file_layers),
        description_(std::move(description)) {}

  const std::string path_;
  const std::unique_ptr<engine::GgufFile> file_;  // mapped weights
  const std::unique_ptr<engine::LlamaModel> model_;
  const int file_layers_;
  const std::string description_;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_MODEL_H_
