#include "engine/model/draft_tree.h"

#include <algorithm>

namespace lookahead::engine {

const char* DraftSourceName(DraftSourceTag tag) {
  switch (tag) {
    case DraftSourceTag::kTrie:
      return "trie";
    case DraftSourceTag::kNgram:
      return "ngram";
    case DraftSourceTag::kAssistant:
      return "assistant";
    case DraftSourceTag::kUnknown:
      break;
  }
  return "unknown";
}

void TrimDraft(DraftTree* tree, int max_nodes) {
  max_nodes = std::max(max_nodes, 0);
  if (tree->size() <= max_nodes) return;
  tree->tokens.resize(max_nodes);
  tree->parents.resize(max_nodes);
  if (tree->sources.size() > static_cast<size_t>(max_nodes)) {
    tree->sources.resize(max_nodes);
  }
  if (tree->source_sets.size() > static_cast<size_t>(max_nodes)) {
    tree->source_sets.resize(max_nodes);
  }
  if (tree->scores.size() > static_cast<size_t>(max_nodes)) {
    tree->scores.resize(max_nodes);
  }
}

int TrimToValidPrefix(DraftTree* tree, int32_t vocab_size) {
  const int n = std::min(tree->tokens.size(), tree->parents.size());
  int valid = 0;
  while (valid < n && tree->tokens[valid] >= 0 &&
         tree->tokens[valid] < vocab_size && tree->parents[valid] >= -1 &&
         tree->parents[valid] < valid) {
    ++valid;
  }
  if (!tree->sources.empty() &&
      tree->sources.size() < static_cast<size_t>(valid)) {
    tree->sources.clear();  // Tags are optional; a short list is dropped.
  }
  if (!tree->source_sets.empty() &&
      tree->source_sets.size() < static_cast<size_t>(valid)) {
    tree->source_sets.clear();
  }
  if (!tree->scores.empty() &&
      tree->scores.size() < static_cast<size_t>(valid)) {
    tree->scores.clear();
  }
  const int dropped = tree->size() - valid;
  TrimDraft(tree, valid);
  tree->parents.resize(valid);
  return dropped;
}

}  // namespace lookahead::engine
