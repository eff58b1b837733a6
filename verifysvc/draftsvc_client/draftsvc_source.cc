#include "verifysvc/draftsvc_client/draftsvc_source.h"

#include <utility>

namespace lookahead::verifysvc {
namespace {

lookahead::v1::DraftMode WireMode(DraftMode mode) {
  return mode == DraftMode::kTrieParallel
             ? lookahead::v1::DRAFT_MODE_TRIE_PARALLEL
             : lookahead::v1::DRAFT_MODE_TRIE_HIERARCHICAL;
}

}  // namespace

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
  const int64_t handle = sessions_->Open(
      policy.name_space, std::vector<int32_t>(prompt.begin(), prompt.end()),
      policy.branch_length);
  fresh_[handle];
  return handle;
}

void DraftsvcSource::Observe(int64_t handle, absl::Span<const int32_t> tokens) {
  auto it = fresh_.find(handle);
  if (it == fresh_.end()) return;
  it->second.insert(it->second.end(), tokens.begin(), tokens.end());
}

std::vector<engine::DraftTree> DraftsvcSource::Propose(
    absl::Span<const DraftAsk> asks, bool* called) {
  *called = false;
  std::vector<engine::DraftTree> trees(asks.size());
  // No draft wanted this step: skip the RPC (a loopback round trip is a few
  // % of a one-token step) and keep the tokens for a later one.
  bool call = false;
  for (const DraftAsk& ask : asks) {
    auto it = fresh_.find(ask.handle);
    if (it == fresh_.end()) continue;
    call = call || ask.budget > 0 ||
           static_cast<int>(it->second.size()) >= kMaxUnreportedTokens;
  }
  if (!call) return trees;
  std::vector<DraftSessions::StepEntry> entries;
  std::vector<size_t> which;
  for (size_t i = 0; i < asks.size(); ++i) {
    auto it = fresh_.find(asks[i].handle);
    if (it == fresh_.end()) continue;
    DraftSessions::StepEntry entry;
    entry.handle = asks[i].handle;
    entry.accepted = std::move(it->second);
    it->second.clear();
    entry.decoding_length = asks[i].budget;
    entry.mode = WireMode(asks[i].mode);
    entries.push_back(std::move(entry));
    which.push_back(i);
  }
  std::vector<engine::DraftTree> got = sessions_->Step(entries);
  *called = true;
  got.resize(entries.size());
  for (size_t k = 0; k < which.size(); ++k) {
    engine::DraftTree& tree = got[k];
    engine::TrimDraft(&tree, asks[which[k]].budget);
    tree.sources.assign(tree.tokens.size(), engine::DraftSourceTag::kTrie);
    trees[which[k]] = std::move(tree);
  }
  return trees;
}

void DraftsvcSource::Close(int64_t handle) {
  auto it = fresh_.find(handle);
  if (it == fresh_.end()) return;
  sessions_->Close(handle, std::move(it->second));
  fresh_.erase(it);
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
