#include "tests/session_draft_provider.h"

#include <utility>

#include "common/status_macros.h"

namespace lookahead::verifysvc {

absl::StatusOr<std::unique_ptr<SessionDraftProvider>>
SessionDraftProvider::Open(DraftClient* client, std::string session_id,
                           std::string name_space, int32_t vocab_size,
                           absl::Span<const int32_t> prompt,
                           DraftRequest step_template) {
  RETURN_IF_ERROR(client->OpenSession(session_id, name_space, vocab_size,
                                      prompt, step_template.branch_length));
  step_template.session_id = std::move(session_id);
  return std::unique_ptr<SessionDraftProvider>(
      new SessionDraftProvider(client, vocab_size, std::move(step_template)));
}

SessionDraftProvider::~SessionDraftProvider() {
  // Best effort: an unreachable draftsvc drops the session itself.
  client_->CloseSession(step_.session_id).IgnoreError();
}

absl::StatusOr<engine::DraftTree> SessionDraftProvider::Next(
    absl::Span<const int32_t> accepted) {
  step_.accepted_tokens.assign(accepted.begin(), accepted.end());
  ASSIGN_OR_RETURN(auto trees, client_->Step({step_}, vocab_size_));
  return std::move(trees.front());
}

}  // namespace lookahead::verifysvc
