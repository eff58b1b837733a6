// AssistantDrafter: draftsvc's assistant-model draft source. Per session it
// keeps the context (prompt + accepted tokens, as ids) and an assistant KV
// cache advanced incrementally (only new tokens run; a cache whose tail
// diverged from the accepted tokens is rolled back to the common prefix),
// and drafts "stairs": a greedy (or seeded-sampled) chain, with the
// runner-up token as a sibling leaf at the first level(s) when the budget
// allows, every node carrying the assistant's probability so a mixer can
// rank it against other sources. After a Draft a background worker keeps
// drafting the same chain on the assumption that all of it and the
// assistant's next token are accepted, so the next Draft of a session whose
// context matches answers at once (a pre-draft hit) without model work.
// KV memory is bounded: whole sessions are evicted least recently used and
// recomputed from their context when next used.
//
// Thread-safety: every method is safe to call concurrently (draftsvc's Step
// threads and the pre-draft workers). Calls on one session serialize on
// that session; a model pass runs under its session's lock only, so
// sessions draft in parallel.
#ifndef LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_DRAFTER_H_
#define LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_DRAFTER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "draftsvc/sources/assistant/assistant_engine.h"
#include "draftsvc/sources/assistant/assistant_model.h"
#include "engine/model/draft_tree.h"
#include "engine/model/kv_cache.h"
#include "engine/model/sampler.h"

namespace lookahead::draftsvc {

class AssistantDrafter {
 public:
  // `model` must outlive the drafter. INVALID_ARGUMENT naming the field for
  // max_cached_tokens < 1, predraft_threads < 0, max_chain_tokens < 1,
  // top2_levels < 0 or top2_budget_per_level < 1.
  static absl::StatusOr<std::unique_ptr<AssistantDrafter>> Create(
      const AssistantModel* model, const AssistantDrafterOptions& options);
  // Stops and joins the pre-draft workers.
  ~AssistantDrafter();

  // Starts a session whose context is `prompt`. Nothing runs yet (a
  // pre-draft worker starts prefilling in the background). INVALID_ARGUMENT
  // for an empty prompt, an id outside the vocabulary (naming its index) or
  // bad sampling (ValidateSamplingParams); ALREADY_EXISTS for an open id.
  absl::Status Open(absl::string_view session_id,
                    absl::Span<const int32_t> prompt,
                    const engine::SamplingParams& sampling);

  // Appends `accepted` (the step's accepted draft tokens and the verifier's
  // own next token) to the session's context. Cheap: the cache catches up
  // at the next Draft or in the background. NOT_FOUND for an unknown
  // session; INVALID_ARGUMENT for an id outside the vocabulary.
  absl::Status Advance(absl::string_view session_id,
                       absl::Span<const int32_t> accepted);

  // Drafts below the session's last context token: at most `budget` nodes
  // (the shape in AssistantDrafterOptions), answered from a pre-draft when
  // one matches, else drafted now while absl::Now() + the measured cost of
  // one pass stays before `deadline`; a deadline already past returns what
  // the pre-draft has (possibly nothing) without model work. The draft
  // follows the session's sampling: greedy, or the verifier's own seeded
  // draw (SampleToken at the token's absolute position) applied to the
  // assistant's logits. NOT_FOUND for an unknown session; INVALID_ARGUMENT
  // for budget < 0; a model error (out of memory) is returned as is.
  absl::StatusOr<AssistantDraft> Draft(absl::string_view session_id, int budget,
                                       absl::Time deadline);

  // Ends a session and frees its cache (waits for a pass in progress on
  // it). NOT_FOUND for an unknown session.
  absl::Status Close(absl::string_view session_id);

  // Seconds of model passes run for the session since the previous call
  // (drafting, catch-up and pre-drafting alike), and resets them: what the
  // session's drafts cost, for the verifier's gate. Never waits for a pass
  // in progress (it is counted by the next call). 0 for an unknown session.
  double TakeSeconds(absl::string_view session_id);

  // Blocks until no pre-draft work is queued or running (tests; shutdown).
  void WaitForPredraftIdle();

  AssistantDrafterStats stats() const;

  // Seconds of one one-token model pass: measured by Create before any
  // session runs (so a verifier knows what the assistant costs before it
  // first asks), then a moving average of the sessions' one-token passes.
  double seconds_per_pass() const { return PassSeconds(); }
  // seconds_per_pass(), timed again first (as Create does, ~6 passes) when
  // no one-token pass was timed for `max_age`: verifiers that stopped
  // asking an assistant that cost more than it added learn when the
  // machine's load changed that.
  double RecentSecondsPerPass(absl::Duration max_age) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One drafted token: the chain's choice at its position and the best
  // other token (the runner-up sibling), each with its probability.
  struct Node {
    int32_t token = 0;
    float probability = 0;
    int32_t runner_up = -1;  // -1: none (a vocabulary of one)
    float runner_up_probability = 0;
  };
  // A session's state. Positions are absolute token indices.
  //   context: the truth, prompt + accepted tokens.
  //   cached (C = its size): the tokens whose K/V the cache holds, a prefix
  //     of context followed by drafted tokens; logits: the assistant's
  //     next-token logits after them (valid iff has_logits).
  //   nodes: the drafted tokens at positions [nodes_begin, E), E =
  //     nodes_begin + nodes.size(), with E in {C, C + 1} (when E = C + 1 the
  //     last node is chosen from `logits` but not yet run) and nodes_begin
  //     <= C; cached[p] = nodes[p - nodes_begin].token for p in
  //     [nodes_begin, C).
  struct Session {
    explicit Session(std::string session_id,
                     const engine::SamplingParams& params)
        : id(std::move(session_id)), sampling(params) {}
    const std::string id;
    const engine::SamplingParams sampling;
    // Drafts waiting for `mu`: a pre-draft worker leaves the session to
    // them rather than start another pass (it would win the lock again
    // microseconds after releasing it, and starve a Step).
    std::atomic<int> waiting{0};
    // Nanoseconds of passes not yet taken by TakeSeconds (atomic, so a
    // Step reads it without waiting for a pass that holds `mu`).
    std::atomic<int64_t> unreported_ns{0};

