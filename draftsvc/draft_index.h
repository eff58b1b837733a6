// DraftIndex: draftsvc's in-memory state. Per namespace, a global counted
// trie of accepted outputs; per open session, a private prompt trie and the
// context tail. Every change to a global trie is described to a MutationSink
// (the RocksDB store) so that disk follows memory; nothing here waits for it.
//
// Sessions hold an idle lease (IndexOptions::session_lease): a background
// thread of the index expires the ones nobody used for that long.
//
// Thread-safety: all methods are safe to call concurrently. Retrieval takes
// the namespace's reader lock; Append/Prune take its writer lock. The
// Restore* methods are for the single-threaded rebuild before serving.
#ifndef LOOKAHEAD_DRAFTSVC_DRAFT_INDEX_H_
#define LOOKAHEAD_DRAFTSVC_DRAFT_INDEX_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "draftsvc/draft_tree_builder.h"
#include "draftsvc/token_trie.h"
#include "draftsvc/trie_mutation.h"

namespace lookahead::draftsvc {

struct IndexOptions {
  // Window length - 1 used when a session asks for branch_length 0: every
  // run of branch_length + 1 tokens becomes a trie path, and drafts are at
  // most this deep. 8 is the Lookahead paper's default; a window of W costs
  // W node updates and W(W+1)/2 path ids of mutations per token, and long
  // branches are rarely accepted to the end.
  int32_t default_branch_length = 8;
  // Largest branch_length a session or retrieval may ask for.
  int32_t max_branch_length = 32;
  // Nodes a namespace's global trie may hold before it is pruned. The
  // paper's heuristic is 16 x decoding_length nodes per active branch root:
  // 16 x 64 x 4096 roots = 4M nodes, ~75 MiB at the measured ~18 bytes/node.
  // More keeps rarer continuations but costs memory, restart time and a
  // longer prune pause (~0.3-1 s at 4M, under the namespace's writer lock).
  int64_t capacity_nodes = int64_t{4} << 20;
  // Pruning (automatic or Prune with target 0) keeps this fraction of
  // capacity_nodes, the most frequent nodes. Lower: rarer prunes, each
  // dropping more. In (0, 1].
  double low_water = 0.75;
  // Whether a prune halves the survivors' counts (rounding up), so that old
  // frequent branches decay and new ones can overtake them (Ant's
  // decay-and-drop). Costs one kSetCount mutation per survivor with count >= 2.
  bool prune_halves_counts = true;
  // A prompt-trie node's score is its count times this. A continuation seen
  // in the session's own prompt (copying from the context, the main win in
  // RAG-like traffic) then outranks output branches seen up to 4 times.
  float prompt_boost = 4.0f;
  // Limits on requests (INVALID_ARGUMENT beyond them).
  int32_t max_prompt_tokens = 32768;  // Per OpenSession.
  int32_t max_step_tokens = 4096;     // Per Append.
  int32_t max_decoding_length = 256;  // Draft tree node budget.
  int32_t max_vocab_size = 1 << 22;   // Largest vocab_size (<= 2^30).
  // Open sessions at once (RESOURCE_EXHAUSTED beyond). Each holds its prompt
  // trie (~20 bytes x ~(branch_length+1) x prompt tokens, at most).
  int64_t max_sessions = 16384;
  // Open sessions per namespace (RESOURCE_EXHAUSTED beyond), so that one
  // tenant's burst or leak cannot take every slot of max_sessions. 4096 is
  // 256 verifiers' worth of 16 running sequences each.
  int64_t max_sessions_per_namespace = 4096;
  // Idle lease of a session: one not opened, stepped (Append) or retrieved
  // from for this long is expired, i.e. closed exactly as CloseSession would
  // close it (its trailing output windows reach the global trie, its prompt
  // trie is dropped), by a background sweeper (every lease/10, 10 ms..10 s)
  // or lazily by the next call that finds it. A verifier that died or lost
  // its network leaves its sessions this long; a live verifier Steps every
  // few tokens and reopens a session it finds expired (NOT_FOUND). Shorter
  // frees a dead verifier's memory sooner but risks expiring a stalled live
  // one (it only loses drafts). InfiniteDuration(): never expire.
  absl::Duration session_lease = absl::Minutes(5);
};

struct OpenResult {
  std::string name_space;    // After defaulting ("" -> "default").
  int64_t prompt_nodes = 0;  // Nodes in the session's prompt trie.
};

struct PruneResult {
  int64_t removed_nodes = 0;
  int64_t remaining_nodes = 0;
};

struct NamespaceStats {
  std::string name_space;
  int32_t vocab_size = 0;
  int64_t output_nodes = 0;  // Global trie nodes (root excluded).
  int64_t capacity = 0;
  int64_t open_sessions = 0;
  int64_t prompt_nodes = 0;  // Summed over open sessions' prompt tries.
  int64_t prunes = 0;
  int64_t memory_bytes = 0;  // Global trie only.
};

class DraftIndex {
 public:
  // The time leases are measured in; absl::Now unless a test passes its own.
  using Clock = std::function<absl::Time()>;

