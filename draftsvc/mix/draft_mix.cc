#include "draftsvc/mix/draft_mix.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace lookahead::draftsvc {
namespace {

// A pending n-gram candidate: the rest of the continuations that proposed
// it, each with its count.
using Tails = std::vector<std::pair<std::vector<int32_t>, int64_t>>;

struct Pending {
  float p;
  int32_t depth;
  int32_t token;
  int32_t parent;  // Output index; -1 = root.
  int32_t rank;
  int32_t match;  // Longest pool key behind it (NgramMatch::key_length).
  int32_t id;     // Index into the tails store (unique: the last tie-break).
};

// Max-heap order: higher p, then shallower, then smaller token, then first
// made (deterministic).
struct PendingLess {
  bool operator()(const Pending& a, const Pending& b) const {
    if (a.p != b.p) return a.p < b.p;
    if (a.depth != b.depth) return a.depth > b.depth;
    if (a.token != b.token) return a.token > b.token;
    return a.id > b.id;
  }
};

// NgramCandidates' best-first expansion: output nodes in `out`, their
// pending children in a heap by p, each with the continuation tails that
// proposed it (stored by Pending::id).
class NgramExpander {
 public:
  NgramExpander(absl::Span<const NgramPool* const> pools,
                absl::Span<const int32_t> context,
                const CalibrationTable& rates, int32_t per_node,
                CandidateTree* out)
      : pools_(pools),
        rates_(rates),
        per_node_(per_node),
        out_(out),
        extended_(context.begin(), context.end()),
        context_size_(extended_.size()) {}

  // Takes the best pending child as output node and expands it while it is
  // shallower than branch_length, until `budget` nodes are out or none is
  // pending.
  void Run(int32_t budget, int32_t branch_length) {
    Expand(-1, 1, 1.0f, Tails(), 0);
    while (!heap_.empty() &&
           static_cast<int32_t>(out_->nodes.size()) < budget) {
      const Pending e = heap_.top();
      heap_.pop();
      const int32_t index = static_cast<int32_t>(out_->nodes.size());
      out_->nodes.push_back(CandidateNode{e.token, e.parent, e.rank, e.match});
      if (e.depth < branch_length) {
        Expand(index, e.depth + 1, e.p, std::move(tails_[e.id]), e.match);
      }
    }
  }

 private:
  // A child's evidence is the longest key behind it: the rest of an
  // n-gram keeps the key it was stored under, as a trie branch keeps its
  // match length (a 4-token key is accepted far more often than a
  // 1-token one; the calibration learns by how much).
  struct Child {
    int32_t token;
    Tails tails;
    int32_t match;
  };

  // Pushes the children of output node `parent` (-1: root) whose
  // probability is `p` and whose own continuation tails are `own`, stored
  // under a key of `own_match` tokens.
  void Expand(int32_t parent, int32_t depth, float p, Tails own,
              int32_t own_match) {
    std::vector<Child> children = ChildrenOf(parent, std::move(own), own_match);
    for (size_t r = 0; r < children.size(); ++r) {
      const int32_t rank = static_cast<int32_t>(r);
      const int32_t match = children[r].match;
      const float child_p =
          p * rates_.rate(CandidateSource::kNgram, depth, rank, match);
      const int32_t id = static_cast<int32_t>(tails_.size());
      tails_.push_back(std::move(children[r].tails));
      heap_.push(
          Pending{child_p, depth, children[r].token, parent, rank, match, id});
    }
  }

  // The children of `parent` in rank order: its own tails (by count), then
  // the pools' continuations of the context extended by its path.
  std::vector<Child> ChildrenOf(int32_t parent, Tails own, int32_t own_match) {
    // The path of `parent` after the context.
    extended_.resize(context_size_);
    std::vector<int32_t> path;
    for (int32_t v = parent; v >= 0; v = out_->nodes[v].parent) {
      path.push_back(out_->nodes[v].token);
    }
    extended_.insert(extended_.end(), path.rbegin(), path.rend());
    std::stable_sort(own.begin(), own.end(), [](const auto& a, const auto& b) {
      return a.second > b.second;
    });
    std::vector<Child> children;
    for (const auto& [continuation, count] : own) {
      AddChild(continuation, count, own_match, &children);
    }
    for (const NgramPool* pool : pools_) {
      if (pool == nullptr) continue;
      for (const NgramMatch& m : pool->Lookup(extended_, per_node_)) {
        AddChild(m.continuation, m.count, m.key_length, &children);
      }
    }
    return children;
  }

