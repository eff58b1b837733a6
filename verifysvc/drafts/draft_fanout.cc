#include "verifysvc/drafts/draft_fanout.h"

#include <algorithm>
#include <map>
#include <utility>

namespace lookahead::verifysvc {

engine::DraftTree MergeDraftTrees(absl::Span<const engine::DraftTree> trees,
                                  int budget) {
  engine::DraftTree out;
  // (parent in `out`, token) -> node in `out`; parent -1 is the root.
  std::map<std::pair<int32_t, int32_t>, int32_t> children;
  for (const engine::DraftTree& tree : trees) {
    out.source_seconds += tree.source_seconds;
    // Node of `tree` -> node of `out` (-2: not taken, nor its subtree).
    std::vector<int32_t> placed(tree.tokens.size(), -2);
    for (size_t i = 0; i < tree.tokens.size(); ++i) {
      const int32_t p = tree.parents[i];
      const int32_t parent = p < 0 ? -1 : placed[p];
      if (parent == -2) continue;
      auto [it, fresh] = children.try_emplace({parent, tree.tokens[i]}, -1);
      if (fresh) {
        if (out.size() >= budget) {
          children.erase(it);
          continue;
        }
        it->second = out.size();
        out.tokens.push_back(tree.tokens[i]);
        out.parents.push_back(parent);
        out.sources.push_back(i < tree.sources.size()
                                  ? tree.sources[i]
                                  : engine::DraftSourceTag::kUnknown);
        out.source_sets.push_back(tree.SourcesOf(i));
      } else {
        out.source_sets[it->second] |= tree.SourcesOf(i);
      }
      placed[i] = it->second;
    }
  }
  return out;
}

engine::DraftTree MergeScoredDraftTrees(
    absl::Span<const engine::DraftTree> trees, int budget) {
  struct Node {
    int32_t token;
    int32_t parent;
    int depth;
    float score;
    engine::DraftSourceTag source;
    engine::DraftSourceSet sources;
  };
  std::vector<Node> nodes;
  std::map<std::pair<int32_t, int32_t>, int32_t> children;
  double source_seconds = 0;
  for (const engine::DraftTree& tree : trees) {
    source_seconds += tree.source_seconds;
    std::vector<int32_t> placed(tree.tokens.size(), -1);
    for (size_t i = 0; i < tree.tokens.size(); ++i) {
      const int32_t p = tree.parents[i];
      const int32_t parent = p < 0 ? -1 : placed[p];
      auto [it, fresh] =
          children.try_emplace({parent, tree.tokens[i]}, nodes.size());
      if (fresh) {
        nodes.push_back(
            {tree.tokens[i], parent,
             parent < 0 ? 1 : nodes[parent].depth + 1, tree.scores[i],
             i < tree.sources.size() ? tree.sources[i]
                                     : engine::DraftSourceTag::kUnknown,
             tree.SourcesOf(static_cast<int>(i))});
      } else {
        Node& node = nodes[it->second];
        node.score = std::max(node.score, tree.scores[i]);
        node.sources |= tree.SourcesOf(static_cast<int>(i));
      }
      placed[i] = it->second;
    }
  }
  // A node's score is at most its parent's in every tree, so also in the
  // union: best first (ties shallower first) is topological.
  std::vector<int32_t> order(nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (nodes[a].score != nodes[b].score) return nodes[a].score > nodes[b].score;
    return nodes[a].depth < nodes[b].depth;
  });
  engine::DraftTree out;
  out.source_seconds = source_seconds;
  std::vector<int32_t> index(nodes.size(), -1);
  for (int32_t i : order) {
    if (out.size() >= budget) break;
    const Node& node = nodes[i];
    const int32_t parent = node.parent < 0 ? -1 : index[node.parent];
    if (node.parent >= 0 && parent < 0) continue;  // its parent was cut
    index[i] = out.size();
    out.tokens.push_back(node.token);
    out.parents.push_back(parent);
    out.sources.push_back(node.source);
    out.source_sets.push_back(node.sources);
    out.scores.push_back(node.score);
  }
  return out;
}

int64_t DraftFanout::Open(const DraftPolicy& policy,
                          absl::Span<const int32_t> prompt) {
  std::vector<int64_t> per_source;
  bool any = false;
  for (DraftSource* source : sources_) {
    per_source.push_back(source->Open(policy, prompt));
    any = any || per_source.back() != 0;
  }
  if (!any) return 0;
  const int64_t handle = next_handle_++;
  handles_[handle] = std::move(per_source);
  return handle;
}

void DraftFanout::Observe(int64_t handle, absl::Span<const int32_t> tokens) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (it->second[s] != 0) sources_[s]->Observe(it->second[s], tokens);
  }
}

bool DraftFanout::WantsPredictions(int64_t handle) const {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return false;
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (it->second[s] != 0 && sources_[s]->WantsPredictions(it->second[s])) {
      return true;
    }
  }
  return false;
}

void DraftFanout::ObserveVerified(int64_t handle,
                                  const VerifiedPredictions& predictions) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  for (size_t s = 0; s < sources_.size(); ++s) {
    const int64_t h = it->second[s];
    if (h != 0 && sources_[s]->WantsPredictions(h)) {
      sources_[s]->ObserveVerified(h, predictions);
    }
  }
}

void DraftFanout::ObserveNgrams(int64_t handle,
                                absl::Span<const std::vector<int32_t>> ngrams) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (it->second[s] != 0) sources_[s]->ObserveNgrams(it->second[s], ngrams);
  }
}