  // Returns INVALID_ARGUMENT naming the field iff `options` is unusable.
  static absl::Status ValidateOptions(const IndexOptions& options);
  // ValidateOptions, then the constructor.
  static absl::StatusOr<std::unique_ptr<DraftIndex>> Create(
      IndexOptions options, MutationSink* sink, Clock clock = nullptr);
  // `sink` may be null (nothing persisted); not owned; must outlive this (or
  // StopExpiry() be called before it goes). Starts the lease sweeper thread
  // unless the lease is infinite. `clock` null: absl::Now.
  // REQUIRES: ValidateOptions(options) is OK.
  DraftIndex(IndexOptions options, MutationSink* sink, Clock clock = nullptr);
  // Stops the sweeper (StopExpiry) first.
  ~DraftIndex();
  DraftIndex(const DraftIndex&) = delete;
  DraftIndex& operator=(const DraftIndex&) = delete;

  // Returns the namespace actually used: "" -> "default"; else INVALID_
  // ARGUMENT unless 1..128 chars of [A-Za-z0-9_.-].
  static absl::StatusOr<std::string> CanonicalNamespace(absl::string_view ns);

  // ---- Rebuild from disk (before serving) ----
  // Creates namespace `ns` with `vocab_size` (no-op if it exists with the
  // same vocab; FAILED_PRECONDITION if with another).
  absl::Status RestoreNamespace(absl::string_view ns, int32_t vocab_size);
  // Sets count(path) = count in ns's global trie, creating the node.
  // REQUIRES: RestoreNamespace(ns) done; path's parent exists (call in key
  // order: parents before children); count >= 1. Emits no mutations.
  absl::Status RestoreNode(absl::string_view ns, absl::Span<const int32_t> path,
                           int64_t count);

  // ---- Sessions ----
  // Opens `session_id` (1..256 bytes) in namespace `ns` (created on first
  // use with `vocab_size`), building its private prompt trie from every
  // window of branch_length + 1 prompt tokens (shorter windows at the end of
  // the prompt included). branch_length 0 = default_branch_length.
  // Errors: INVALID_ARGUMENT (ids, namespace, empty/oversized prompt, token
  // out of [0, vocab_size), vocab_size out of [1, max_vocab_size],
  // branch_length out of [0, max_branch_length]); ALREADY_EXISTS;
  // FAILED_PRECONDITION (vocab_size != namespace's); RESOURCE_EXHAUSTED
  // naming the cap (max_sessions, max_sessions_per_namespace) once expired
  // sessions have been swept. Error messages quote ids with QuoteInput.
  absl::StatusOr<OpenResult> OpenSession(
      absl::string_view session_id, absl::string_view ns, int32_t vocab_size,
      absl::Span<const int32_t> prompt_tokens, int32_t branch_length);

  // Appends accepted tokens (0..max_step_tokens; may be empty) to the
  // session's output: updates its context tail and inserts into the global
  // trie every output window (branch_length + 1 consecutive OUTPUT tokens,
  // never prompt tokens) whose last token arrives now; prunes the namespace
  // if it passes capacity (that call then pays the prune, ~0.3-1 s at 4M
  // nodes, and the namespace's retrievals wait for it). Iff it returns OK,
  // `on_durable` (may be null) runs exactly once: when every mutation batch it
  // submitted is durable, or with the first error; immediately (before
  // returning) if nothing needed persisting. It may run on a store thread while
  // the namespace lock is held: it must not call back into this DraftIndex
  // synchronously. Errors (nothing changed): NOT_FOUND; INVALID_ARGUMENT (too
  // many tokens, a token out of range: names its index, value and bound).
  absl::Status Append(absl::string_view session_id,
                      absl::Span<const int32_t> tokens,
                      std::function<void(absl::Status)> on_durable);

  // Draft tree for the session's next position: at most decoding_length
  // (0..max_decoding_length; 0 -> empty tree) nodes, at most branch_length
  // deep (0 = the session's; else 1..max_branch_length). Never waits for
  // disk. Errors: NOT_FOUND; INVALID_ARGUMENT naming the limit.
  absl::StatusOr<TrieDraft> Retrieve(absl::string_view session_id,
                                     int32_t decoding_length,
                                     int32_t branch_length, DraftMode mode);

  // Closes the session: inserts its trailing output windows shorter than
  // branch_length + 1 (length >= 2; as Ant's final stream_put does) and
  // drops its prompt trie. `on_durable` as in Append. NOT_FOUND if unknown
  // (or expired).
  absl::Status CloseSession(
      absl::string_view session_id,
      std::function<void(absl::Status)> on_durable = nullptr);

  // ---- Leases ----
  // Expires every session idle for at least session_lease at `now`: each is
  // closed as CloseSession closes it (nobody waits for its writes). Returns
  // how many. The sweeper thread calls this; tests may too.
  int64_t ExpireIdleSessions(absl::Time now);
  // Sessions expired so far (by the sweeper or lazily), since construction.
  int64_t ExpiredSessions() const { return expired_sessions_.load(); }
  // Stops the sweeper thread and waits for it (sessions still expire lazily).
  // Call before the sink goes away. Idempotent.
  void StopExpiry();

