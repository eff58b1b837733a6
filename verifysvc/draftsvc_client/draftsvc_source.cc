#include "verifysvc/draftsvc_client/draftsvc_source.h"

#include <iterator>
#include <utility>

namespace lookahead::verifysvc {
namespace {

lookahead::v1::DraftMode WireMode(DraftMode mode) {
  return mode == DraftMode::kTrieParallel
             ? lookahead::v1::DRAFT_MODE_TRIE_PARALLEL
             : lookahead::v1::DRAFT_MODE_TRIE_HIERARCHICAL;
}

}  // namespace

lookahead::v1::PredictionTree PackPredictions(
    const VerifiedPredictions& predictions, int root_after) {
  lookahead::v1::PredictionTree tree;
  tree.set_root_after(root_after);
  tree.mutable_tokens()->Add(predictions.tokens.begin(),
                             predictions.tokens.end());
  tree.mutable_parents()->Add(predictions.parents.begin(),
                              predictions.parents.end());
  tree.set_k(predictions.k);
  tree.mutable_top_tokens()->Add(predictions.top_tokens.begin(),
                                 predictions.top_tokens.end());
  return tree;
}

std::unique_ptr<DraftsvcSource> DraftsvcSource::Connect(
    const std::string& target, int32_t vocab_size,
    const DraftClientOptions& client_options,
    DraftSessionsOptions session_options) {
  std::unique_ptr<DraftClient> client =
      DraftClient::Create(target, client_options);
  auto sessions = std::make_unique<DraftSessions>(client.get(), vocab_size,
                                                  std::move(session_options));
  return std::unique_ptr<DraftsvcSource>(
      new DraftsvcSource(std::move(client), std::move(sessions)));
}

int64_t DraftsvcSource::Open(const DraftPolicy& policy,
                             absl::Span<const int32_t> prompt) {
  if (!policy.enabled()) return 0;
  lookahead::v1::DraftSampling sampling;
  sampling.set_temperature(policy.sampling.temperature);
  sampling.set_top_p(policy.sampling.top_p);
  sampling.set_top_k(policy.sampling.top_k);
  sampling.set_seed(policy.sampling.seed);
  const int64_t handle = sessions_->Open(
      policy.name_space, std::vector<int32_t>(prompt.begin(), prompt.end()),
      policy.branch_length, SourcesToProto(policy.sources), sampling);
  pending_[handle].wants_predictions =
      policy.MayUse(engine::DraftSourceTag::kNgram);
  return handle;
}

void DraftsvcSource::Observe(int64_t handle, absl::Span<const int32_t> tokens) {
  auto it = pending_.find(handle);
  if (it == pending_.end()) return;
  it->second.fresh.insert(it->second.fresh.end(), tokens.begin(), tokens.end());
}

bool DraftsvcSource::WantsPredictions(int64_t handle) const {
  auto it = pending_.find(handle);
  return it != pending_.end() && it->second.wants_predictions;
}

void DraftsvcSource::ObserveVerified(int64_t handle,
                                     const VerifiedPredictions& predictions) {
  auto it = pending_.find(handle);
  if (it == pending_.end() || !it->second.wants_predictions ||
      predictions.k < 1) {
    return;
  }
  Pending& pending = it->second;
  // The root is the last buffered token (or, with none buffered, the last
  // token draftsvc has already seen).
  pending.predictions.push_back(
      PackPredictions(predictions, static_cast<int>(pending.fresh.size())));
  while (static_cast<int>(pending.predictions.size()) > kMaxPredictionTrees) {
    pending.predictions.pop_front();
  }
}

void DraftsvcSource::ObserveNgrams(
    int64_t handle, absl::Span<const std::vector<int32_t>> ngrams) {
  auto it = pending_.find(handle);
  // The pool is the n-gram source's: a sequence that may not draft from it
  // does not feed it either (as with predictions).
  if (it == pending_.end() || !it->second.wants_predictions) return;
  Pending& pending = it->second;
  for (const std::vector<int32_t>& ngram : ngrams) {
    const int n = static_cast<int>(ngram.size());
    if (n < 2 || n > kMaxNgramTokens) continue;
    pending.ngrams.push_back(ngram);
  }
  while (static_cast<int>(pending.ngrams.size()) > kMaxStepNgrams) {
    pending.ngrams.pop_front();
  }
}

absl::Status DraftsvcSource::Failure(int64_t handle) const {
  return sessions_->Failure(handle);
}

bool DraftsvcSource::OpenAnswered(int64_t handle) const {
  return sessions_->OpenAnswered(handle);
}

void DraftsvcSource::WaitOpened(int64_t handle, absl::Time deadline) const {
  sessions_->WaitOpened(handle, deadline);
}

std::vector<engine::DraftTree> DraftsvcSource::Propose(
    absl::Span<const DraftAsk> asks, bool* called) {
  *called = false;
  std::vector<engine::DraftTree> trees(asks.size());
  // No draft wanted this step: skip the RPC (a loopback round trip is a few
  // % of a one-token step) and keep the tokens for a later one.
  bool call = false;
  for (const DraftAsk& ask : asks) {
    auto it = pending_.find(ask.handle);
    if (it == pending_.end()) continue;
    call = call || ask.budget > 0 ||
           static_cast<int>(it->second.fresh.size()) >= kMaxUnreportedTokens;
  }
  if (!call) return trees;
  std::vector<DraftSessions::StepEntry> entries;
  std::vector<size_t> which;
  for (size_t i = 0; i < asks.size(); ++i) {
    auto it = pending_.find(asks[i].handle);
    if (it == pending_.end()) continue;
    DraftSessions::StepEntry entry;
    entry.handle = asks[i].handle;
    entry.accepted = std::move(it->second.fresh);
    it->second.fresh.clear();
    entry.predictions.assign(
        std::make_move_iterator(it->second.predictions.begin()),
        std::make_move_iterator(it->second.predictions.end()));
    it->second.predictions.clear();
    entry.ngrams.assign(std::make_move_iterator(it->second.ngrams.begin()),
                        std::make_move_iterator(it->second.ngrams.end()));
    it->second.ngrams.clear();
    entry.decoding_length = asks[i].budget;
    entry.mode = WireMode(asks[i].mode);
    entry.withheld = asks[i].withheld;
    entries.push_back(std::move(entry));
    which.push_back(i);
  }
  std::vector<engine::DraftTree> got = sessions_->Step(entries);
  *called = true;
  got.resize(entries.size());
  for (size_t k = 0; k < which.size(); ++k) {
    engine::DraftTree& tree = got[k];
    engine::TrimDraft(&tree, asks[which[k]].budget);
    if (tree.sources.size() != tree.tokens.size()) {
      // A draftsvc that tags nothing drafts from its tries alone.
      tree.sources.assign(tree.tokens.size(), engine::DraftSourceTag::kTrie);
    }
    trees[which[k]] = std::move(tree);
  }
  return trees;
}

void DraftsvcSource::Close(int64_t handle) {
  auto it = pending_.find(handle);
  if (it == pending_.end()) return;
  // Predictions still buffered are dropped: the sequence drafts no more.
  sessions_->Close(handle, std::move(it->second.fresh));
  pending_.erase(it);
}

DraftSourceStats DraftsvcSource::Stats() const {
  const DraftSessionsStats s = sessions_->Stats();
  DraftSourceStats stats;
  stats.available = s.available;
  stats.failures = s.step_failures;
  stats.reopened = s.reopened;
  stats.open_sessions = s.open_sessions;
  return stats;
}

}  // namespace lookahead::verifysvc
