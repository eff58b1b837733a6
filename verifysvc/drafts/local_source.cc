#include "verifysvc/drafts/local_source.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

namespace lookahead::verifysvc {
namespace {

// The k-gram of `context` ending before `end` as one 64-bit key (equal
// k-grams give equal keys; a collision is caught by comparing tokens).
uint64_t KeyOf(const std::vector<int32_t>& context, size_t end, int k) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(k);
  for (size_t i = end - k; i < end; ++i) {
    h ^= static_cast<uint32_t>(context[i]);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  return h;
}

bool SameGram(const std::vector<int32_t>& context, size_t a, size_t b, int k) {
  return std::equal(context.begin() + (a - k), context.begin() + a,
                    context.begin() + (b - k));
}

}  // namespace

int64_t LocalSource::Open(const DraftPolicy& policy,
                          absl::Span<const int32_t> prompt) {
  if (!policy.enabled() || !policy.MayUse(engine::DraftSourceTag::kTrie)) {
    return 0;
  }
  const int64_t handle = next_handle_++;
  Sequence& sequence = sequences_[handle];
  if (policy.branch_length > 0) sequence.depth = policy.branch_length;
  Append(&sequence, prompt);
  return handle;
}

void LocalSource::Append(Sequence* sequence,
                         absl::Span<const int32_t> tokens) {
  std::vector<int32_t>& context = sequence->context;
  for (int32_t token : tokens) {
    context.push_back(token);
    const size_t end = context.size();
    for (int k = 1; k <= kMaxKey && static_cast<size_t>(k) <= end; ++k) {
      sequence->index[k - 1][KeyOf(context, end, k)].push_back(
          static_cast<int32_t>(end));
    }
  }
}

void LocalSource::Observe(int64_t handle, absl::Span<const int32_t> tokens) {
  auto it = sequences_.find(handle);
  if (it == sequences_.end()) return;
  Sequence& sequence = it->second;
  if (!sequence.last.empty()) Judge(sequence, tokens);
  sequence.last = {};
  Append(&sequence, tokens);
}

double LocalSource::Rate(int key, int depth) const {
  const int k = std::clamp(key, 1, kMaxKey) - 1;
  const int d = std::clamp(depth, 1, kMaxDepth) - 1;
  return (hits_[k][d] + kPriorHits) / (tries_[k][d] + kPriorTries);
}

void LocalSource::Judge(const Sequence& sequence,
                        absl::Span<const int32_t> emitted) {
  const engine::DraftTree& tree = sequence.last;
  const int k = sequence.last_key - 1;
  int at = -1;
  for (size_t d = 0; d < emitted.size(); ++d) {
    int match = -1;
    bool any_child = false;
    for (int i = at + 1; i < tree.size(); ++i) {
      if (tree.parents[i] != at) continue;
      any_child = true;
      if (tree.tokens[i] == emitted[d]) {
        match = i;
        break;
      }
    }
    if (!any_child) return;  // The tree proposed nothing here.
    const int depth = std::min<int>(static_cast<int>(d), kMaxDepth - 1);
    tries_[k][depth] += 1;
    if (match < 0) return;
    hits_[k][depth] += 1;
    at = match;
  }
}

engine::DraftTree LocalSource::Draft(const Sequence& sequence, int budget,
                                     int* key) const {
  const std::vector<int32_t>& context = sequence.context;
  const size_t end = context.size();
  // The latest occurrences of the longest suffix seen before.
  std::vector<int32_t> starts;
  for (int k = std::min<int>(kMaxKey, static_cast<int>(end) - 1); k >= 1;
       --k) {
    auto it = sequence.index[k - 1].find(KeyOf(context, end, k));
    if (it == sequence.index[k - 1].end()) continue;
    const std::vector<int32_t>& at = it->second;
    for (auto p = at.rbegin();
         p != at.rend() && static_cast<int>(starts.size()) < kMaxOccurrences;
         ++p) {
      if (static_cast<size_t>(*p) >= end) continue;  // the suffix itself
      if (!SameGram(context, *p, end, k)) continue;  // a key collision
      starts.push_back(*p);
    }
    if (!starts.empty()) {
      *key = k;
      break;
    }
  }
  if (starts.empty()) return {};

  // Their continuations as one trie, with how many went through each node.
  struct Node {
    int32_t token;
    int parent;
    int depth;
    int count = 0;
    double score = 0;
  };
  std::vector<Node> nodes;
  std::map<std::pair<int, int32_t>, int> child;
  std::vector<int> below(1, 0);  // per node + 1 (0: the root): its children's counts
  for (int32_t start : starts) {
    int at = -1;
    for (int j = 0; j < sequence.depth && start + j < static_cast<int>(end);
         ++j) {
      const int32_t token = context[start + j];
      auto [c, fresh] = child.try_emplace({at, token}, nodes.size());
      if (fresh) {
        nodes.push_back({token, at, j + 1});
        below.push_back(0);
      }
      ++nodes[c->second].count;
      ++below[at + 1];
      at = c->second;
    }
  }
  for (Node& node : nodes) {  // parents come first
    const double parent = node.parent < 0 ? 1.0 : nodes[node.parent].score;
    node.score = parent * Rate(*key, node.depth) * node.count /
                 below[node.parent + 1];
  }
  // Best first; a child never scores above its parent, and ties go to the
  // shallower node, so the order is topological.
  std::vector<int> order(nodes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (nodes[a].score != nodes[b].score) {
      return nodes[a].score > nodes[b].score;
    }
    return nodes[a].depth < nodes[b].depth;
  });
  if (static_cast<int>(order.size()) > budget) order.resize(budget);
  std::vector<int> placed(nodes.size(), -1);
  engine::DraftTree tree;
  for (int i : order) {
    const Node& node = nodes[i];
    const int parent = node.parent < 0 ? -1 : placed[node.parent];
    if (node.parent >= 0 && parent < 0) continue;  // cannot happen; be safe
    placed[i] = tree.size();
    tree.tokens.push_back(node.token);
    tree.parents.push_back(parent);
    tree.sources.push_back(engine::DraftSourceTag::kTrie);
    tree.scores.push_back(static_cast<float>(node.score));
  }
  return tree;
}

std::vector<engine::DraftTree> LocalSource::Propose(
    absl::Span<const DraftAsk> asks, bool* called) {
  *called = false;  // microseconds: nothing worth timing
  std::vector<engine::DraftTree> trees(asks.size());
  for (size_t i = 0; i < asks.size(); ++i) {
    auto it = sequences_.find(asks[i].handle);
    if (it == sequences_.end() || asks[i].budget <= 0) continue;
    Sequence& sequence = it->second;
    if ((asks[i].withheld & engine::SourceBit(engine::DraftSourceTag::kTrie)) !=
        0) {
      continue;
    }
    int key = 0;
    // Judged on a larger tree than asked: the calibration sees every depth
    // the budget might reach next time.
    sequence.last = Draft(sequence, std::max(asks[i].budget, 2 * kMaxDepth),
                          &key);
    sequence.last_key = key;
    trees[i] = sequence.last;
    engine::TrimDraft(&trees[i], asks[i].budget);
  }
  return trees;
}

void LocalSource::Close(int64_t handle) { sequences_.erase(handle); }

DraftSourceStats LocalSource::Stats() const {
  DraftSourceStats stats;
  stats.open_sessions = static_cast<int64_t>(sequences_.size());
  return stats;
}

}  // namespace lookahead::verifysvc