    absl::Mutex mu;
    bool closed ABSL_GUARDED_BY(mu) = false;
    std::vector<int32_t> context ABSL_GUARDED_BY(mu);
    // (layers, kv_heads, capacity, head_dim) K and V; null when evicted.
    std::unique_ptr<engine::KvCache> cache ABSL_GUARDED_BY(mu);
    std::vector<int32_t> cached ABSL_GUARDED_BY(mu);
    std::vector<float> logits ABSL_GUARDED_BY(mu);  // (vocab)
    bool has_logits ABSL_GUARDED_BY(mu) = false;
    std::vector<Node> nodes ABSL_GUARDED_BY(mu);
    int64_t nodes_begin ABSL_GUARDED_BY(mu) = 0;
    // The pre-draft worker drafts until E reaches this.
    int64_t predraft_until ABSL_GUARDED_BY(mu) = 0;
  };
  // What the drafter keeps per session outside the session's lock.
  struct Entry {
    std::shared_ptr<Session> session;
    int64_t last_used = 0;  // LRU tick
    int64_t slots = 0;      // KV slots its cache holds
  };

  AssistantDrafter(const AssistantModel* model,
                   const AssistantDrafterOptions& options);

  // The session named `session_id` (touching its LRU tick), or NOT_FOUND
  // quoting the id.
  absl::StatusOr<std::shared_ptr<Session>> Find(absl::string_view session_id);
  // The chain length and runner-up levels for a budget (>= 1).
  void Shape(int budget, int* chain, int* siblings) const;
  // Queues a session for pre-drafting (no-op without workers).
  void Schedule(const std::string& session_id) ABSL_LOCKS_EXCLUDED(mu_);
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // True iff the nodes after the context can be read or extended without
  // catching up: context is a prefix of cached (+ a pending node).
  static bool Synced(const Session& s) ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Nodes drafted after the context. REQUIRES: Synced(s).
  static int Available(const Session& s) ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Catches the cache up with the context: rolls it back to the common
  // prefix and runs at most `max_tokens` of the rest (at least one, so the
  // last context token's logits are known). Returns Synced(*s) after.
  absl::StatusOr<bool> SyncStep(Session* s, int max_tokens)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) ABSL_LOCKS_EXCLUDED(mu_);
  // Chooses one more node: a model pass unless the logits after the last
  // node are already there. REQUIRES: Synced(*s).
  absl::Status ExtendOne(Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu)
      ABSL_LOCKS_EXCLUDED(mu_);
  // True iff extending *s needs a model pass (no logits after its end).
  static bool NeedsPass(const Session& s) ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Runs `tokens` through the session's cache as committed tokens, growing
  // (and accounting) the cache as needed; sets the logits.
  // RESOURCE_EXHAUSTED iff --assistant_max_cached_tokens cannot hold it.
  absl::Status RunTokens(Session* s, absl::Span<const int32_t> tokens)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) ABSL_LOCKS_EXCLUDED(mu_);
  // Sets the slots accounted to `s` to `slots`, evicting other sessions'
  // caches least recently used first; false iff the limit cannot be met.
  bool Reserve(Session* s, int64_t slots) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the cache of `s` (evicted or closed) and its slots.
  void DropCache(Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu)
      ABSL_LOCKS_EXCLUDED(mu_);
  AssistantDraft Assemble(const Session& s, int chain, int siblings) const
      ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Seconds one model pass is expected to take (an average of the last).
  double PassSeconds() const ABSL_LOCKS_EXCLUDED(mu_);
  // Times a few one-token passes on a scratch cache into pass_seconds_
  // (their median); the model's errors (out of memory) as they are.
  absl::Status Calibrate() ABSL_LOCKS_EXCLUDED(mu_);
  // Locks s->mu unless `deadline` passes first; true iff it did.
  static bool LockBefore(Session* s, absl::Time deadline)
      ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true, s->mu);
  // One pass of pre-drafting on `s`; true iff there is more to do.
  bool PredraftStep(Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool WorkReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AssistantModel* const model_;
  const AssistantDrafterOptions options_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t clock_ ABSL_GUARDED_BY(mu_) = 0;  // LRU tick
  int64_t cached_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  AssistantDrafterStats stats_ ABSL_GUARDED_BY(mu_);
  double pass_seconds_ ABSL_GUARDED_BY(mu_) = 0;  // EWMA of one pass
  absl::Time pass_timed_ ABSL_GUARDED_BY(mu_);     // when it last changed
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> queued_ ABSL_GUARDED_BY(mu_);
  int busy_workers_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_DRAFTER_H_
