#include "engine/model/acceptance.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/torch_status.h"
#if LOOKAHEAD_CUDA
#include "engine/model/cuda_ops.h"
#endif

namespace lookahead::engine {

absl::StatusOr<AcceptResult> AcceptLongestPath(
    absl::Span<const int32_t> tokens, absl::Span<const int32_t> parents,
    const torch::Tensor& logits, const SamplingParams& params,
    int64_t root_position) {
  RETURN_IF_ERROR(ValidateSamplingParams(params));
  const int n = static_cast<int>(tokens.size());
  if (n == 0 || parents.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tree needs >= 1 node and one parent per token; got ", n,
                     " tokens and ", parents.size(), " parents"));
  }
  if (parents[0] != -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node 0 must be the root (parent -1), has parent ", parents[0]));
  }
  std::vector<std::vector<int32_t>> children(n);
  for (int i = 1; i < n; ++i) {
    if (parents[i] < 0 || parents[i] >= i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node ", i, " has parent ", parents[i], "; must be in [0, ", i, ")"));
    }
    children[parents[i]].push_back(i);
  }
  if (!logits.defined() || logits.dim() != 2 || logits.size(0) != n ||
      logits.size(1) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits must be (", n, ", vocab), got ",
                     logits.defined() ? logits.dim() : 0, "-dim tensor"));
  }
#if LOOKAHEAD_CUDA
  if (logits.is_cuda() && logits.scalar_type() == torch::kFloat &&
      logits.is_contiguous() && cuda_ops::SupportsDeviceAcceptance(params)) {
    // Choice and walk on the device: only the accepted ids come back.
    AcceptResult result;
    RETURN_IF_ERROR(cuda_ops::AcceptOnDevice(tokens, parents, logits, params,
                                             root_position, &result.path,
                                             &result.tokens));
    return result;
  }
#endif
  ASSIGN_OR_RETURN(torch::Tensor host,
                   (TorchStatusOr<torch::Tensor>("logits to host", [&] {
                     return logits.to(torch::kCPU, torch::kFloat).contiguous();
                   })));
  const int64_t vocab = host.size(1);
  const float* data = host.data_ptr<float>();

  AcceptResult result;
  int32_t node = 0;
  int64_t position = root_position;
  while (true) {
    result.path.push_back(node);
    const int32_t token = SampleToken(
        absl::MakeConstSpan(data + node * vocab, vocab), params, position + 1);
    result.tokens.push_back(token);
    int32_t next = -1;
    for (int32_t child : children[node]) {
      if (tokens[child] == token) {
        next = child;
        break;
      }
    }
    if (next < 0) break;
    node = next;
    ++position;
  }
  return result;
}

}  // namespace lookahead::engine
