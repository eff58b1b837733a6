#include "verifysvc/drafts/recycled_source.h"

#include <algorithm>

namespace lookahead::verifysvc {

int64_t RecycledSource::Open(const DraftPolicy& policy,
                             absl::Span<const int32_t> prompt) {
  if (!policy.enabled() || !policy.MayUse(engine::DraftSourceTag::kNgram) ||
      prompt.empty()) {
    return 0;
  }
  const int64_t handle = next_handle_++;
  Sequence& sequence = sequences_[handle];
  if (policy.branch_length > 0) {
    sequence.depth = std::min(policy.branch_length, kMaxDepth);
  }
  sequence.last = prompt.back();
  return handle;
}

bool RecycledSource::WantsPredictions(int64_t handle) const {
  return sequences_.count(handle) > 0;
}

void RecycledSource::Record(int32_t token, const int32_t* top, int k) {
  if (token < 0) return;
  const size_t at = static_cast<size_t>(token) * kKeep;
  if (successors_.size() < at + kKeep) {
    successors_.resize(at + kKeep, kNone);
  }
  for (int r = 0; r < kKeep; ++r) successors_[at + r] = r < k ? top[r] : kNone;
}

void RecycledSource::ObserveVerified(int64_t handle,
                                     const VerifiedPredictions& predictions) {
  auto it = sequences_.find(handle);
  if (it == sequences_.end() || predictions.k < 1) return;
  const int k = predictions.k;
  const size_t rows = predictions.tokens.size() + 1;
  if (predictions.top_tokens.size() < rows * k) return;
  // Row 0 follows the root (the sequence's last token), row i + 1 node i.
  Record(it->second.last, predictions.top_tokens.data(), k);
  for (size_t i = 0; i < predictions.tokens.size(); ++i) {
    Record(predictions.tokens[i], predictions.top_tokens.data() + (i + 1) * k,
           k);
  }
}

std::array<int32_t, RecycledSource::kKeep> RecycledSource::Successors(
    int32_t token) const {
  std::array<int32_t, kKeep> out;
  out.fill(kNone);
  const size_t at = static_cast<size_t>(token) * kKeep;
  if (token < 0 || successors_.size() < at + kKeep) return out;
  std::copy_n(successors_.begin() + at, kKeep, out.begin());
  return out;
}

double RecycledSource::Rate(int depth, int rank) const {
  const int i = rank > 0 ? kMaxDepth : std::clamp(depth, 1, kMaxDepth) - 1;
  return (hits_[i] + kPriorHits) / (tries_[i] + kPriorTries);
}

void RecycledSource::Judge(const Sequence& sequence,
                           absl::Span<const int32_t> emitted) {
  if (emitted.empty()) return;
  if (sequence.second != kNone) {
    tries_[kMaxDepth] += 1;
    if (emitted[0] == sequence.second) hits_[kMaxDepth] += 1;
  }
  const size_t n = std::min(sequence.chain.size(), emitted.size());
  for (size_t d = 0; d < n; ++d) {
    tries_[d] += 1;
    if (sequence.chain[d] != emitted[d]) break;
    hits_[d] += 1;
  }
}

void RecycledSource::Observe(int64_t handle, absl::Span<const int32_t> tokens) {
  auto it = sequences_.find(handle);
  if (it == sequences_.end() || tokens.empty()) return;
  Sequence& sequence = it->second;
  Judge(sequence, tokens);
  sequence.chain.clear();
  sequence.second = kNone;
  sequence.last = tokens.back();
}

std::vector<engine::DraftTree> RecycledSource::Propose(
    absl::Span<const DraftAsk> asks, bool* called) {
  *called = false;  // a table lookup: nothing worth timing
  std::vector<engine::DraftTree> trees(asks.size());
  const engine::DraftSourceSet bit =
      engine::SourceBit(engine::DraftSourceTag::kNgram);
  for (size_t i = 0; i < asks.size(); ++i) {
    auto it = sequences_.find(asks[i].handle);
    // A fallback: it drafts where the sources before it left the sequence
    // without a tree this step (and on the cascade's periodic refresh),
    // so its nodes never displace theirs in the scored merge.
    if (it == sequences_.end() || asks[i].budget <= 0 ||
        (asks[i].withheld & bit) != 0 || !asks[i].refresh) {
      continue;
    }
    Sequence& sequence = it->second;
    // The chain of top-1 successors, judged as far as the depth allows
    // whatever the budget, and the second-best first node.
    const std::array<int32_t, kKeep> first = Successors(sequence.last);
    sequence.chain.clear();
    for (int32_t token = first[0];
         token != kNone &&
         static_cast<int>(sequence.chain.size()) < sequence.depth;
         token = Successors(token)[0]) {
      sequence.chain.push_back(token);
    }
    sequence.second =
        sequence.chain.empty() || first[1] == first[0] ? kNone : first[1];
    // Best first within the budget: the chain's scores fall with depth, so
    // the second-best node goes before the first chain node scoring below
    // it, and the order stays topological.
    engine::DraftTree& tree = trees[i];
    auto add = [&](int32_t token, int32_t parent, double score) {
      if (tree.size() == asks[i].budget) return;
      tree.tokens.push_back(token);
      tree.parents.push_back(parent);
      tree.sources.push_back(engine::DraftSourceTag::kNgram);
      tree.scores.push_back(static_cast<float>(score));
    };
    const double second = Rate(1, 1);
    bool second_added = sequence.second == kNone;
    int32_t parent = -1;
    double score = 1;
    for (size_t d = 0; d < sequence.chain.size(); ++d) {
      score *= Rate(static_cast<int>(d) + 1);
      if (!second_added && score < second) {
        add(sequence.second, -1, second);
        second_added = true;
      }
      add(sequence.chain[d], parent, score);
      parent = tree.size() - 1;
    }
    if (!second_added) add(sequence.second, -1, second);
  }
  return trees;
}

void RecycledSource::Close(int64_t handle) { sequences_.erase(handle); }

DraftSourceStats RecycledSource::Stats() const {
  DraftSourceStats stats;
  stats.open_sessions = static_cast<int64_t>(sequences_.size());
  return stats;
}

}  // namespace lookahead::verifysvc
