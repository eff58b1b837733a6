// SessionDraftProvider: a DraftProvider for the reference decode loop
// (engine/testing/reference_decode.h) backed by one draftsvc session, so
// tests can check real draftsvc drafts against plain decoding without the
// scheduler. Thread-compatible: one Generate call at a time.
#ifndef LOOKAHEAD_TESTS_SESSION_DRAFT_PROVIDER_H_
#define LOOKAHEAD_TESTS_SESSION_DRAFT_PROVIDER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/testing/reference_decode.h"
#include "verifysvc/draftsvc_client/draftsvc_client.h"

namespace lookahead::verifysvc {

// A DraftProvider backed by one draftsvc session.
class SessionDraftProvider : public engine::DraftProvider {
 public:
  // Opens `session_id` in `name_space` with the prompt. `client` is not
  // owned and must outlive the provider. Errors are draftsvc's.
  static absl::StatusOr<std::unique_ptr<SessionDraftProvider>> Open(
      DraftClient* client, std::string session_id, std::string name_space,
      int32_t vocab_size, absl::Span<const int32_t> prompt,
      DraftRequest step_template);
  // Closes the session (its accepted outputs stay in the global trie).
  ~SessionDraftProvider() override;

  absl::StatusOr<engine::DraftTree> Next(
      absl::Span<const int32_t> accepted) override;

 private:
  SessionDraftProvider(DraftClient* client, int32_t vocab_size,
                       DraftRequest step_template)
      : client_(client), vocab_size_(vocab_size), step_(step_template) {}

  DraftClient* const client_;
  const int32_t vocab_size_;
  DraftRequest step_;  // session id, budget, mode; tokens vary per call.
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_TESTS_SESSION_DRAFT_PROVIDER_H_
