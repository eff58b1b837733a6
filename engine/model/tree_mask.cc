#include "engine/model/tree_mask.h"

#include "absl/strings/str_cat.h"

namespace lookahead::engine {

absl::StatusOr<TreeLayout> TreeLayout::Build(
    absl::Span<const int32_t> parents) {
  const int n = static_cast<int>(parents.size());
  if (n == 0) return absl::InvalidArgumentError("tree has no nodes");
  TreeLayout layout;
  layout.parents_.assign(parents.begin(), parents.end());
  layout.depths_.resize(n);
  layout.mask_.assign(static_cast<size_t>(n) * n, 0);
  for (int i = 0; i < n; ++i) {
    const int32_t p = parents[i];
    if (p < -1 || p >= i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tree node ", i, " has parent ", p,
          "; parents must be -1 (root) or an earlier node index in [0, ", i,
          ")"));
    }
    uint8_t* row = &layout.mask_[static_cast<size_t>(i) * n];
    if (p >= 0) {
      // Ancestors of i = ancestors of p plus p itself (row p includes p).
      const uint8_t* parent_row = &layout.mask_[static_cast<size_t>(p) * n];
      for (int j = 0; j <= p; ++j) row[j] = parent_row[j];
      layout.depths_[i] = layout.depths_[p] + 1;
    } else {
      layout.depths_[i] = 0;
    }
    row[i] = 1;
  }
  return layout;
}

bool TreeLayout::IsChain() const {
  for (int i = 0; i < size(); ++i) {
    if (parents_[i] != i - 1) return false;
  }
  return true;
}

absl::StatusOr<PackedTreeMask> PackedTreeMask::Pack(
    absl::Span<const uint8_t> dense, int rows, int cols) {
  if (rows < 0 || cols < 0 ||
      dense.size() != static_cast<size_t>(rows) * static_cast<size_t>(cols)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mask of ", dense.size(), " bytes is not (", rows, ", ", cols, ")"));
  }
  PackedTreeMask packed(rows, cols);
  const int wpr = packed.words_per_row();
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      if (dense[static_cast<size_t>(r) * cols + c] != 0) {
        packed.words_[r * wpr + c / 64] |= uint64_t{1} << (c % 64);
      }
    }
  }
  return packed;
}

PackedTreeMask PackedTreeMask::FromLayout(const TreeLayout& layout) {
  // The layout's mask is square and well-formed, so Pack cannot fail.
  return *Pack(layout.dense(), layout.size(), layout.size());
}

std::vector<uint8_t> PackedTreeMask::Unpack() const {
  std::vector<uint8_t> dense(static_cast<size_t>(rows_) * cols_);
  for (int r = 0; r < rows_; ++r) {
    for (int c = 0; c < cols_; ++c) {
      dense[static_cast<size_t>(r) * cols_ + c] = Get(r, c) ? 1 : 0;
    }
  }
  return dense;
}

}  // namespace lookahead::engine
