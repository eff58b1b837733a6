// TopPredictions: the model's k most likely next tokens at every row of a
// verified tree (Token Recycling), from the verify pass's logits, as the
// draft sources' VerifiedPredictions. On the CPU (float32 logits, k <= 64)
// one vectorized scan per row, on the verifier's critical path for a few
// microseconds; elsewhere one LibTorch top-k over the (rows, vocab) logits
// on their device. Pure function; thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_VERIFY_PREDICTIONS_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_VERIFY_PREDICTIONS_H_

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "engine/model/draft_tree.h"
#include "verifysvc/drafts/draft_source.h"

namespace lookahead::verifysvc {

// `tree`: the draft verified after a root; `logits`: (tree.size() + 1,
// vocab), row 0 the root, row i + 1 node i, any float dtype and device.
// Returns the tree's tokens and parents with min(k, vocab) ids per row,
// best first (ties in any order). INVALID_ARGUMENT iff k < 1 or the logits'
// shape does not fit the tree.
absl::StatusOr<VerifiedPredictions> TopPredictions(
    const engine::DraftTree& tree, const torch::Tensor& logits, int k);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_VERIFY_PREDICTIONS_H_
