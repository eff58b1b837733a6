// DraftIndex: retrieval. The Ant baseline builds a tree from the two tries
// alone; the mixed retrieval asks every requested source for candidates,
// mixes them by calibrated probability and remembers the tree for the next
// Append's calibration.
#include <array>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "draftsvc/index/draft_index.h"
#include "draftsvc/index/draft_index_internal.h"

namespace lookahead::draftsvc {

absl::Status DraftIndex::CheckRetrieveLimits(int32_t decoding_length,
                                             int32_t branch_length) const {
  if (decoding_length < 0 || decoding_length > options_.max_decoding_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("decoding_length ", decoding_length, " is outside [0, ",
                     options_.max_decoding_length, "]"));
  }
  if (branch_length < 0 || branch_length > options_.max_branch_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("branch_length ", branch_length, " is outside [0, ",
                     options_.max_branch_length, "] (0 = the session's)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<DraftIndex::Session>> DraftIndex::SessionContext(
    absl::string_view session_id, absl::InlinedVector<int32_t, 32>* context) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, FindSession(session_id));
  absl::MutexLock lock(&session->mu);
  if (session->closed) {
    return absl::NotFoundError(
        absl::StrCat("session ", QuoteInput(session_id), " was closed"));
  }
  context->assign(session->context.begin(), session->context.end());
  return session;
}

absl::StatusOr<MixedDraft> DraftIndex::Retrieve(absl::string_view session_id,
                                                int32_t decoding_length,
                                                int32_t branch_length,
                                                DraftMode mode) {
  RETURN_IF_ERROR(CheckRetrieveLimits(decoding_length, branch_length));
  absl::InlinedVector<int32_t, 32> context;
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                   SessionContext(session_id, &context));
  if (mode == DraftMode::kOff || decoding_length == 0) return MixedDraft{};
  DraftRequest request;
  request.context = context;
  request.max_match_length = session->branch_length;
  request.decoding_length = decoding_length;
  request.branch_length =
      branch_length == 0 ? session->branch_length : branch_length;
  request.mode = mode;
  absl::ReaderMutexLock lock(&session->ns->mu);
  const TrieSource sources[2] = {
      {session->prompt_trie.get(), CandidateSource::kPrompt,
       options_.prompt_boost},
      {&session->ns->trie, CandidateSource::kOutput, 1.0f},
  };
  return BuildTrieDraft(sources, request);
}

absl::StatusOr<MixedDraft> DraftIndex::Retrieve(
    absl::string_view session_id, const RetrieveRequest& request) {
  RETURN_IF_ERROR(
      CheckRetrieveLimits(request.decoding_length, request.branch_length));
  absl::InlinedVector<int32_t, 32> context;
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                   SessionContext(session_id, &context));
  if (request.mode == DraftMode::kOff || request.decoding_length == 0) {
    return MixedDraft{};
  }
  std::vector<CandidateTree> candidates;
  // The session source first, with no lock held: it may draft until its
  // deadline (a model's passes).
  if (session_source_ != nullptr &&
      request.source_deadline > absl::InfinitePast() &&
      (request.sources & CandidateSourceBit(session_source_->kind())) != 0) {
    const absl::Time start = absl::Now();
    candidates.push_back(session_source_->Draft(
        session_id, request.decoding_length, request.source_deadline));
    if (request.source_draft_seconds != nullptr) {
      *request.source_draft_seconds = absl::ToDoubleSeconds(absl::Now() - start);
    }
  }
  Namespace* const ns = session->ns;
  const int32_t branch_length = request.branch_length == 0
                                    ? session->branch_length
                                    : request.branch_length;
  const CalibrationTable rates = ns->calibration.Snapshot();
  constexpr uint32_t kTries = CandidateSourceBit(CandidateSource::kPrompt) |
                              CandidateSourceBit(CandidateSource::kOutput);
  if ((request.sources & kTries) != 0) {
    // Each trie proposes a full budget on its own, so that its sibling
    // ranks are its own and the mixer weighs the two by calibration.
    DraftRequest trie_request;
    trie_request.context = context;
    trie_request.max_match_length = session->branch_length;
    trie_request.decoding_length = request.decoding_length;
    trie_request.branch_length = branch_length;
    const TrieSource prompt = {session->prompt_trie.get(),
                               CandidateSource::kPrompt, 1.0f};
    candidates.push_back(TrieCandidates(
        BuildTrieDraft({&prompt, 1}, trie_request), CandidateSource::kPrompt));
    absl::ReaderMutexLock lock(&ns->mu);
    const TrieSource output = {&ns->trie, CandidateSource::kOutput, 1.0f};
    candidates.push_back(TrieCandidates(
        BuildTrieDraft({&output, 1}, trie_request), CandidateSource::kOutput));
  }
  if ((request.sources & CandidateSourceBit(CandidateSource::kNgram)) != 0 &&
      ns->pool != nullptr) {
    // The session's own pool first: it is the more specific evidence.
    const NgramPool* pools[] = {session->pool.get(), ns->pool.get()};
    candidates.push_back(NgramCandidates(pools, context, rates,
                                         request.decoding_length, branch_length,
                                         options_.ngram_lookup_results));
  }
  MixRequest mix;
  mix.decoding_length = request.decoding_length;
  mix.branch_length = branch_length;
  mix.mode = request.mode;
  MixedDraft draft = MixDrafts(candidates, rates, mix);
  std::array<int64_t, kNumCandidateSources> proposed{};
  for (const DraftNode& node : draft.nodes) {
    for (int s = 0; s < kNumCandidateSources; ++s) {
      proposed[s] += node.source_set >> s & 1;
    }
  }
  ns->calibration.CountProposed(proposed);
  {
    absl::MutexLock lock(&session->mu);
    session->sent = draft.nodes;
  }
  return draft;
}

}  // namespace lookahead::draftsvc
