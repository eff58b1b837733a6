#include "verifysvc/draftsvc_client/draftsvc_source.h"

#include <algorithm>
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

engine::DraftTree WalkDraft(const engine::DraftTree& tree,
                            absl::Span<const int32_t> walk) {
  if (walk.empty()) return tree;
  // Follow the walk: the node below `at` (-1: the root) with each token.
  int at = -1;
  for (int32_t token : walk) {
    int next = -1;
    for (int i = at + 1; i < tree.size(); ++i) {
      if (tree.parents[i] == at && tree.tokens[i] == token) {
        next = i;
        break;
      }
    }
    if (next < 0) return {};
    at = next;
  }
  // Its descendants, in order: a node is one iff its parent is `at` or one.
  std::vector<int> index(tree.size(), -1);
  engine::DraftTree sub;
  const bool scored = tree.scores.size() == tree.tokens.size();
  const float given = scored && tree.scores[at] > 0 ? tree.scores[at] : 1.0f;
  for (int i = at + 1; i < tree.size(); ++i) {
    const int parent = tree.parents[i];
    if (parent != at && (parent < 0 || index[parent] < 0)) continue;
    index[i] = sub.size();
    sub.tokens.push_back(tree.tokens[i]);
    sub.parents.push_back(parent == at ? -1 : index[parent]);
    if (i < static_cast<int>(tree.sources.size())) {
      sub.sources.push_back(tree.sources[i]);
    }
    if (i < static_cast<int>(tree.source_sets.size())) {
      sub.source_sets.push_back(tree.source_sets[i]);
    }
    if (scored) sub.scores.push_back(std::min(1.0f, tree.scores[i] / given));
  }
  if (sub.sources.size() != sub.tokens.size()) sub.sources.clear();
  if (sub.source_sets.size() != sub.tokens.size()) sub.source_sets.clear();
  return sub;
}

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
  const bool synchronous = session_options.synchronous;
  auto sessions = std::make_unique<DraftSessions>(client.get(), vocab_size,
                                                  std::move(session_options));
  return std::unique_ptr<DraftsvcSource>(new DraftsvcSource(
      std::move(client), std::move(sessions), synchronous));
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
  Pending& pending = pending_[handle];
  pending.wants_predictions = policy.MayUse(engine::DraftSourceTag::kNgram);
  pending.position = static_cast<int64_t>(prompt.size());
  return handle;
}

