#include "draftsvc/mix/draft_tree_builder.h"

#include <algorithm>
#include <queue>

namespace lookahead::draftsvc {
namespace {

using NodeId = TokenTrie::NodeId;

// A frontier entry: the `sibling`-th child (`node`) of `trie_parent` in
// source `src`, to be placed below output node `out_parent` at `depth`.
struct Frontier {
  float score;
  NodeId node;
  NodeId trie_parent;
  uint32_t sibling;
  int32_t out_parent;
  int32_t depth;
  int32_t token;
  uint8_t src;
};

// Max-heap order: higher score, then shallower, then earlier source, then
// lower token (deterministic output).
struct FrontierLess {
  bool operator()(const Frontier& a, const Frontier& b) const {
    if (a.score != b.score) return a.score < b.score;
    if (a.depth != b.depth) return a.depth > b.depth;
    if (a.src != b.src) return a.src > b.src;
    return a.token > b.token;
  }
};

// The hierarchical tree under construction, with child lists for merging
// equal token paths.
class TreeAccumulator {
 public:
  explicit TreeAccumulator(int32_t budget) {
    nodes_.reserve(budget);
    first_child_.reserve(budget);
    next_sibling_.reserve(budget);
  }

  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }

  // The child of `parent` (-1: root) carrying `token`, or -1.
  int32_t FindChild(int32_t parent, int32_t token) const {
    int32_t c = parent < 0 ? root_first_ : first_child_[parent];
    while (c >= 0 && nodes_[c].token != token) c = next_sibling_[c];
    return c;
  }

  int32_t Add(int32_t parent, int32_t token, int32_t depth, CandidateSource src,
              float score, int32_t match) {
    const int32_t id = size();
    nodes_.push_back(DraftNode{token, parent, depth, src, score});
    nodes_.back().matches[static_cast<int>(src)] =
        static_cast<uint8_t>(std::min(match, 255));
    first_child_.push_back(-1);
    int32_t& head = parent < 0 ? root_first_ : first_child_[parent];
    next_sibling_.push_back(head);
    head = id;
    return id;
  }

  std::vector<DraftNode> Release() { return std::move(nodes_); }

 private:
  std::vector<DraftNode> nodes_;
  std::vector<int32_t> first_child_;
  std::vector<int32_t> next_sibling_;
  int32_t root_first_ = -1;
};

Frontier MakeFrontier(const TokenTrie& trie, float boost, NodeId trie_parent,
                      uint32_t sibling, int32_t out_parent, int32_t depth,
                      uint8_t src) {
  const NodeId node = trie.ChildAt(trie_parent, sibling);
  return Frontier{static_cast<float>(trie.count(node)) * boost,
                  node,
                  trie_parent,
                  sibling,
                  out_parent,
                  depth,
                  trie.token(node),
                  src};
}

std::vector<DraftNode> BuildHierarchical(absl::Span<const TrieSource> sources,
                                         const DraftRequest& request) {
  const int32_t budget = request.decoding_length;
  TreeAccumulator tree(budget);
  std::vector<Frontier> heap;
  heap.reserve(2 * static_cast<size_t>(budget) + 2 * sources.size());
  const FrontierLess less;
  const int32_t kmax = std::min<int32_t>(
      static_cast<int32_t>(request.context.size()), request.max_match_length);
  for (int32_t k = kmax; k >= 1 && tree.size() < budget; --k) {
    const auto suffix = request.context.subspan(request.context.size() - k);
    heap.clear();
    for (size_t s = 0; s < sources.size(); ++s) {
      const TokenTrie* trie = sources[s].trie;
      if (trie == nullptr) continue;
      const NodeId match = trie->Find(suffix);
      if (match == TokenTrie::kNoNode || trie->NumChildren(match) == 0) {
        continue;
      }
      heap.push_back(MakeFrontier(*trie, sources[s].boost, match, 0, -1, 1,
                                  static_cast<uint8_t>(s)));
      std::push_heap(heap.begin(), heap.end(), less);
    }
    while (!heap.empty() && tree.size() < budget) {
      std::pop_heap(heap.begin(), heap.end(), less);
      const Frontier e = heap.back();
      heap.pop_back();
      const TrieSource& source = sources[e.src];
      const TokenTrie& trie = *source.trie;
      if (e.sibling + 1 < trie.NumChildren(e.trie_parent)) {
        heap.push_back(MakeFrontier(trie, source.boost, e.trie_parent,
                                    e.sibling + 1, e.out_parent, e.depth,
                                    e.src));
        std::push_heap(heap.begin(), heap.end(), less);
      }
      int32_t out = tree.FindChild(e.out_parent, e.token);
      if (out < 0) {
        out = tree.Add(e.out_parent, e.token, e.depth, source.source, e.score,
                       k);
      }
      if (e.depth < request.branch_length && trie.NumChildren(e.node) > 0) {
        heap.push_back(MakeFrontier(trie, source.boost, e.node, 0, out,
                                    e.depth + 1, e.src));
        std::push_heap(heap.begin(), heap.end(), less);
      }
    }
  }
  return tree.Release();
}

}  // namespace

std::vector<DraftNode> LayOutAsChains(const std::vector<DraftNode>& tree,
                                      int32_t budget) {
  const int32_t n = static_cast<int32_t>(tree.size());
  std::vector<bool> has_child(n, false);
  for (const DraftNode& node : tree) {
    if (node.parent >= 0) has_child[node.parent] = true;
  }
  std::vector<int32_t> leaves;
  for (int32_t i = 0; i < n; ++i) {
    if (!has_child[i]) leaves.push_back(i);
  }
  std::stable_sort(leaves.begin(), leaves.end(), [&](int32_t a, int32_t b) {
    return tree[a].score > tree[b].score;
  });
  std::vector<DraftNode> out;
  out.reserve(budget);
  std::vector<int32_t> chain;
  for (int32_t leaf : leaves) {
    const int32_t room = budget - static_cast<int32_t>(out.size());
    if (room <= 0) break;
    chain.clear();
    for (int32_t v = leaf; v >= 0; v = tree[v].parent) chain.push_back(v);
    std::reverse(chain.begin(), chain.end());
    if (static_cast<int32_t>(chain.size()) > room) chain.resize(room);
    int32_t parent = -1;
    for (int32_t v : chain) {
      DraftNode node = tree[v];
      node.parent = parent;
      parent = static_cast<int32_t>(out.size());
      out.push_back(node);
    }
  }
  return out;
}

MixedDraft BuildTrieDraft(absl::Span<const TrieSource> sources,
                         const DraftRequest& request) {
  MixedDraft result;
  if (request.mode == DraftMode::kOff || request.decoding_length <= 0 ||
      request.branch_length < 1 || request.max_match_length < 1 ||
      request.context.empty()) {
    return result;
  }
  result.nodes = BuildHierarchical(sources, request);
  if (request.mode == DraftMode::kParallel) {
    result.nodes = LayOutAsChains(result.nodes, request.decoding_length);
  }
  return result;
}

}  // namespace lookahead::draftsvc
