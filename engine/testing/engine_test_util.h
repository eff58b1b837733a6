// Test helpers for the verifier engine: tiny random-weight GGUF models, the
// real model's location, and an independent causal reference forward.
// Test-only; functions are pure (thread-compatible).
#ifndef LOOKAHEAD_ENGINE_TESTING_ENGINE_TEST_UTIL_H_
#define LOOKAHEAD_ENGINE_TESTING_ENGINE_TEST_UTIL_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/gguf/dequant.h"
#include "engine/gguf/gguf.h"
#include "engine/model/llama_model.h"
#include "engine/text/tokenizer.h"

namespace lookahead::engine {

struct TinyModelSpec {
  std::string architecture = "llama";  // "qwen2" adds q/k/v biases
  int vocab = 101;
  int dim = 64;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int ffn = 96;
  int context = 512;
  bool tied = true;
  float rope_base = 10000.0f;
  float weight_scale = 0.3f;  // stddev of random weights
  // Type of token_embd and the matmul weights: F32, F16, BF16, Q8_0, Q4_0
  // and Q4_1 quantize random normal weights (dims must be multiples of 32);
  // Q4_K, Q5_K and Q6_K are random blocks with small scales (multiples of
  // 256). Norms stay F32.
  GgmlType weight_type = GgmlType::kF32;
  uint64_t seed = 1;
};

// Returns the bytes of a GGUF file with random weights for `spec`.
absl::StatusOr<std::string> TinyModelGguf(const TinyModelSpec& spec);

// Loads TinyModelGguf(spec) with default options (float32, CPU).
absl::StatusOr<std::unique_ptr<LlamaModel>> LoadTinyModel(
    const TinyModelSpec& spec, const ModelOptions& options = {});

// $LOOKAHEAD_MODEL_DIR (else $HOME/.cache/lookahead/models) + "/" + file:
// where tools/setup.sh --model=NAME puts a model.
std::string ModelCachePath(absl::string_view file);

// ModelCachePath("SmolLM2-135M-Instruct.Q4_1.gguf"): the embedded default.
std::string RealModelPath();

// Opens RealModelPath(); NOT_FOUND naming tools/setup.sh iff absent.
absl::StatusOr<std::unique_ptr<GgufFile>> OpenRealModel();

// The real model with its tokenizer, for tests that load it once per suite.
struct RealModel {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Configures the default threads (ThreadOptions) and loads the real model
// and tokenizer; errors as OpenRealModel, LlamaModel::Load, FromGguf.
// The device and dtype the real-model suites run on: LOOKAHEAD_TEST_DEVICE
// (default cpu), LOOKAHEAD_TEST_DTYPE (default float32) and
// LOOKAHEAD_TEST_WEIGHTS (default native), LOOKAHEAD_TEST_ACTIVATIONS
// (default f32) and LOOKAHEAD_TEST_KV_CACHE (default f32), as verifysvc's
// --device, --dtype, --weights, --activations and --kv_cache.
// tools/gpu_check.sh sets them on a GPU machine.
absl::StatusOr<ModelOptions> TestDeviceOptions();

absl::StatusOr<RealModel> LoadRealModel(const ModelOptions& options = {});

// LoadRealModel(*TestDeviceOptions()), loaded on the first call and shared
// by every later one in the process (suites' SetUpTestSuite); a test
// failure and null on any error.
const RealModel* SharedRealModel();

// Logits (n, vocab) of plain causal full-sequence attention over `tokens`
// (no KV cache, no trees), written independently of LlamaModel::Forward:
// RoPE through complex multiplication, GQA through repeat_interleave, a
// triangular mask. Uses model.weights() and model.config().
torch::Tensor ReferenceCausalLogits(const LlamaModel& model,
                                    absl::Span<const int32_t> tokens);

// Logits (n, vocab) of one Forward of `tokens` as a chain in a fresh cache
// of 64 slots; a test failure (and an undefined tensor) on any error.
torch::Tensor ChainLogits(const LlamaModel& model,
                          const std::vector<int32_t>& tokens);

// Max |a - b| (float64), or +inf if shapes differ.
double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b);

// Max |a - b| over the committed K and V rows of two caches, or +inf if
// their lengths or shapes differ.
double MaxCommittedCacheDiff(const KvCache& a, const KvCache& b);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_TESTING_ENGINE_TEST_UTIL_H_
