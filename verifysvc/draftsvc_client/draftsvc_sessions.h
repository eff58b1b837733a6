// DraftSessions: the draftsvc sessions of verifysvc's running sequences, kept
// alive across draftsvc outages and restarts.
//
// draftsvc is optional at run time. A session is opened (and closed) on a
// worker thread, never on the decoding path; until it is open its sequence
// simply gets no drafts. Step() sends ONE batched RPC per decoding step with
// a short deadline and waits for it; StepAsync() sends it on a step thread
// and returns at once, its answers arriving later (TakeAnswers), so no
// decoding step ever waits on draftsvc. One Step is in flight at a time. If
// one fails the step runs without drafts, the accepted tokens stay buffered
// for the next successful Step, and further RPCs wait out an exponential
// backoff. Reports are exactly-once: each carries the count of the
// session's tokens draftsvc acknowledged before it (accepted_offset), so a
// Step whose reply was lost and that is sent again is applied once. A session that draftsvc no longer knows
// (NOT_FOUND: draftsvc restarted, or expired it after its idle lease) is
// reopened with everything its sequence had seen before the failed Step,
// whose tokens are then reported again; the sequence only misses drafts
// meanwhile. Close() reports the last accepted tokens, so every output
// reaches the global trie (unless the session had already expired).
//
// Reported predictions (SessionStep.predictions) and n-grams are best
// effort: predictions go out with the Step that reports their root's token,
// n-grams with the next Step; both are dropped when that Step fails, the
// session is not open, or (predictions) their root is held back.
// An open or a Step entry that draftsvc refuses with FAILED_PRECONDITION
// while the session asked for explicit sources (a source it does not run)
// marks the session failed: Failure() returns that status and no further
// drafts are asked for it. Opens carry the sources, so the refusal comes
// before the sequence's first token; OpenAnswered() tells the caller
// whether it came (WaitOpened() waits for it). Opens go to draftsvc before
// queued closes.
//
// Thread-safety: all methods are safe to call concurrently; Step() is meant
// for the one scheduler thread.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_DRAFTSVC_SESSIONS_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_DRAFTSVC_SESSIONS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "proto/draft.pb.h"
#include "verifysvc/draftsvc_client/draftsvc_client.h"

namespace lookahead::verifysvc {

struct DraftSessionsOptions {
  // Prefix of every session id ("<replica_id>/<n>"): unique per process so
  // that two verifiers (or a restarted one) never collide on a draftsvc.
  std::string replica_id;
  // Backoff after a failed Step: starts here, doubles per failure, capped.
  absl::Duration min_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // A reopened session gets at most this many of its latest tokens.
  int max_reopen_tokens = 8192;
  // A Step entry reports at most this many accepted tokens (draftsvc's
  // --max_step_tokens default; it rejects longer entries). Tokens that
  // piled up beyond it (after an outage) go out over the next steps, which
  // ask for no draft until the session has caught up.
  int max_report_tokens = 4096;
  // DraftsvcSource: each drafted step waits for draftsvc's answer (Step)
  // instead of using what the previous step's StepAsync brought (flag
  // --draft_sync; the default is asynchronous in verifysvc).
  bool synchronous = true;
};

struct DraftSessionsStats {
  bool available = true;  // The last Step RPC succeeded (or none was sent).
  int64_t step_failures = 0;
  int64_t reopened = 0;
  int64_t open_sessions = 0;
};

class DraftSessions {
 public:
  // `client` is not owned and must outlive this. `vocab_size` bounds ids.
  DraftSessions(DraftClient* client, int32_t vocab_size,
                DraftSessionsOptions options);
  // Finishes queued closes (each bounded by the client's deadline).
  ~DraftSessions();

  DraftSessions(const DraftSessions&) = delete;
  DraftSessions& operator=(const DraftSessions&) = delete;

  // Starts opening a session for a sequence with this prompt; returns its
  // handle at once (the session serves drafts once the open completes).
  // `sources`: what every Step of it may draft from (empty: draftsvc's
  // defaults); `sampling`: the request's, for model-based drafts.
  int64_t Open(std::string name_space, std::vector<int32_t> prompt,
               int32_t branch_length,
               std::vector<lookahead::v1::DraftSource> sources = {},
               lookahead::v1::DraftSampling sampling = {});

  struct StepEntry {
    int64_t handle = 0;
    std::vector<int32_t> accepted;  // Emitted since the previous Step.
    int32_t decoding_length = 0;    // 0: report tokens only.
    lookahead::v1::DraftMode mode = lookahead::v1::DRAFT_MODE_TRIE_HIERARCHICAL;
    // Predictions whose root_after counts tokens of `accepted` (each in
    // [0, accepted.size()]), oldest first.
    std::vector<lookahead::v1::PredictionTree> predictions;
    // Jacobi n-grams harvested since the previous Step (best effort, like
    // predictions).
    std::vector<std::vector<int32_t>> ngrams;
    // Sources this step's draft must not use.
    engine::DraftSourceSet withheld = 0;
  };
  // Reports every entry's tokens and returns its draft tree (empty if the
  // session is not open, draftsvc failed, or it had nothing to propose).
  // Waits for a Step in flight (StepAsync) first.
  std::vector<engine::DraftTree> Step(absl::Span<const StepEntry> entries);

