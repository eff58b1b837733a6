#include "engine/model/draft_tree.h"

#include <algorithm>

namespace lookahead::engine {

void TrimDraft(DraftTree* tree, int max_nodes) {
  max_nodes = std::max(max_nodes, 0);
  if (tree->size() <= max_nodes) return;
  tree->tokens.resize(max_nodes);
  tree->parents.resize(max_nodes);
  if (tree->sources.size() > static_cast<size_t>(max_nodes)) {
    tree->sources.resize(max_nodes);
  }
}

}  // namespace lookahead::engine
