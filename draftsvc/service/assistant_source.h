// AssistantSource: the assistant model and its drafter, with the index
// sessions' drafter sessions: each index session (by its serial) may have a
// drafter session named by that serial, so a reopened id never meets its
// predecessor's. Drafter sessions open lazily, at the first Step entry that
// asks for the assistant (with the prompt and every token accepted until
// then), so sessions that never use it cost no model work (the drafter
// prefills every session it knows in the background). Sessions whose
// vocabulary is not the model's never get one and say why.
//
// Thread-safety: all methods are safe to call concurrently.
#ifndef LOOKAHEAD_DRAFTSVC_SERVICE_ASSISTANT_SOURCE_H_
#define LOOKAHEAD_DRAFTSVC_SERVICE_ASSISTANT_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "draftsvc/index/session_source.h"
#include "draftsvc/mix/draft_mix.h"
#include "draftsvc/service/draft_service.h"
#include "draftsvc/sources/assistant/assistant_engine.h"
#include "engine/model/sampler.h"

namespace lookahead::draftsvc {

class AssistantSource : public SessionSource {
 public:
  // Loads the model through `options.factory` or the plugin. The factory's
  // errors pass through; INVALID_ARGUMENT for a negative step deadline.
  static absl::StatusOr<std::unique_ptr<AssistantSource>> Load(
      const AssistantServingOptions& options);

  const AssistantEngine& engine() const { return *drafter_; }
  AssistantDrafterStats stats() const { return drafter_->stats(); }
  // What a drafted token costs at least: one one-token pass.
  double seconds_per_token() const { return drafter_->seconds_per_pass(); }

  // SessionSource. The index drives it (DraftIndex::SetSessionSource).
  CandidateSource kind() const override { return CandidateSource::kAssistant; }
  absl::Status CheckVocabulary(int32_t vocab_size) const override {
    return drafter_->CheckVocabulary(vocab_size);
  }
  // seconds_per_token, timed again first if no pass was timed for a minute
  // (an assistant the verifiers stopped asking runs none).
  double RecentSecondsPerToken() override {
    return drafter_->RecentSecondsPerPass(absl::Minutes(1));
  }
  absl::Duration step_deadline() const override { return step_deadline_; }
  // After the index opened `id` as `serial`: remembers its context and
  // sampling for a drafter session, or why the session cannot use the
  // assistant (another vocabulary). Never fails the session.
  void Open(absl::string_view id, int64_t serial, int32_t vocab_size,
            absl::Span<const int32_t> prompt,
            const SessionSampling& sampling) override;
  // The index retired session `id` `serial`: closes its drafter session.
  void Retired(absl::string_view id, int64_t serial) override;
  // Whether session `id` can draft from the assistant: the vocabulary's
  // FAILED_PRECONDITION (or a drafter error) if not, NOT_FOUND if the
  // session is unknown here.
  absl::Status Check(absl::string_view id) const override;
  // The Step's accepted tokens, after the index appended them. A drafter
  // that refuses them (it cannot: the index checked the ids) would draft
  // for the wrong position, so the session stops using the assistant.
  void Advance(absl::string_view id,
               absl::Span<const int32_t> accepted) override;
  // Seconds of assistant passes for session `id` since the last call
  // (AssistantDrafter::TakeSeconds); 0 if it has no drafter session.
  double TakeSeconds(absl::string_view id) override;
  // The assistant's candidates (at most `budget` nodes, drafted until
  // `deadline`) below the session's last token, its drafter session opened
  // first with the context so far if it has none (budget 0: only that);
  // none on any error.
  CandidateTree Draft(absl::string_view id, int budget,
                      absl::Time deadline) override;

  // The drafter session of `id`, opened now with the context so far if it
  // has none yet; Check's errors otherwise.
  absl::StatusOr<std::string> Acquire(absl::string_view id);

 private:
  CandidateTree DraftAs(const std::string& drafter_id, int budget,
                        absl::Time deadline);

  struct Entry {
    int64_t serial = 0;
    // OK iff the session may use the assistant.
    absl::Status unusable;
    // Whether DrafterId(serial) is open in the drafter. Until it is, the
    // prompt and accepted tokens so far (then empty) and the sampling.
    bool opened = false;
    std::vector<int32_t> context;
    engine::SamplingParams sampling;
  };

  AssistantSource(std::unique_ptr<AssistantEngine> drafter,
                  absl::Duration step_deadline)
      : drafter_(std::move(drafter)), step_deadline_(step_deadline) {}

  static std::string DrafterId(int64_t serial) { return absl::StrCat(serial); }

  const std::unique_ptr<AssistantEngine> drafter_;
  const absl::Duration step_deadline_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> retired_early_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SERVICE_ASSISTANT_SOURCE_H_
