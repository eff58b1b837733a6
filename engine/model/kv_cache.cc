#include "engine/model/kv_cache.h"

#include "absl/strings/str_cat.h"
#include "engine/model/torch_status.h"
#if LOOKAHEAD_CUDA
#include "engine/model/cuda_ops.h"
#endif

namespace lookahead::engine {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(
    const KvCacheShape& shape, const torch::TensorOptions& options) {
  if (shape.layers < 1 || shape.kv_heads < 1 || shape.head_dim < 1 ||
      shape.capacity < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache dimensions must be >= 1, got layers=", shape.layers,
        " kv_heads=", shape.kv_heads, " head_dim=", shape.head_dim,
        " capacity=", shape.capacity));
  }
  torch::Tensor k, v;
  absl::Status status = TorchStatus("allocating KV cache", [&] {
    const std::vector<int64_t> dims = {shape.layers, shape.kv_heads,
                                       shape.capacity, shape.head_dim};
    k = torch::zeros(dims, options);
    v = torch::zeros(dims, options);
  });
  if (!status.ok()) {
    return absl::ResourceExhaustedError(status.message());
  }
  return std::unique_ptr<KvCache>(
      new KvCache(shape, std::move(k), std::move(v)));
}

absl::Status KvCache::BeginTree(absl::Span<const int32_t> parents) {
  if (parents.empty()) {
    return absl::InvalidArgumentError("empty token tree");
  }
  const int64_t needed = static_cast<int64_t>(length_) + parents.size();
  if (needed > shape_.capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache overflow: ", length_, " committed + ", parents.size(),
        " new tokens > capacity ", shape_.capacity));
  }
  pending_parents_.assign(parents.begin(), parents.end());
  return absl::OkStatus();
}

absl::Status KvCache::CommitPath(absl::Span<const int32_t> path) {
  if (path.empty()) {
    pending_parents_.clear();
    return absl::OkStatus();
  }
  if (pending_parents_.empty()) {
    return absl::FailedPreconditionError(
        "CommitPath with no provisional tree (no forward since last commit)");
  }
  const int n = Pending();
  for (size_t i = 0; i < path.size(); ++i) {
    const int32_t node = path[i];
    if (node < 0 || node >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("path[", i, "] = ", node, " is not a node of the ", n,
                       "-node provisional tree"));
    }
    const int32_t want_parent = i == 0 ? -1 : path[i - 1];
    if (pending_parents_[node] != want_parent) {
      return absl::InvalidArgumentError(absl::StrCat(
          "path[", i, "] = node ", node, " has parent ", pending_parents_[node],
          ", expected ", want_parent,
          " (a path must start at a root and descend parent to child)"));
    }
  }
  bool contiguous = true;
  for (size_t i = 0; i < path.size(); ++i) {
    contiguous = contiguous && path[i] == static_cast<int32_t>(i);
  }
#if LOOKAHEAD_CUDA
  if (!contiguous && k_.is_cuda()) {
    // In place on the device, one launch for every layer and head.
    absl::Status status = cuda_ops::CompactKv(k_, v_, length_, path);
    if (!status.ok()) return status;
    contiguous = true;
  }
#endif
  if (!contiguous) {
    absl::Status status = TorchStatus("KvCache::CommitPath", [&] {
      std::vector<int64_t> src(path.size()), dst(path.size());
      for (size_t i = 0; i < path.size(); ++i) {
        src[i] = length_ + path[i];
        dst[i] = length_ + static_cast<int64_t>(i);
      }
      const auto index_options =
          torch::TensorOptions().dtype(torch::kLong).device(k_.device());
      torch::Tensor src_index =
          torch::tensor(src, torch::kLong).to(index_options.device());
      torch::Tensor dst_index =
          torch::tensor(dst, torch::kLong).to(index_options.device());
      // Gather first (a copy), then scatter: safe although ranges overlap.
      // rows: (layers, kv_heads, path, head_dim)
      torch::Tensor k_rows = k_.index_select(2, src_index);
      torch::Tensor v_rows = v_.index_select(2, src_index);
      k_.index_copy_(2, dst_index, k_rows);
      v_.index_copy_(2, dst_index, v_rows);
    });
    if (!status.ok()) return status;
  }
  length_ += static_cast<int>(path.size());
  pending_parents_.clear();
  return absl::OkStatus();
}

absl::Status KvCache::AppendCommitted(const torch::Tensor& k,
                                      const torch::Tensor& v) {
  const bool shaped = k.defined() && v.defined() && k.dim() == 4 &&
                      v.sizes() == k.sizes() && k.size(0) == shape_.layers &&
                      k.size(1) == shape_.kv_heads &&
                      k.size(3) == shape_.head_dim && k.size(2) >= 1;
  if (!shaped) {
    return absl::InvalidArgumentError(absl::StrCat(
        "K/V rows to append must both be (layers=", shape_.layers,
        ", kv_heads=", shape_.kv_heads, ", n>=1, head_dim=", shape_.head_dim,
        "), got ", k.defined() ? c10::str(k.sizes()) : "undefined", " and ",
        v.defined() ? c10::str(v.sizes()) : "undefined"));
  }
  if (k.scalar_type() != k_.scalar_type() ||
      v.scalar_type() != k_.scalar_type() || k.device() != k_.device() ||
      v.device() != k_.device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "K/V rows to append are ", c10::toString(k.scalar_type()), " on ",
        k.device().str(), ", the cache is ", c10::toString(k_.scalar_type()),
        " on ", k_.device().str()));
  }
  const int64_t n = k.size(2);
  if (length_ + n > shape_.capacity) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache overflow: ", length_, " committed + ", n,
                     " appended tokens > capacity ", shape_.capacity));
  }
  absl::Status status = TorchStatus("KvCache::AppendCommitted", [&] {
    k_.narrow(2, length_, n).copy_(k);
    v_.narrow(2, length_, n).copy_(v);
  });
  if (!status.ok()) return status;
  length_ += static_cast<int>(n);
  pending_parents_.clear();
  return absl::OkStatus();
}

absl::Status KvCache::Truncate(int length) {
  if (length < 0 || length > length_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot truncate KV cache of length ", length_, " to ", length));
  }
  length_ = length;
  pending_parents_.clear();
  return absl::OkStatus();
}

}  // namespace lookahead::engine