void DraftsvcSource::Observe(int64_t handle, absl::Span<const int32_t> tokens) {
  auto it = pending_.find(handle);
  if (it == pending_.end()) return;
  Pending& pending = it->second;
  pending.fresh.insert(pending.fresh.end(), tokens.begin(), tokens.end());
  pending.position += static_cast<int64_t>(tokens.size());
  if (synchronous_) return;
  pending.recent.insert(pending.recent.end(), tokens.begin(), tokens.end());
  while (static_cast<int>(pending.recent.size()) > kMaxWalk) {
    pending.recent.pop_front();
  }
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

std::vector<DraftSessions::StepEntry> DraftsvcSource::Entries(
    absl::Span<const DraftAsk> asks, std::vector<size_t>* which) {
  std::vector<DraftSessions::StepEntry> entries;
  // No draft wanted this step: skip the RPC (a loopback round trip is a few
  // % of a one-token step) and keep the tokens for a later one.
  bool call = false;
  for (const DraftAsk& ask : asks) {
    auto it = pending_.find(ask.handle);
    if (it == pending_.end()) continue;
    call = call || (ask.budget > 0 && ask.refresh) ||
           static_cast<int>(it->second.fresh.size()) >= kMaxUnreportedTokens;
  }
  if (!call) return entries;
  for (size_t i = 0; i < asks.size(); ++i) {
    auto it = pending_.find(asks[i].handle);
    if (it == pending_.end()) continue;
    Pending& pending = it->second;
    DraftSessions::StepEntry entry;
    entry.handle = asks[i].handle;
    entry.accepted = std::move(pending.fresh);
    pending.fresh.clear();
    entry.predictions.assign(
        std::make_move_iterator(pending.predictions.begin()),
        std::make_move_iterator(pending.predictions.end()));
    pending.predictions.clear();
    entry.ngrams.assign(std::make_move_iterator(pending.ngrams.begin()),
                        std::make_move_iterator(pending.ngrams.end()));
    pending.ngrams.clear();
    // Synchronous: the budget. Asynchronous: what the next step may want,
    // before the accepted path of this step's pass walks into it.
    entry.decoding_length =
        synchronous_ || asks[i].budget == 0
            ? asks[i].budget
            : std::clamp(asks[i].budget * kAsyncAskFactor, kMinAsyncAsk,
                         kMaxAsyncAsk);
    entry.mode = WireMode(asks[i].mode);
    entry.withheld = asks[i].withheld;
    entries.push_back(std::move(entry));
    which->push_back(i);
  }
  return entries;
}

namespace {

// A tree from draftsvc, cut to `budget` and tagged.
void Finish(int budget, engine::DraftTree* tree) {
  engine::TrimDraft(tree, budget);
  if (tree->sources.size() != tree->tokens.size()) {
    // A draftsvc that tags nothing drafts from its tries alone.
    tree->sources.assign(tree->tokens.size(), engine::DraftSourceTag::kTrie);
  }
}

}  // namespace

std::vector<engine::DraftTree> DraftsvcSource::Propose(
    absl::Span<const DraftAsk> asks, bool* called) {
  *called = false;
  if (!synchronous_) return ProposeAsync(asks);
  std::vector<engine::DraftTree> trees(asks.size());
  std::vector<size_t> which;
  std::vector<DraftSessions::StepEntry> entries = Entries(asks, &which);
  if (entries.empty()) return trees;
  std::vector<engine::DraftTree> got = sessions_->Step(entries);
  *called = true;
  got.resize(entries.size());
  for (size_t k = 0; k < which.size(); ++k) {
    Finish(asks[which[k]].budget, &got[k]);
    trees[which[k]] = std::move(got[k]);
  }
  return trees;
}

std::vector<engine::DraftTree> DraftsvcSource::ProposeAsync(
    absl::Span<const DraftAsk> asks) {
  for (DraftSessions::Answer& answer : sessions_->TakeAnswers()) {
    auto it = pending_.find(answer.handle);
    if (it == pending_.end()) continue;
    // An unused answer's assistant seconds still count.
    answer.tree.source_seconds += it->second.answer.tree.source_seconds;
    it->second.answer = std::move(answer);
  }
  std::vector<engine::DraftTree> trees(asks.size());
  for (size_t i = 0; i < asks.size(); ++i) {
    auto it = pending_.find(asks[i].handle);
    if (it == pending_.end()) continue;
    Pending& pending = it->second;
    const int64_t previous_position =
        std::exchange(pending.previous_position, pending.position);
    if (asks[i].budget <= 0) continue;
    DraftSessions::Answer& answer = pending.answer;
    const int64_t walk = pending.position - answer.root_position;
    engine::DraftTree tree;
    if (answer.root_position >= 0 && walk >= 0 &&
        walk <= static_cast<int64_t>(pending.recent.size())) {
      tree = WalkDraft(answer.tree,
                       std::vector<int32_t>(pending.recent.end() - walk,
                                            pending.recent.end()));
      tree.source_seconds = answer.tree.source_seconds;
      answer.tree.source_seconds = 0;
    }
    // Nothing from an answer asked before the previous step (the newer one
    // is on its way, draftsvc is slow, or the last steps asked nothing, as
    // before a probe) is no miss of the source's: only an answer asked at
    // the previous step judges it.
    tree.pending = tree.empty() && answer.root_position < previous_position;
    Finish(asks[i].budget, &tree);
    trees[i] = std::move(tree);
  }
  // The next answer, asked while this step's pass runs. With a Step still
  // in flight (a slow or stopped draftsvc), everything stays buffered.
  if (sessions_->StepInFlight()) return trees;
  std::vector<size_t> which;
  std::vector<DraftSessions::StepEntry> entries =
      Entries(asks, &which);
  if (entries.empty()) return trees;
  if (!sessions_->StepAsync(entries)) {
    // Raced with nothing (this thread is the only sender); keep the
    // tokens in order anyway.
    for (size_t k = 0; k < which.size(); ++k) {
      Pending& pending = pending_[asks[which[k]].handle];
      entries[k].accepted.insert(entries[k].accepted.end(),
                                 pending.fresh.begin(), pending.fresh.end());
      pending.fresh = std::move(entries[k].accepted);
    }
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
