#include "verifysvc/serving/verify_predictions.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lookahead::verifysvc {

absl::StatusOr<VerifiedPredictions> TopPredictions(
    const engine::DraftTree& tree, const torch::Tensor& logits, int k) {
  const int64_t rows = tree.size() + 1;
  if (k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prediction k = ", k, " must be >= 1"));
  }
  if (logits.dim() != 2 || logits.size(0) != rows || logits.size(1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "verify logits of shape ", logits.dim() == 2 ? logits.size(0) : -1,
        " x ", logits.dim() == 2 ? logits.size(1) : -1, " for a tree of ", rows,
        " rows"));
  }
  VerifiedPredictions out;
  out.tokens = tree.tokens;
  out.parents = tree.parents;
  out.k = static_cast<int>(std::min<int64_t>(k, logits.size(1)));
  // ONE top-k over every row, on the logits' device; only (rows, k) ids
  // come back to the host.
  const torch::Tensor ids = std::get<1>(logits.topk(out.k, /*dim=*/1,
                                                    /*largest=*/true,
                                                    /*sorted=*/true))
                                .to(torch::kCPU, torch::kInt32)
                                .contiguous();
  const int32_t* data = ids.data_ptr<int32_t>();
  out.top_tokens.assign(data, data + ids.numel());
  return out;
}

}  // namespace lookahead::verifysvc