  // ---- Admin ----
  // Prunes ns's global trie down to target_nodes (0 = low_water x
  // capacity): keeps the most frequent nodes (ties: shallower first, so the
  // kept set stays closed under ancestors), drops the rest, halves the
  // survivors' counts if prune_halves_counts, and submits the kDeleteSubtree
  // / kSetCount mutations. No-op (no decay) if already at or below target.
  // Errors: NOT_FOUND (unknown ns), INVALID_ARGUMENT (target < 0, bad name).
  absl::StatusOr<PruneResult> Prune(
      absl::string_view ns, int64_t target_nodes,
      std::function<void(absl::Status)> on_durable = nullptr);

  // Stats of every namespace (ns_filter empty) or of that one, by name.
  std::vector<NamespaceStats> Stats(absl::string_view ns_filter) const;
  // In-memory bytes per trie node over all tries (global and prompt).
  double BytesPerNode() const;

  // Calls fn(path, count) for every node of ns's global trie in key order
  // (lexicographic by token path: parents before children). Holds the
  // namespace's reader lock: fn must not call into this DraftIndex.
  // NOT_FOUND if ns is unknown.
  absl::Status ForEachNode(
      absl::string_view ns,
      const std::function<void(absl::Span<const int32_t> path, int64_t count)>&
          fn) const;

  const IndexOptions& options() const { return options_; }

 private:
  // One namespace's global trie. Namespaces are never destroyed before the
  // index.
  struct Namespace {
    Namespace(std::string name_in, int32_t vocab)
        : name(std::move(name_in)), vocab_size(vocab) {}
    const std::string name;
    const int32_t vocab_size;
    // Changed with atomics so that OpenSession/Close never wait on `mu`.
    std::atomic<int64_t> open_sessions{0};
    std::atomic<int64_t> prompt_nodes{0};

    mutable absl::Mutex mu;  // Readers: retrieval, stats. Writers: changes.
    TokenTrie trie ABSL_GUARDED_BY(mu);
    int64_t prunes ABSL_GUARDED_BY(mu) = 0;
  };
  struct Session;

  // Returns the namespace or null. Namespaces are never destroyed before
  // the index, so the pointer stays valid.
  Namespace* FindNamespace(absl::string_view canonical) const;
  // Returns the open session and renews its lease; NOT_FOUND if unknown, or
  // if its lease ran out (it is expired now); INVALID_ARGUMENT if the id is
  // longer than any session's.
  absl::StatusOr<std::shared_ptr<Session>> FindSession(
      absl::string_view session_id);
  // Whether `session` has been idle for at least the lease at `now`.
  bool Idle(const Session& session, absl::Time now) const;
  // Finishes closing a session already taken out of sessions_: marks it
  // closed, inserts its trailing output windows, releases its prompt-node
  // count, counts it if `expired`, and last takes it out of its namespace's
  // open_sessions (so a reader that sees it gone sees all of that). Returns
  // whether on_durable was consumed (as InsertWindowsLocked).
  bool Retire(Session& session, bool expired,
              std::function<void(absl::Status)>& on_durable);
  // The sweeper thread's loop: ExpireIdleSessions every sweep period until
  // StopExpiry.
  void SweepLoop();
  // Inserts `windows` into ns's trie, prunes it if over capacity and
  // submits the mutations with `on_durable`. Returns false iff nothing was
  // submitted (on_durable not consumed: the caller runs it after unlocking).
  // REQUIRES: ns->mu held for writing.
  bool InsertWindowsLocked(Namespace* ns,
                           absl::Span<const absl::Span<const int32_t>> windows,
                           std::function<void(absl::Status)>& on_durable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ns->mu);
  // Prunes ns's trie to `target` nodes, appending the mutations' batches.
  // REQUIRES: ns->mu held for writing.
  TokenTrie::PruneStats PruneLocked(Namespace* ns, int64_t target,
                                    std::vector<TrieMutationBatch>* batches)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ns->mu);
  // Submits `batches` in order; on_durable runs once all are durable.
  // Returns false iff `batches` is empty (on_durable untouched).
  // REQUIRES: ns->mu held for writing.
  bool SubmitLocked(Namespace* ns, std::vector<TrieMutationBatch> batches,
                    std::function<void(absl::Status)>& on_durable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ns->mu);

  const IndexOptions options_;
  MutationSink* const sink_;  // May be null.
  const Clock clock_;
  std::atomic<int64_t> expired_sessions_{0};

  mutable absl::Mutex mu_;  // Guards the two maps (not what they point to).
  absl::flat_hash_map<std::string, std::unique_ptr<Namespace>> namespaces_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions_
      ABSL_GUARDED_BY(mu_);

  absl::Mutex sweeper_mu_;
  bool stop_sweeper_ ABSL_GUARDED_BY(sweeper_mu_) = false;
  std::thread sweeper_;  // Last: starts once everything above exists.
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_DRAFT_INDEX_H_
