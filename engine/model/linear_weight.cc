#include "engine/model/linear_weight.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/model/torch_status.h"

namespace lookahead::engine {
namespace {

// x (T, in) @ w (in, out) without the packed kernel. On CPU, OpenBLAS (2-core
// machine, the 135M model's shapes) is fastest with one gemv per row for 1-2
// rows (gemm packs the whole matrix first: 2-4x slower); for more rows, a
// gemm with the rows padded to a multiple of 16, since its small-M kernels
// are 1.5-2.5x slower for 4, 8 or 12 rows than for 16 (e.g. 3072x576: 12
// rows 1.0 ms, 16 rows 0.47 ms). Padding rows are zeros and are sliced off.
constexpr int64_t kMaxGemvRows = 2;
constexpr int64_t kGemmRowMultiple = 16;
torch::Tensor DenseMatmul(const torch::Tensor& x, const torch::Tensor& w) {
  if (!x.device().is_cpu()) return torch::mm(x, w);
  const int64_t rows = x.size(0);
  if (rows <= kMaxGemvRows) {
    const torch::Tensor wt = w.t();  // (out, in) view: gemv "T"
    return rows == 1 ? torch::mv(wt, x[0]).unsqueeze(0)
                     : torch::stack({torch::mv(wt, x[0]), torch::mv(wt, x[1])});
  }
  const int64_t padded =
      (rows + kGemmRowMultiple - 1) / kGemmRowMultiple * kGemmRowMultiple;
  if (padded == rows) return torch::mm(x, w);
  torch::Tensor xp = torch::zeros({padded, x.size(1)}, x.options());
  xp.narrow(0, 0, rows).copy_(x);
  return torch::mm(xp, w).narrow(0, 0, rows);
}

}  // namespace

absl::StatusOr<LinearWeight> LinearWeight::Create(const torch::Tensor& w,
                                                  bool packed) {
  if (!w.defined() || w.dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a linear weight must be 2-D (in, out), got ",
                     w.defined() ? w.dim() : 0, " dimensions"));
  }
  LinearWeight lw;
  lw.in_ = w.size(0);
  lw.out_ = w.size(1);
  const kernels::PackedIsa isa = kernels::BestPackedIsa();
  const bool pack = packed && isa != kernels::PackedIsa::kNone &&
                    w.device().is_cpu() && w.scalar_type() == torch::kFloat32;
  absl::Status status = TorchStatus("preparing a linear weight", [&] {
    if (!pack) {
      lw.w_ = w.contiguous();
      return;
    }
    const int64_t p = kernels::PanelWidth(isa);
    const int64_t panels = (lw.out_ + p - 1) / p;
    const torch::Tensor dense = w.contiguous();
    lw.w_ = torch::empty({panels, lw.in_, p}, w.options());
    kernels::PackWeight(dense.data_ptr<float>(), lw.in_, lw.out_, p,
                        lw.w_.data_ptr<float>());
    lw.isa_ = isa;
  });
  if (!status.ok()) return status;
  return lw;
}

torch::Tensor LinearWeight::Apply(const torch::Tensor& x,
                                  kernels::PanelPool* pool) const {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == in_, "linear: input ", x.sizes(),
              " does not match a weight of ", in_, " inputs");
  if (!packed()) return DenseMatmul(x, w_);
  const torch::Tensor xc = x.contiguous();
  const int64_t rows = xc.size(0), panels = w_.size(0), p = w_.size(2);
  torch::Tensor y = torch::empty({rows, panels * p}, xc.options());
  const float* xp = xc.data_ptr<float>();
  const float* wp = w_.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // Threads take whole panels; a row's result does not depend on the split.
  // Several chunks per thread, so a thread that is held up is covered.
  const auto run = [&](int64_t begin, int64_t end) {
    kernels::PackedMatmul(isa_, xp, rows, in_, wp, begin, end, yp, panels * p);
  };
  if (pool == nullptr || pool->threads() == 1) {
    run(0, panels);
  } else {
    pool->Run(panels, std::max<int64_t>(1, panels / (8 * pool->threads())),
              run);
  }
  return panels * p == out_ ? y : y.narrow(1, 0, out_).contiguous();
}

torch::Tensor LinearWeight::Dense() const {
  if (!packed()) return w_;
  // (panels, in, p) -> (in, panels * p) -> first out columns.
  return w_.permute({1, 0, 2})
      .reshape({in_, w_.size(0) * w_.size(2)})
      .narrow(1, 0, out_)
      .contiguous();
}

}  // namespace lookahead::engine
