// AcceptLongestPath: given the target model's logits at every node of a
// verified token tree, picks the tokens plain decoding would have produced
// and the longest tree path that agrees with them.
//
// At the root the target token is selected (greedy argmax, or a seeded draw
// keyed by (seed, position)); if a child of the current node carries that
// token the walk descends into it and repeats; otherwise the selected token
// is the bonus token and the walk stops. Because each draw depends only on
// the logits at that node and on (seed, position), the emitted tokens are
// exactly those of plain decoding with the same params. Pure function;
// thread-safe.
#ifndef LOOKAHEAD_ENGINE_MODEL_ACCEPTANCE_H_
#define LOOKAHEAD_ENGINE_MODEL_ACCEPTANCE_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/sampler.h"

namespace lookahead::engine {

struct AcceptResult {
  // Node indices of the verified tree, root (0) first, then each accepted
  // draft node: exactly the K/V rows to pass to KvCache::CommitPath.
  std::vector<int32_t> path;
  // Emitted tokens: the tokens of path[1..] followed by the bonus token.
  // Always path.size() tokens (>= 1). EOS handling is the caller's.
  std::vector<int32_t> tokens;
};

// `tokens`/`parents` describe the verified tree: node 0 is the root (the last
// committed-to-be token, parents[0] == -1) and every other node has a parent
// in [0, i). `logits`: (tokens.size(), vocab), any float dtype and device.
// `root_position`: absolute position of the root token (= KV cache length
// before the verify forward); the token drawn at node i is for position
// root_position + depth(i) + 1.
// Returns INVALID_ARGUMENT iff the tree or the logits shape is malformed or
// params are invalid. Siblings with equal tokens: the first one is taken.
absl::StatusOr<AcceptResult> AcceptLongestPath(
    absl::Span<const int32_t> tokens, absl::Span<const int32_t> parents,
    const torch::Tensor& logits, const SamplingParams& params,
    int64_t root_position);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_ACCEPTANCE_H_
