#include "draftsvc/service/assistant_source.h"

#include <utility>

#include "common/quote.h"
#include "common/status_macros.h"

namespace lookahead::draftsvc {

absl::StatusOr<std::unique_ptr<AssistantSource>> AssistantSource::Load(
    const AssistantServingOptions& options) {
  if (options.step_deadline < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assistant step deadline (--assistant_deadline_ms) ",
        absl::FormatDuration(options.step_deadline), " is negative"));
  }
  AssistantEngineFactory factory = options.factory;
  if (factory == nullptr) {
    ASSIGN_OR_RETURN(factory, LoadAssistantPlugin(options.plugin_path));
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<AssistantEngine> engine,
      factory(options.model_path, options.model, options.drafter));
  return std::unique_ptr<AssistantSource>(
      new AssistantSource(std::move(engine), options.step_deadline));
}

void AssistantSource::Open(absl::string_view id, int64_t serial,
                           int32_t vocab_size,
                           absl::Span<const int32_t> prompt,
                           const SessionSampling& sampling) {
  Entry entry;
  entry.serial = serial;
  entry.unusable = drafter_->CheckVocabulary(vocab_size);
  if (entry.unusable.ok()) {
    entry.context.assign(prompt.begin(), prompt.end());
    entry.sampling.temperature = sampling.temperature;
    entry.sampling.top_k = sampling.top_k;
    entry.sampling.top_p = sampling.top_p;
    entry.sampling.seed = sampling.seed;
  }
  absl::MutexLock lock(&mu_);
  if (retired_early_.erase(serial) > 0) return;
  auto it = sessions_.find(id);
  // A newer session of the same id (two racing opens) wins.
  if (it == sessions_.end() || it->second.serial < serial) {
    sessions_[std::string(id)] = std::move(entry);
  }
}

void AssistantSource::Retired(absl::string_view id, int64_t serial) {
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end() && it->second.serial == serial) {
      sessions_.erase(it);
    } else if (it == sessions_.end() || it->second.serial < serial) {
      // Retired before Open registered it (a racing CloseSession).
      retired_early_.insert(serial);
    }
  }
  // NOT_FOUND: it had none (another vocabulary).
  drafter_->Close(DrafterId(serial)).IgnoreError();
}

absl::Status AssistantSource::Check(absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("session ", QuoteInput(id), " is not open"));
  }
  return it->second.unusable;
}

absl::StatusOr<std::string> AssistantSource::Acquire(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("session ", QuoteInput(id), " is not open"));
  }
  Entry& entry = it->second;
  RETURN_IF_ERROR(entry.unusable);
  const std::string drafter_id = DrafterId(entry.serial);
  if (!entry.opened) {
    // Cheap (a copy and a queued pre-draft), so under mu_: an Advance of
    // the same session cannot slip between the copy and the open.
    entry.unusable =
        drafter_->Open(drafter_id, entry.context, entry.sampling);
    RETURN_IF_ERROR(entry.unusable);
    entry.opened = true;
    entry.context = {};
  }
  return drafter_id;
}

void AssistantSource::Advance(absl::string_view id,
                              absl::Span<const int32_t> accepted) {
  if (accepted.empty()) return;
  std::string drafter_id;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end() || !it->second.unusable.ok()) return;
    Entry& entry = it->second;
    if (!entry.opened) {
      entry.context.insert(entry.context.end(), accepted.begin(),
                           accepted.end());
      return;
    }
    drafter_id = DrafterId(entry.serial);
  }
  absl::Status advanced = drafter_->Advance(drafter_id, accepted);
  if (advanced.ok()) return;
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it != sessions_.end() && DrafterId(it->second.serial) == drafter_id) {
    it->second.unusable = absl::InternalError(
        absl::StrCat("the assistant lost session ", QuoteInput(id),
                     "'s context: ", advanced.message()));
  }
}

double AssistantSource::TakeSeconds(absl::string_view id) {
  std::string drafter_id;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end() || !it->second.opened) return 0;
    drafter_id = DrafterId(it->second.serial);
  }
  return drafter_->TakeSeconds(drafter_id);
}

CandidateTree AssistantSource::Draft(absl::string_view id, int budget,
                                     absl::Time deadline) {
  // The first use opens the drafter session (and starts its background
  // prefill) even with nothing to draft now.
  absl::StatusOr<std::string> drafter_id = Acquire(id);
  if (!drafter_id.ok() || budget <= 0) {
    CandidateTree none;
    none.source = CandidateSource::kAssistant;
    return none;
  }
  return DraftAs(*drafter_id, budget, deadline);
}

CandidateTree AssistantSource::DraftAs(const std::string& drafter_id,
                                       int budget, absl::Time deadline) {
  CandidateTree out;
  out.source = CandidateSource::kAssistant;
  absl::StatusOr<AssistantDraft> draft =
      drafter_->Draft(drafter_id, budget, deadline);
  if (!draft.ok() || draft->tree.empty()) return out;
  return RankedCandidates(CandidateSource::kAssistant, draft->tree.tokens,
                          draft->tree.parents, draft->probabilities);
}

}  // namespace lookahead::draftsvc
