// SessionSource: a draft source with per-session state of its own outside
// the index's tries and pools (a model: the assistant), driven by the index.
// The index tells it of every session's life (Open after OpenSession,
// Advance after each Append with the tokens applied, Retired when the
// session ends) and asks it for candidates when a retrieval includes its
// CandidateSource, mixing them with its own. The RPC layer never drives it:
// it talks to the index (DraftIndex::SetSessionSource wires one in).
//
// The interface lives in index/ (the index owns it); implementations live
// above it (service/assistant_source.h), so the arrows still point down.
// Thread-safety: implementations are called from any RPC thread and the
// index's sweeper, concurrently, with no lock of the index held.
#ifndef LOOKAHEAD_DRAFTSVC_INDEX_SESSION_SOURCE_H_
#define LOOKAHEAD_DRAFTSVC_INDEX_SESSION_SOURCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "draftsvc/mix/draft_mix.h"

namespace lookahead::draftsvc {

// A session's sampling, for a source whose drafts follow it (the fields of
// engine::SamplingParams, without depending on the engine here).
struct SessionSampling {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
};

class SessionSource {
 public:
  virtual ~SessionSource() = default;

  // Which source its candidates are (CandidateSource::kAssistant).
  virtual CandidateSource kind() const = 0;
  // OK iff sessions of this vocabulary can draft from it;
  // FAILED_PRECONDITION saying why not.
  virtual absl::Status CheckVocabulary(int32_t vocab_size) const = 0;
  // What one of its drafted tokens costs at least, in seconds (0: unknown).
  virtual double RecentSecondsPerToken() = 0;
  // How long one Step may wait for its candidates, all entries together.
  virtual absl::Duration step_deadline() const = 0;

  // The index opened session `id` as `serial` with this prompt.
  virtual void Open(absl::string_view id, int64_t serial, int32_t vocab_size,
                    absl::Span<const int32_t> prompt,
                    const SessionSampling& sampling) = 0;
  // The session applied `accepted` (only tokens it did not hold before).
  virtual void Advance(absl::string_view id,
                       absl::Span<const int32_t> accepted) = 0;
  // The index retired the session (CloseSession, lease expiry).
  virtual void Retired(absl::string_view id, int64_t serial) = 0;

  // OK iff session `id` can draft from it now; NOT_FOUND for a session it
  // does not know, another code (and message) for one it cannot serve.
  virtual absl::Status Check(absl::string_view id) const = 0;
  // Candidates below the session's last token: at most `budget` nodes,
  // drafted until `deadline`; empty on any error. Starts the session's
  // state on first use.
  virtual CandidateTree Draft(absl::string_view id, int budget,
                              absl::Time deadline) = 0;
  // Seconds of its work for the session since the last call (0: none).
  virtual double TakeSeconds(absl::string_view id) = 0;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_INDEX_SESSION_SOURCE_H_
