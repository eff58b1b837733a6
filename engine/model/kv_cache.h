// KvCache: the key/value cache of ONE sequence, preallocated to a fixed
// number of token slots, with provisional rows for a draft tree.
//
// Slots [0, Length()) hold the committed sequence (token t at position t).
// A forward pass over a token tree of n nodes writes the tree's K/V rows
// provisionally to slots [Length(), Length() + n) and records the tree
// (BeginTree); CommitPath then moves one root-to-node path of that tree to
// contiguous slots and advances Length(); everything else is discarded.
// Not thread-safe: one sequence's cache is used by one thread at a time (the
// model forward and the commit both mutate it). Distinct caches are
// independent.
#ifndef LOOKAHEAD_ENGINE_MODEL_KV_CACHE_H_
#define LOOKAHEAD_ENGINE_MODEL_KV_CACHE_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace lookahead::engine {

struct KvCacheShape {
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int capacity = 0;  // token slots
};

class KvCache {
 public:
  // Allocates zeroed K and V of (layers, kv_heads, capacity, head_dim) with
  // `options` (dtype, device). INVALID_ARGUMENT iff a dimension is < 1;
  // RESOURCE_EXHAUSTED iff the allocation fails.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(
      const KvCacheShape& shape, const torch::TensorOptions& options);

  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheShape& shape() const { return shape_; }
  // Committed tokens (slots in use).
  int Length() const { return length_; }
  // Total slots.
  int Capacity() const { return shape_.capacity; }
  // Size of the provisional tree written after Length(); 0 if none.
  int Pending() const { return static_cast<int>(pending_parents_.size()); }

  // Reserves slots [Length(), Length() + parents.size()) for a tree with
  // these parent indices (parents[i] in [-1, i), as in TreeLayout), replacing
  // any earlier provisional tree. RESOURCE_EXHAUSTED (with the numbers) iff
  // the tree does not fit; INVALID_ARGUMENT iff parents is empty.
  absl::Status BeginTree(absl::Span<const int32_t> parents);

  // Moves the provisional rows of `path` (node indices of the tree given to
  // BeginTree) to slots Length(), Length()+1, ... and advances Length() by
  // path.size(); clears the provisional tree. `path` must start at a root
  // (parent -1) and each next node must be a child of the previous one;
  // empty `path` just discards. FAILED_PRECONDITION iff there is no
  // provisional tree and path is non-empty; INVALID_ARGUMENT iff path is not
  // such a chain. On error nothing changes.
  absl::Status CommitPath(absl::Span<const int32_t> path);

  // Drops the provisional tree (slots are overwritten by the next tree).
  void DiscardPending() { pending_parents_.clear(); }

  // Forgets committed tokens beyond `length` (and any provisional tree).
  // INVALID_ARGUMENT iff length is outside [0, Length()].
  absl::Status Truncate(int length);

  // Appends n committed tokens' K/V rows, k and v: (layers, kv_heads, n,
  // head_dim) in the cache's dtype and device, at slots [Length(), Length()
  // + n) and advances Length() by n (a copy; drops any provisional tree).
  // Restores K/V computed earlier for the same tokens at the same positions
  // (PrefixCache). INVALID_ARGUMENT iff the shapes, dtype or device differ
  // or n < 1; RESOURCE_EXHAUSTED iff the rows do not fit. On error nothing
  // changes.
  absl::Status AppendCommitted(const torch::Tensor& k, const torch::Tensor& v);

  // Per-layer views for the model. Writes through them mutate the cache.
  // k_layer(l), v_layer(l): (kv_heads, capacity, head_dim).
  // REQUIRES: 0 <= layer < shape().layers.
  torch::Tensor k_layer(int layer) { return k_[layer]; }
  torch::Tensor v_layer(int layer) { return v_[layer]; }
  // Whole caches, read-only use (tests, debugging).
  // k(), v(): (layers, kv_heads, capacity, head_dim).
  const torch::Tensor& k() const { return k_; }
  const torch::Tensor& v() const { return v_; }

 private:
  KvCache(const KvCacheShape& shape, torch::Tensor k, torch::Tensor v)
      : shape_(shape), k_(std::move(k)), v_(std::move(v)) {}

  const KvCacheShape shape_;
  torch::Tensor k_;  // (layers, kv_heads, capacity, head_dim)
  torch::Tensor v_;  // (layers, kv_heads, capacity, head_dim)
  int length_ = 0;
  std::vector<int32_t> pending_parents_;  // tree at slots [length_, ...)
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_KV_CACHE_H_
