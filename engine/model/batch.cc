#include "engine/model/batch.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace lookahead::engine {

absl::StatusOr<SequenceRows> RowsFromTree(const TreeInput& tree) {
  if (tree.cache == nullptr) {
    return absl::InvalidArgumentError("null KV cache");
  }
  if (tree.tokens.empty()) return absl::InvalidArgumentError("no tokens");
  if (tree.parents.size() != tree.tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        tree.tokens.size(), " tokens but ", tree.parents.size(), " parents"));
  }
  absl::StatusOr<TreeLayout> layout = TreeLayout::Build(tree.parents);
  if (!layout.ok()) return layout.status();
  SequenceRows rows;
  rows.cache = tree.cache;
  rows.tokens = tree.tokens;
  rows.parents = tree.parents;
  rows.last_logits_only = tree.last_logits_only;
  const int length = tree.cache->Length();
  rows.positions.reserve(tree.tokens.size());
  for (int32_t depth : layout->depths())
    rows.positions.push_back(length + depth);
  rows.mask = PackedTreeMask::FromLayout(*layout);
  return rows;
}

absl::Status ValidateRows(const SequenceRows& rows, int cache_length) {
  const int n = rows.size();
  if (n == 0) return absl::InvalidArgumentError("no tokens");
  if (static_cast<int>(rows.positions.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(n, " tokens but ", rows.positions.size(), " positions"));
  }
  if (rows.mask.rows() != n || rows.mask.cols() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask is (", rows.mask.rows(), ", ", rows.mask.cols(),
                     "); want (", n, ", ", n, ")"));
  }
  if (rows.kept_rows() > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        rows.kept_rows(), " kept rows (parents) but only ", n, " tokens"));
  }
  for (int i = 0; i < n; ++i) {
    if (!rows.mask.Get(i, i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", i, " does not attend to itself"));
    }
    if (rows.positions[i] < cache_length) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", i, " has position ", rows.positions[i],
          " inside the committed cache (length ", cache_length, ")"));
    }
  }
  if (rows.kept_rows() == 0) return absl::OkStatus();
  absl::StatusOr<TreeLayout> layout = TreeLayout::Build(rows.parents);
  if (!layout.ok()) return layout.status();
  // Kept rows must be exactly their tree: else a committed path's K/V would
  // depend on rows that are not committed with it.
  for (int i = 0; i < rows.kept_rows(); ++i) {
    if (rows.positions[i] != cache_length + layout->depths()[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kept row ", i, " has position ", rows.positions[i], "; its tree ",
          "depth puts it at ", cache_length + layout->depths()[i]));
    }
    for (int j = 0; j < n; ++j) {
      const bool want = j < rows.kept_rows() && layout->Allowed(i, j);
      if (rows.mask.Get(i, j) != want) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kept row ", i, (want ? " must" : " must not"), " attend to row ",
            j, ": kept rows see exactly their ancestors and themselves"));
      }
    }
  }
  return absl::OkStatus();
}

TreeInput MakeVerifyInput(KvCache* cache, int32_t root_token,
                          const DraftTree& draft) {
  TreeInput input;
  input.cache = cache;
  input.tokens.reserve(draft.tokens.size() + 1);
  input.parents.reserve(draft.parents.size() + 1);
  input.tokens.push_back(root_token);
  input.parents.push_back(-1);
  input.tokens.insert(input.tokens.end(), draft.tokens.begin(),
                      draft.tokens.end());
  for (int32_t p : draft.parents) input.parents.push_back(p + 1);
  return input;
}

TreeInput ChainInput(KvCache* cache, absl::Span<const int32_t> tokens) {
  TreeInput in;
  in.cache = cache;
  in.tokens.assign(tokens.begin(), tokens.end());
  in.parents.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    in.parents.push_back(static_cast<int32_t>(i) - 1);
  }
  in.last_logits_only = true;
  return in;
}

}  // namespace lookahead::engine