  // Merges `continuation` into the child of its first token.
  static void AddChild(absl::Span<const int32_t> continuation, int64_t count,
                       int32_t match, std::vector<Child>* children) {
    const int32_t token = continuation[0];
    auto it = std::find_if(children->begin(), children->end(),
                           [&](const Child& c) { return c.token == token; });
    if (it == children->end()) {
      children->push_back(Child{token, Tails(), match});
      it = children->end() - 1;
    }
    it->match = std::max(it->match, match);
    if (continuation.size() > 1) {
      it->tails.emplace_back(
          std::vector<int32_t>(continuation.begin() + 1, continuation.end()),
          count);
    }
  }

  const absl::Span<const NgramPool* const> pools_;
  const CalibrationTable& rates_;
  const int32_t per_node_;
  CandidateTree* const out_;
  std::vector<Tails> tails_;  // By Pending::id.
  std::priority_queue<Pending, std::vector<Pending>, PendingLess> heap_;
  std::vector<int32_t> extended_;  // The context, then a node's path.
  const size_t context_size_;
};

// A node of MixDrafts' union of every candidate tree, equal token paths
// merged.
struct MixNode {
  int32_t token;
  int32_t parent;
  int32_t depth;
  uint32_t source_set = 0;
  std::array<uint8_t, kNumCandidateSources> ranks{kNoRank, kNoRank, kNoRank,
                                                  kNoRank};
  std::array<uint8_t, kNumCandidateSources> matches{0, 0, 0, 0};
  std::vector<int32_t> children;
};

struct MixUnion {
  std::vector<MixNode> nodes;
  std::vector<int32_t> root_children;
};

// The union of `candidates`' nodes at most `branch_length` deep; a node
// whose parent is not before it, or was dropped, is dropped.
MixUnion MergeCandidates(absl::Span<const CandidateTree> candidates,
                         int32_t branch_length) {
  MixUnion u;
  std::vector<MixNode>& nodes = u.nodes;
  absl::flat_hash_map<uint64_t, int32_t> by_path;  // (parent + 1, token)
  constexpr int32_t kDropped = -2;
  for (const CandidateTree& tree : candidates) {
    const int s = static_cast<int>(tree.source);
    std::vector<int32_t> mapped(tree.nodes.size(), kDropped);
    for (size_t i = 0; i < tree.nodes.size(); ++i) {
      const CandidateNode& c = tree.nodes[i];
      if (c.parent >= static_cast<int32_t>(i) || c.parent < -1) continue;
      const int32_t parent = c.parent < 0 ? -1 : mapped[c.parent];
      if (parent == kDropped) continue;
      const int32_t depth = parent < 0 ? 1 : nodes[parent].depth + 1;
      if (depth > branch_length) continue;
      const uint64_t key = (static_cast<uint64_t>(parent + 1) << 32) |
                           static_cast<uint32_t>(c.token);
      auto [it, inserted] =
          by_path.emplace(key, static_cast<int32_t>(nodes.size()));
      if (inserted) {
        nodes.push_back(MixNode{c.token, parent, depth});
        (parent < 0 ? u.root_children : nodes[parent].children)
            .push_back(it->second);
      }
      MixNode& node = nodes[it->second];
      node.source_set |= uint32_t{1} << s;
      const uint8_t rank = static_cast<uint8_t>(std::clamp(c.rank, 0, 254));
      node.ranks[s] = std::min(node.ranks[s], rank);
      node.matches[s] = std::max(
          node.matches[s], static_cast<uint8_t>(std::clamp(c.match, 0, 255)));
      mapped[i] = it->second;
    }
  }
  return u;
}

// The chance that at least one of the node's sources is right:
// 1 - prod(1 - rate).
float AnySourceRate(const MixNode& node, const CalibrationTable& rates) {
  float miss = 1.0f;
  for (int s = 0; s < kNumCandidateSources; ++s) {
    if ((node.source_set >> s & 1) == 0) continue;
    miss *= 1.0f - rates.rate(static_cast<CandidateSource>(s), node.depth,
                              node.ranks[s], node.matches[s]);
  }
  return 1.0f - miss;
}

// The output node of `node`, scored `p`, under output node `out_parent`;
// its source is the one of highest rate.
DraftNode ToDraftNode(const MixNode& node, float p, int32_t out_parent,
                      const CalibrationTable& rates) {
  DraftNode d;
  d.token = node.token;
  d.parent = out_parent;
  d.depth = node.depth;
  d.score = p;
  d.source_set = node.source_set;
  d.ranks = node.ranks;
  d.matches = node.matches;
  float best = -1.0f;
  for (int s = 0; s < kNumCandidateSources; ++s) {
    if ((node.source_set >> s & 1) == 0) continue;
    const CandidateSource source = static_cast<CandidateSource>(s);
    const float r =
        rates.rate(source, node.depth, node.ranks[s], node.matches[s]);
    if (r > best) {
      best = r;
      d.source = source;
    }
  }
  return d;
}

// MixDrafts' pending node: max-heap order by p, then shallower, then
// smaller token, then first merged.
struct MixEntry {
  float p;
  int32_t depth;
  int32_t token;
  int32_t node;
  int32_t out_parent;
};
struct MixEntryLess {
  bool operator()(const MixEntry& a, const MixEntry& b) const {
    if (a.p != b.p) return a.p < b.p;
    if (a.depth != b.depth) return a.depth > b.depth;
    if (a.token != b.token) return a.token > b.token;
    return a.node > b.node;
  }
};

}  // namespace