  // The same Step, sent on the step thread: returns at once. False (and
  // nothing taken from the entries) while the previous Step is still in
  // flight: one at a time, so reports stay in order and a stopped draftsvc
  // holds at most one. The answers come back through TakeAnswers.
  bool StepAsync(absl::Span<const StepEntry> entries);
  bool StepInFlight() const;

  // A draft tree that an asynchronous Step brought for a sequence, to
  // verify after the first `root_position` tokens of its context (its
  // prompt and the tokens its entries reported, counted from Open).
  struct Answer {
    int64_t handle = 0;
    int64_t root_position = 0;
    engine::DraftTree tree;
  };
  // The answers that arrived since the last call, oldest first (one per
  // entry of each completed Step, empty trees included).
  std::vector<Answer> TakeAnswers();
  // The seconds of each asynchronous Step since the last call.
  std::vector<double> TakeCallSeconds();

  // Reports `accepted` (the last tokens) and closes the session, on the
  // worker thread. The handle is invalid afterwards.
  void Close(int64_t handle, std::vector<int32_t> accepted);

  DraftSessionsStats Stats() const;

  // OK, or the FAILED_PRECONDITION draftsvc answered for the session's
  // explicit sources (see the class comment). OK for unknown handles.
  absl::Status Failure(int64_t handle) const;

  // True iff draftsvc answered the session's open (or the open failed to
  // reach it, or the handle is unknown or closing): Failure() then says
  // whether draftsvc refused the session's sources. Never blocks long (the
  // lock only).
  bool OpenAnswered(int64_t handle) const;

  // Blocks until draftsvc answered the session's first open (or the open
  // failed to reach it, or the handle is unknown or closing) or until
  // `deadline`, whichever comes first. Failure() then says whether draftsvc
  // refused the session's sources.
  void WaitOpened(int64_t handle, absl::Time deadline) const;

 private:
  // kClosed: the open failed for a transient reason (retried after the
  // backoff); kFailed: draftsvc refused it (e.g. the namespace holds another
  // vocabulary): no drafts for this sequence.
  enum class State { kOpening, kOpen, kClosed, kFailed, kClosing };
  struct Session {
    std::string id;
    std::string name_space;
    int32_t branch_length = 0;
    std::vector<lookahead::v1::DraftSource> sources;
    lookahead::v1::DraftSampling sampling;
    absl::Status failure;  // Not OK: no more drafts (see Failure()).
    State state = State::kOpening;
    std::vector<int32_t> context;     // Prompt + every accepted token.
    size_t prompt_size = 0;
    std::vector<int32_t> unreported;  // Accepted, not yet given to draftsvc.
    // Tokens draftsvc acknowledged since the session (re)opened: the next
    // report's SessionStep.accepted_offset.
    int64_t applied = 0;
  };
  struct Task {
    bool close = false;
    int64_t handle = 0;
    std::vector<int32_t> tokens;  // Open: the (re)open prompt.
  };

  // One Step's requests, with per request the entry it came from, the
  // sequence's handle and the position its draft follows.
  struct Batch {
    std::vector<DraftRequest> requests;
    std::vector<size_t> sent;
    std::vector<int64_t> handles;
    std::vector<int64_t> roots;
    void Add(DraftRequest request, size_t entry, int64_t handle,
             int64_t root) {
      requests.push_back(std::move(request));
      sent.push_back(entry);
      handles.push_back(handle);
      roots.push_back(root);
    }
  };
  // Takes the entries' tokens into their sessions and builds the requests.
  Batch Prepare(absl::Span<const StepEntry> entries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `batch` (REQUIRES: step_in_flight_, set by the caller), clears
  // step_in_flight_ and returns one tree per request.
  std::vector<engine::DraftTree> Send(Batch* batch) ABSL_LOCKS_EXCLUDED(mu_);
  // Applies a Step's results to the sessions: offsets, reopens, failures,
  // backoff. Returns one tree per request.
  std::vector<engine::DraftTree> Finish(
      Batch* batch,
      absl::StatusOr<std::vector<absl::StatusOr<engine::DraftTree>>>* results)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StepLoop();

  void Enqueue(Task task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Erase(std::map<int64_t, Session>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop();
  void RunOpen(const Task& task);
  void RunClose(const Task& task);

  DraftClient* const client_;
  const int32_t vocab_size_;
  const DraftSessionsOptions options_;

  mutable absl::Mutex mu_;
  std::map<int64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Time next_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  DraftSessionsStats stats_ ABSL_GUARDED_BY(mu_);
  // A Step is being sent (Step, or StepAsync's queued_step_ until answered).
  bool step_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Batch> queued_step_ ABSL_GUARDED_BY(mu_);
  std::vector<Answer> answers_ ABSL_GUARDED_BY(mu_);
  std::vector<double> call_seconds_ ABSL_GUARDED_BY(mu_);

  // Last: they start after everything above exists. worker_: opens and
  // closes; stepper_: asynchronous Steps.
  std::thread worker_;
  std::thread stepper_;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_DRAFTSVC_SESSIONS_H_
