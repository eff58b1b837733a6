// TreeLayout: positions and attention mask of a token tree verified in one
// forward pass, plus PackedTreeMask, its bit-packed form for kernels.
//
// A tree of n nodes is given by parent indices: parents[i] is in [-1, i)
// (topological order), -1 marks a root (a node that attends to the KV cache
// only, besides itself). Node i attends to the whole cache, its ancestors and
// itself. Immutable values; safe to share between threads once built.
#ifndef LOOKAHEAD_ENGINE_MODEL_TREE_MASK_H_
#define LOOKAHEAD_ENGINE_MODEL_TREE_MASK_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace lookahead::engine {

// Dense ancestor-or-self mask of a tree, row i = query node i.
class TreeLayout {
 public:
  // Returns the layout of the tree `parents`, or INVALID_ARGUMENT (naming the
  // offending index) iff parents is empty or some parents[i] is outside
  // [-1, i).
  static absl::StatusOr<TreeLayout> Build(absl::Span<const int32_t> parents);

  int size() const { return static_cast<int>(parents_.size()); }
  const std::vector<int32_t>& parents() const { return parents_; }
  // depth(i): number of ancestors of i (a root has depth 0). The position of
  // node i is (cache length + depth(i)).
  const std::vector<int32_t>& depths() const { return depths_; }
  // Returns true iff query i may attend to key j (j is i or an ancestor of i).
  bool Allowed(int i, int j) const { return mask_[i * size() + j] != 0; }
  // Row-major (size, size) 0/1 bytes; Allowed(i, j) == dense()[i*size()+j].
  const std::vector<uint8_t>& dense() const { return mask_; }
  // Returns true iff the tree is a single chain 0 <- 1 <- ... <- n-1.
  bool IsChain() const;

 private:
  TreeLayout() = default;

  std::vector<int32_t> parents_;
  std::vector<int32_t> depths_;
  std::vector<uint8_t> mask_;  // (size, size)
};

// Bit-packed (rows, cols) 0/1 mask: row r is words_per_row() uint64 words,
// bit (c % 64) of word (c / 64) is column c (LSB first). Unused high bits of a
// row's last word are zero.
class PackedTreeMask {
 public:
  // An empty (0, 0) mask.
  PackedTreeMask() : PackedTreeMask(0, 0) {}
  // Packs a row-major (rows, cols) 0/1 byte mask. Returns INVALID_ARGUMENT
  // iff dense.size() != rows * cols or rows/cols is negative.
  static absl::StatusOr<PackedTreeMask> Pack(absl::Span<const uint8_t> dense,
                                             int rows, int cols);
  static PackedTreeMask FromLayout(const TreeLayout& layout);

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  int words_per_row() const { return (cols_ + 63) / 64; }
  // (rows, words_per_row) words, row-major.
  const std::vector<uint64_t>& words() const { return words_; }
  // REQUIRES: 0 <= r < rows(), 0 <= c < cols().
  bool Get(int r, int c) const {
    return (words_[r * words_per_row() + c / 64] >> (c % 64)) & 1u;
  }
  // Returns the row-major (rows, cols) 0/1 byte mask.
  std::vector<uint8_t> Unpack() const;
  // Sets bit (r, c). REQUIRES: 0 <= r < rows(), 0 <= c < cols().
  void Set(int r, int c) {
    words_[r * words_per_row() + c / 64] |= uint64_t{1} << (c % 64);
  }
  // A (rows, cols) mask with every bit clear; REQUIRES rows, cols >= 0.
  static PackedTreeMask Zeros(int rows, int cols) {
    return PackedTreeMask(rows, cols);
  }

 private:
  PackedTreeMask(int rows, int cols)
      : rows_(rows), cols_(cols), words_(rows * ((cols + 63) / 64), 0) {}

  int rows_;
  int cols_;
  std::vector<uint64_t> words_;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_TREE_MASK_H_