CandidateTree RankedCandidates(CandidateSource source,
                               absl::Span<const int32_t> tokens,
                               absl::Span<const int32_t> parents,
                               absl::Span<const float> scores) {
  CandidateTree out;
  out.source = source;
  const int32_t n = static_cast<int32_t>(tokens.size());
  // children[parent + 1]: the node's children in input order; index[i]:
  // node i's index in `out` (-1: dropped).
  std::vector<std::vector<int32_t>> children(n + 1);
  std::vector<int32_t> index(n, -1);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t p = parents[i];
    if (p < -1 || p >= i || (p >= 0 && index[p] < 0)) continue;
    index[i] = static_cast<int32_t>(out.nodes.size());
    out.nodes.push_back({tokens[i], p < 0 ? -1 : index[p], 0});
    children[p + 1].push_back(i);
  }
  for (std::vector<int32_t>& siblings : children) {
    std::stable_sort(
        siblings.begin(), siblings.end(),
        [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
    for (size_t r = 0; r < siblings.size(); ++r) {
      out.nodes[index[siblings[r]]].rank = static_cast<int32_t>(r);
    }
  }
  return out;
}

CandidateTree TrieCandidates(const MixedDraft& draft, CandidateSource source) {
  std::vector<int32_t> tokens, parents;
  std::vector<float> scores;
  for (const DraftNode& node : draft.nodes) {
    tokens.push_back(node.token);
    parents.push_back(node.parent);
    scores.push_back(node.score);
  }
  CandidateTree out = RankedCandidates(source, tokens, parents, scores);
  // RankedCandidates keeps every node of a valid tree, in order.
  const int s = static_cast<int>(source);
  for (size_t i = 0; i < out.nodes.size() && i < draft.nodes.size(); ++i) {
    out.nodes[i].match = draft.nodes[i].matches[s];
  }
  return out;
}

CandidateTree NgramCandidates(absl::Span<const NgramPool* const> pools,
                              absl::Span<const int32_t> context,
                              const CalibrationTable& rates, int32_t budget,
                              int32_t branch_length, int32_t per_node) {
  CandidateTree out;
  out.source = CandidateSource::kNgram;
  if (budget <= 0 || branch_length < 1 || context.empty()) return out;
  NgramExpander(pools, context, rates, per_node, &out)
      .Run(budget, branch_length);
  return out;
}

MixedDraft MixDrafts(absl::Span<const CandidateTree> candidates,
                     const CalibrationTable& rates, const MixRequest& request) {
  MixedDraft result;
  if (request.mode == DraftMode::kOff || request.decoding_length <= 0 ||
      request.branch_length < 1) {
    return result;
  }
  const MixUnion merged = MergeCandidates(candidates, request.branch_length);

  // Best-first selection by p; a node's children enter once it is taken.
  std::priority_queue<MixEntry, std::vector<MixEntry>, MixEntryLess> heap;
  auto push = [&](int32_t v, float parent_p, int32_t out_parent) {
    const MixNode& node = merged.nodes[v];
    heap.push(MixEntry{parent_p * AnySourceRate(node, rates), node.depth,
                       node.token, v, out_parent});
  };
  for (int32_t v : merged.root_children) push(v, 1.0f, -1);
  std::vector<DraftNode>& out = result.nodes;
  while (!heap.empty() &&
         static_cast<int32_t>(out.size()) < request.decoding_length) {
    const MixEntry e = heap.top();
    heap.pop();
    const MixNode& node = merged.nodes[e.node];
    const int32_t index = static_cast<int32_t>(out.size());
    out.push_back(ToDraftNode(node, e.p, e.out_parent, rates));
    for (int32_t child : node.children) push(child, e.p, index);
  }
  if (request.mode == DraftMode::kParallel) {
    result.nodes = LayOutAsChains(result.nodes, request.decoding_length);
  }
  return result;
}

}  // namespace lookahead::draftsvc