absl::Status DraftFanout::Failure(int64_t handle) const {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return absl::OkStatus();
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (it->second[s] == 0) continue;
    absl::Status failure = sources_[s]->Failure(it->second[s]);
    if (!failure.ok()) return failure;
  }
  return absl::OkStatus();
}

bool DraftFanout::OpenAnswered(int64_t handle) const {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return true;
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (it->second[s] != 0 && !sources_[s]->OpenAnswered(it->second[s])) {
      return false;
    }
  }
  return true;
}

void DraftFanout::WaitOpened(int64_t handle, absl::Time deadline) const {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (it->second[s] != 0) sources_[s]->WaitOpened(it->second[s], deadline);
  }
}

std::vector<engine::DraftTree> DraftFanout::Propose(
    absl::Span<const DraftAsk> asks, bool* called) {
  *called = false;
  // per_source[s][i]: source s's tree for asks[i].
  std::vector<std::vector<engine::DraftTree>> per_source(sources_.size());
  // Cascade: per ask, the Propose calls that asked its sequence for tokens
  // before this one.
  std::vector<int64_t> steps_of(asks.size(), 0);
  for (size_t i = 0; cascade_ && i < asks.size(); ++i) {
    if (asks[i].budget > 0) steps_of[i] = asked_steps_[asks[i].handle]++;
  }
  for (size_t s = 0; s < sources_.size(); ++s) {
    std::vector<DraftAsk> mine;
    std::vector<size_t> which;
    for (size_t i = 0; i < asks.size(); ++i) {
      auto it = handles_.find(asks[i].handle);
      if (it == handles_.end() || it->second[s] == 0) continue;
      DraftAsk ask = asks[i];
      ask.handle = it->second[s];
      if (s > 0 && ask.budget > 0) {
        bool covered = false;
        ask.covered_score = 0;
        for (size_t before = 0; before < s; ++before) {
          const engine::DraftTree& tree = per_source[before][i];
          if (tree.empty()) continue;
          covered = true;
          const bool scored = tree.scores.size() == tree.tokens.size();
          for (size_t n = 0; n < tree.tokens.size(); ++n) {
            if (tree.parents[n] < 0) {
              ask.covered_score =
                  std::max(ask.covered_score, scored ? tree.scores[n] : 1.0f);
            }
          }
        }
        if (cascade_) {
          ask.refresh = !covered || steps_of[i] % kCascadeRefresh == 0;
        }
      }
      mine.push_back(ask);
      which.push_back(i);
    }
    per_source[s].resize(asks.size());
    if (mine.empty()) continue;
    bool source_called = false;
    std::vector<engine::DraftTree> trees =
        sources_[s]->Propose(mine, &source_called);
    *called = *called || source_called;
    trees.resize(mine.size());
    for (size_t k = 0; k < which.size(); ++k) {
      per_source[s][which[k]] = std::move(trees[k]);
    }
  }
  std::vector<engine::DraftTree> merged(asks.size());
  for (size_t i = 0; i < asks.size(); ++i) {
    for (auto& source_trees : per_source) {
      engine::TrimToValidPrefix(&source_trees[i], vocab_size_);
    }
    if (sources_.size() == 1) {
      merged[i] = std::move(per_source[0][i]);
      engine::TrimDraft(&merged[i], asks[i].budget);
      continue;
    }
    std::vector<engine::DraftTree> trees;
    bool pending = false;
    for (auto& source_trees : per_source) {
      pending = pending || source_trees[i].pending;
      trees.push_back(std::move(source_trees[i]));
    }
    const bool scored = std::all_of(
        trees.begin(), trees.end(), [](const engine::DraftTree& tree) {
          return tree.scores.size() == tree.tokens.size();
        });
    merged[i] = scored ? MergeScoredDraftTrees(trees, asks[i].budget)
                       : MergeDraftTrees(trees, asks[i].budget);
    merged[i].pending = pending && merged[i].empty();
  }
  return merged;
}

void DraftFanout::Close(int64_t handle) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (it->second[s] != 0) sources_[s]->Close(it->second[s]);
  }
  handles_.erase(it);
  asked_steps_.erase(handle);
}

DraftCost DraftFanout::cost() const {
  DraftCost total;
  for (const DraftSource* source : sources_) {
    const DraftCost c = source->cost();
    total.seconds_per_call += c.seconds_per_call;
    total.seconds_per_token += c.seconds_per_token;
    total.assistant_seconds_per_token = CheaperAssistant(
        total.assistant_seconds_per_token, c.assistant_seconds_per_token);
  }
  return total;
}

std::vector<double> DraftFanout::TakeCallSeconds() {
  std::vector<double> seconds;
  for (DraftSource* source : sources_) {
    std::vector<double> s = source->TakeCallSeconds();
    seconds.insert(seconds.end(), s.begin(), s.end());
  }
  return seconds;
}

DraftSourceStats DraftFanout::Stats() const {
  DraftSourceStats total;
  for (const DraftSource* source : sources_) {
    const DraftSourceStats s = source->Stats();
    total.available = total.available && s.available;
    total.failures += s.failures;
    total.reopened += s.reopened;
    total.open_sessions += s.open_sessions;
    total.model_seconds += s.model_seconds;
    total.model_passes += s.model_passes;
    total.model_gate_runs += s.model_gate_runs;
    total.model_gate_skips += s.model_gate_skips;
  }
  return total;
}

}  // namespace lookahead::verifysvc
