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
  if (prompt.size() >= 2) sequence.before = prompt[prompt.size() - 2];
  return handle;
}

bool RecycledSource::WantsPredictions(int64_t handle) const {
  return sequences_.count(handle) > 0;
}

uint64_t RecycledSource::PairKey(int32_t before, int32_t token) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(before)) << 32) |
         static_cast<uint32_t>(token);
}

size_t RecycledSource::PairSlotOf(uint64_t key) {
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - kPairBits));
}

void RecycledSource::Record(int32_t before, int32_t token, const int32_t* top,
                            int k) {
  if (token < 0) return;
  std::array<int32_t, kKeep> next;
  for (int r = 0; r < kKeep; ++r) next[r] = r < k ? top[r] : kNone;
  const size_t at = static_cast<size_t>(token) * kKeep;
  if (successors_.size() < at + kKeep) {
    successors_.resize(at + kKeep, kNone);
  }
  std::copy(next.begin(), next.end(), successors_.begin() + at);
  if (before < 0) return;
  if (pairs_.empty()) pairs_.resize(size_t{1} << kPairBits);
  const uint64_t key = PairKey(before, token);
  PairSlot& slot = pairs_[PairSlotOf(key)];
  slot.key = key;
  slot.next = next;
}

void RecycledSource::ObserveVerified(int64_t handle,
                                     const VerifiedPredictions& predictions) {
  auto it = sequences_.find(handle);
  if (it == sequences_.end() || predictions.k < 1) return;
  const int k = predictions.k;
  const size_t rows = predictions.tokens.size() + 1;
  if (predictions.top_tokens.size() < rows * k) return;
  // Row 0 follows the root (the sequence's last token), row i + 1 node i,
  // whose context ends with its parent's token.
  const Sequence& sequence = it->second;
  Record(sequence.before, sequence.last, predictions.top_tokens.data(), k);
  for (size_t i = 0; i < predictions.tokens.size(); ++i) {
    const int32_t parent = predictions.parents[i];
    const int32_t before =
        parent < 0 ? sequence.last : predictions.tokens[parent];
    Record(before, predictions.tokens[i],
           predictions.top_tokens.data() + (i + 1) * k, k);
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

std::array<int32_t, RecycledSource::kKeep> RecycledSource::Successors(
    int32_t before, int32_t token) const {
  std::array<int32_t, kKeep> out;
  out.fill(kNone);
  if (before < 0 || token < 0 || pairs_.empty()) return out;
  const uint64_t key = PairKey(before, token);
  const PairSlot& slot = pairs_[PairSlotOf(key)];
  return slot.key == key ? slot.next : out;
}

std::array<int32_t, RecycledSource::kKeep> RecycledSource::Next(
    int32_t before, int32_t token, Lookup* lookup) const {
  std::array<int32_t, kKeep> next = Successors(before, token);
  *lookup = kByPair;
  if (next[0] == kNone) {
    next = Successors(token);
    *lookup = kByToken;
  }
  return next;
}

int RecycledSource::RateIndex(int depth, int rank, Lookup lookup) {
  return lookup * (kMaxDepth + 1) +
         (rank > 0 ? kMaxDepth : std::clamp(depth, 1, kMaxDepth) - 1);
}

double RecycledSource::RateAt(int index) const {
  return (hits_[index] + kPriorHits) / (tries_[index] + kPriorTries);
}

double RecycledSource::Rate(int depth, int rank, Lookup lookup) const {
  return RateAt(RateIndex(depth, rank, lookup));
}

double RecycledSource::SequenceRate(const Sequence& sequence, int depth,
                                    int rank, Lookup lookup) const {
  const int i = RateIndex(depth, rank, lookup);
  return (sequence.hits[i] + kSequencePriorTries * RateAt(i)) /
         (sequence.tries[i] + kSequencePriorTries);
}

void RecycledSource::Tally(Sequence& sequence, int index, bool hit) {
  tries_[index] += 1;
  sequence.tries[index] += 1;
  if (hit) {
    hits_[index] += 1;
    sequence.hits[index] += 1;
  }
}

void RecycledSource::Judge(Sequence& sequence,
                           absl::Span<const int32_t> emitted) {
  if (emitted.empty()) return;
  if (sequence.second != kNone) {
    Tally(sequence, RateIndex(1, 1, sequence.lookups[0]),
          emitted[0] == sequence.second);
  }
  const size_t n = std::min(sequence.chain.size(), emitted.size());
  for (size_t d = 0; d < n; ++d) {
    const bool hit = sequence.chain[d] == emitted[d];
    Tally(sequence, RateIndex(static_cast<int>(d) + 1, 0, sequence.lookups[d]),
          hit);
    if (!hit) break;
  }
}

void RecycledSource::Observe(int64_t handle, absl::Span<const int32_t> tokens) {
  auto it = sequences_.find(handle);
  if (it == sequences_.end() || tokens.empty()) return;
  Sequence& sequence = it->second;
  Judge(sequence, tokens);
  sequence.chain.clear();
  sequence.lookups.clear();
  sequence.second = kNone;
  sequence.before =
      tokens.size() >= 2 ? tokens[tokens.size() - 2] : sequence.last;
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
    if (it == sequences_.end() || asks[i].budget <= 0 ||
        (asks[i].withheld & bit) != 0) {
      continue;
    }
    Sequence& sequence = it->second;
    // The chain of top-1 successors, judged as far as the depth allows
    // whatever the budget, and the second-best first node.
    Lookup lookup;
    const std::array<int32_t, kKeep> first =
        Next(sequence.before, sequence.last, &lookup);
    // Where the sources before it drafted a first node it does not rate
    // higher than theirs, it leaves the step to them (but for the
    // cascade's periodic refresh).
    if (!asks[i].refresh &&
        asks[i].covered_score >= SequenceRate(sequence, 1, 0, lookup)) {
      continue;
    }
    sequence.chain.clear();
    sequence.lookups.clear();
    int32_t before = sequence.last;
    for (int32_t token = first[0];
         token != kNone &&
         static_cast<int>(sequence.chain.size()) < sequence.depth;) {
      sequence.chain.push_back(token);
      sequence.lookups.push_back(lookup);
      const int32_t next = Next(before, token, &lookup)[0];
      before = token;
      token = next;
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
    const double second =
        sequence.chain.empty()
            ? 0
            : SequenceRate(sequence, 1, 1, sequence.lookups[0]);
    bool second_added = sequence.second == kNone;
    int32_t parent = -1;
    double score = 1;
    for (size_t d = 0; d < sequence.chain.size(); ++d) {
      score *= SequenceRate(sequence, static_cast<int>(d) + 1, 0,
                            sequence.lookups[d]);
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
