// LinearWeight: a matmul weight stored the way its kernel reads it.
//
// On CPU in float32, with AVX2 or AVX-512, the weight is panel-packed for
// kernels/cpu/packed_matmul (one pass over the weight per call, every row
// computed the same whatever the batch); otherwise it stays a dense (in, out)
// tensor for torch::mm. Immutable after Create: safe for concurrent use.
#ifndef LOOKAHEAD_ENGINE_MODEL_LINEAR_WEIGHT_H_
#define LOOKAHEAD_ENGINE_MODEL_LINEAR_WEIGHT_H_

#include <torch/types.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/panel_pool.h"

namespace lookahead::engine {

class LinearWeight {
 public:
  LinearWeight() = default;  // Empty: in() == out() == 0.

  // w: (in, out). Packs it when `packed` and w is a float32 CPU tensor and
  // the CPU has a packed kernel; keeps it dense otherwise. INVALID_ARGUMENT
  // unless w is 2-D.
  static absl::StatusOr<LinearWeight> Create(const torch::Tensor& w,
                                             bool packed);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  bool packed() const { return isa_ != kernels::PackedIsa::kNone; }

  // x: (T, in) -> (T, out), x's dtype and device. A packed weight's panels
  // are shared out over `pool` (null: the calling thread alone). Throws
  // c10::Error on a shape mismatch (callers sit behind a TorchStatus seam).
  torch::Tensor Apply(const torch::Tensor& x,
                      kernels::PanelPool* pool = nullptr) const;

  // The weight as a dense (in, out) tensor (a copy if packed): for
  // references and tests, not the hot path.
  torch::Tensor Dense() const;

 private:
  kernels::PackedIsa isa_ = kernels::PackedIsa::kNone;
  int64_t in_ = 0, out_ = 0;
  // Packed: (panels, in, panel width) float32; else dense (in, out).
  torch::Tensor w_;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_LINEAR_WEIGHT_H_
