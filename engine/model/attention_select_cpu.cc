// ChooseAttention of the CPU build: LibTorch everywhere.
#include <utility>

#include "engine/model/attention.h"

namespace lookahead::engine {

std::unique_ptr<AttentionBackend> ChooseAttention(
    const ModelConfig& config, torch::Tensor rope_inv_freq,
    const AttentionOptions& options) {
  return NewTorchAttention(config, std::move(rope_inv_freq), options);
}

}  // namespace lookahead::engine
