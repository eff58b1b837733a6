// DraftIndex: draftsvc's in-memory state. Per namespace, a global counted
// trie of accepted outputs, an n-gram pool (the verifiers' recycled top-k
// predictions and Jacobi n-grams) and the sources' acceptance calibration;
// per open session, a private prompt trie, a private n-gram pool (n-grams
// whose key reaches into the prompt) and the context tail. Every change to
// a global trie or namespace pool is described to a MutationSink (the
// RocksDB store) so that disk follows memory; nothing here waits for it.
//
// Isolation: what comes from a session's prompt (its trie, and recycled
// predictions whose key holds a prompt token or an unverified draft token,
// which may have been copied from the prompt) never leaves the session;
// nothing crosses namespaces.
//
// Sessions hold an idle lease (IndexOptions::session_lease): a background
// thread of the index expires the ones nobody used for that long.
//
// Thread-safety: all methods are safe to call concurrently. Retrieval takes
// the namespace's reader lock; Append/Prune take its writer lock. The
// Restore* methods are for the single-threaded rebuild before serving.
#ifndef LOOKAHEAD_DRAFTSVC_INDEX_DRAFT_INDEX_H_
#define LOOKAHEAD_DRAFTSVC_INDEX_DRAFT_INDEX_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "draftsvc/index/session_source.h"
#include "draftsvc/mix/draft_mix.h"
#include "draftsvc/mix/draft_tree_builder.h"
#include "draftsvc/mix/source_calibration.h"
#include "draftsvc/sources/ngram_pool.h"
#include "draftsvc/sources/token_trie.h"
#include "draftsvc/storage/trie_mutation.h"

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

  // ---- N-gram pools (issue 15) ----
  // Whether namespaces keep n-gram pools (CandidateSource::kNgram). false:
  // predictions and n-grams are validated and dropped, kNgram is never
  // proposed.
  bool ngram_enabled = true;
  // Each namespace's pool (persisted). Its max_key_tokens also bounds the
  // keys of recycled predictions.
  NgramPoolOptions ngram;
  // Each session's private pool (not persisted, dropped at close): the
  // predictions whose key reaches into the prompt or into unverified draft
  // tokens. Its key/continuation lengths are ngram's. Most recycled rows
  // land here (every row below a rejected draft node), so it fills within
  // tens of steps; 4096 entries is ~0.5 MiB per session (estimated from
  // NgramPoolOptions' per-entry cost), pruned like the namespace pool.
  int64_t session_ngram_capacity_entries = 4096;
  // Limits on a Step entry's predictions and n-grams (INVALID_ARGUMENT).
  int32_t max_prediction_trees = 8;  // PredictionTrees per entry.
  int32_t max_prediction_k = 8;      // Top-k per row.
  int32_t max_step_ngrams = 64;      // Jacobi n-grams per entry.
  int32_t ngram_max_tokens = 8;      // Longest n-gram, >= 2.
  // Continuations looked up per pool per expanded draft node: the widest
  // fan-out the pools give one node.
  int32_t ngram_lookup_results = 4;
  // Per-source acceptance estimates (SourceCalibration).
  CalibrationOptions calibration;
};

// The verifier's top-k predictions at every node of a tree it verified
// (v1.PredictionTree, neutral). Spans: owned by the caller for the call.
struct PredictionInput {
  // The tree hangs below the session's last token after the first
  // root_after accepted tokens of the same Append. In [0, accepted size].
  int32_t root_after = 0;
  absl::Span<const int32_t> tokens;      // Verified draft nodes.
  absl::Span<const int32_t> parents;     // parents[i] in [-1, i).
  int32_t k = 0;                         // In [1, max_prediction_k].
  absl::Span<const int32_t> top_tokens;  // k x (tokens size + 1), best first.
};

// One Step entry's input to Append.
struct StepInput {
  absl::Span<const int32_t> accepted;  // Tokens accepted since last Step.
  // How many tokens the session had reported as accepted before
  // accepted[0], counted from OpenSession (v1.SessionStep.accepted_offset):
  // Append applies only the tokens past what the session holds (a report
  // retried after its answer was lost is applied once). nullopt (clients
  // that predate it): every token is applied as sent. >= 0.
  std::optional<int64_t> accepted_offset;
  std::vector<PredictionInput> predictions;       // Oldest first.
  std::vector<absl::Span<const int32_t>> ngrams;  // Jacobi n-grams.
};

// What Append applied of a StepInput.
struct AppendResult {
  // accepted[0, skipped_tokens) the session held already (accepted_offset
  // below what it holds: a retried report) and were not applied again;
  // accepted[skipped_tokens..] were applied. 0 without an offset.
  int64_t skipped_tokens = 0;
};

// A retrieval: which sources, how much, how arranged.
struct RetrieveRequest {
  // 0..max_decoding_length nodes (0: empty tree).
  int32_t decoding_length = 0;
  // Deepest node: 0 = the session's branch_length; else
  // 1..max_branch_length.
  int32_t branch_length = 0;
  DraftMode mode = DraftMode::kHierarchical;
  // CandidateSourceBit set of the sources to draft from. kPrompt or kOutput:
  // both tries. kNgram: the namespace's and the session's pools (ignored when
  // ngram_enabled is false). kAssistant: only through `extra`.
  uint32_t sources = CandidateSourceBit(CandidateSource::kPrompt) |
                     CandidateSourceBit(CandidateSource::kOutput) |
                     CandidateSourceBit(CandidateSource::kNgram);
  // With the session source's kind in `sources`: how long it may draft
  // (SessionSource::Draft); InfinitePast: it is not asked. Its drafting time
  // goes to *source_draft_seconds if that is set.
  absl::Time source_deadline = absl::InfinitePast();
  double* source_draft_seconds = nullptr;
};

// What one source has done in a namespace.
struct SourceStatsRow {
  CandidateSource source = CandidateSource::kOutput;
  // Draft nodes sent (a node counts for each source of its set).
  int64_t proposed = 0;
  // Of those, judged by the next Append (parent accepted or a root child,
  // verified if the verifier said so) and accepted.
  int64_t judged = 0;
  int64_t accepted = 0;
  // Calibrated acceptance of a rank-0 node at depths 1.. given its parent.
  std::vector<float> depth_acceptance;
};

struct OpenResult {
  std::string name_space;    // After defaulting ("" -> "default").
  int64_t prompt_nodes = 0;  // Nodes in the session's prompt trie.
  // Unique among every session this index ever opened (1, 2, ...): tells a
  // reopened id's session from its closed or expired predecessor.
  int64_t serial = 0;
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
  // The namespace's n-gram pool (sessions' private pools excluded).
  int64_t ngram_entries = 0;
  int64_t ngram_keys = 0;
  int64_t ngram_prunes = 0;
  // Every CandidateSource, in enum order.
  std::vector<SourceStatsRow> sources;
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
  // Restores one stored entry of ns's n-gram pool (NgramPool::Restore).
  // Ids are checked against the namespace's vocab_size. A no-op when
  // ngram_enabled is false. The writes that make a store written under
  // other pool options match the pool again are kept for FinishRestore.
  // REQUIRES: RestoreNamespace(ns) done.
  absl::Status RestoreNgram(absl::string_view ns, absl::Span<const int32_t> key,
                            absl::Span<const int32_t> continuation,
                            int64_t count);
  // After the scan: submits what RestoreNgram kept (nothing to wait for).
  void FinishRestore();

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
  // `resumed_output`: how many of the prompt's last tokens are output an
  // earlier session of the sequence already reported (a reopen,
  // v1.OpenSessionRequest.resumed_output_tokens): the first output windows
  // reach back into them. INVALID_ARGUMENT outside [0, prompt size].
  // `sampling`: the request's, for the session source (SetSessionSource).
  absl::StatusOr<OpenResult> OpenSession(
      absl::string_view session_id, absl::string_view ns, int32_t vocab_size,
      absl::Span<const int32_t> prompt_tokens, int32_t branch_length,
      int32_t resumed_output = 0, const SessionSampling& sampling = {});

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
  // As above, plus the entry's recycled predictions and Jacobi n-grams, all
  // validated before anything changes (INVALID_ARGUMENT naming the field,
  // index, value and limit: predictions over max_prediction_trees, a tree
  // over max_decoding_length nodes, parents/tokens size mismatch, parent
  // outside [-1, i), k outside [1, max_prediction_k], top_tokens size not
  // k x (nodes + 1), root_after outside [0, accepted size], more than
  // max_step_ngrams n-grams, an n-gram length outside [2,
  // ngram_max_tokens], any id outside [0, vocab_size)). Then, in order:
  //  1. Calibration: if `accepted` is not empty and the session has a tree
  //     from the last Retrieve, the accepted tokens are walked down it (the
  //     first follows the root); every node whose parent was accepted (root
  //     children always) is judged, accepted iff on that walk, once for
  //     each source of its set at its rank there; the tree is then
  //     forgotten. If a prediction tree hangs below the same root
  //     (root_after 0), it says which nodes the verifier really verified:
  //     the others (cut by its budget or its own mixer) are not judged.
  //  2. The windows go into the trie (as above).
  //  3. Each PredictionTree row (row 0 the root, row i + 1 node i) has the
  //     context "session tokens up to the root + the path root->node"; for
  //     its rank-r prediction t (r = 0..k-1) and j = 1..max_key_tokens, the
  //     pool gets key = the context's last j tokens, continuation = [t],
  //     count k - r (so the best-ranked prediction outweighs the rest and
  //     repeats add up). A key that holds a prompt position, or a draft
  //     node the accepted tokens did not confirm (the draft may have been
  //     copied from the private prompt), goes to the session's pool; the
  //     rest to the namespace's.
  //  4. Each n-gram x (n tokens): key = its first j tokens, continuation =
  //     the rest (cut to max_continuation_tokens), j = 1..min(
  //     max_key_tokens, n - 1), count 1, into the namespace's pool (the
  //     model's own guesses on output positions).
  // The namespace's trie and pool mutations go to the sink in one batch
  // sequence, in apply order, covered by on_durable.
  //
  // Exactly once (input.accepted_offset set; checked and applied under the
  // session's lock, so concurrent copies of one report apply it once): with
  // `held` the accepted tokens the session holds (every token Append applied
  // since OpenSession), offset > held is FAILED_PRECONDITION (nothing
  // changed; the message names accepted_offset, both counts and says to
  // reopen the session; Append returns that code for nothing else);
  // offset < 0 is INVALID_ARGUMENT. Else the first skip = min(held - offset,
  // accepted size) tokens are held already and the entry is applied as if
  // it carried only the rest: when skip > 0 (a retried report) the last
  // tree sent is forgotten unjudged (it went in the answer that was lost),
  // prediction trees rooted in the skipped tokens (root_after < skip) are
  // dropped (they came with them and were applied then) and the rest
  // shifted to root_after - skip, and the n-grams are dropped (they cannot
  // be told from the lost report's); when no token is new (offset +
  // accepted size <= held, accepted not empty) nothing at all is applied.
  // An entry without tokens carries nothing to tell a retry by: applied as
  // sent. `result` (may be null) says how many tokens were skipped.
  absl::Status Append(absl::string_view session_id, const StepInput& input,
                      std::function<void(absl::Status)> on_durable,
                      AppendResult* result = nullptr);

  // Draft tree for the session's next position: at most decoding_length
  // (0..max_decoding_length; 0 -> empty tree) nodes, at most branch_length
  // deep (0 = the session's; else 1..max_branch_length). Never waits for
  // disk. Errors: NOT_FOUND; INVALID_ARGUMENT naming the limit.
  // The tries alone, scores are counts (x prompt_boost): the Ant baseline
  // (benchmarks, ablations). Remembers nothing for calibration.
  absl::StatusOr<MixedDraft> Retrieve(absl::string_view session_id,
                                      int32_t decoding_length,
                                      int32_t branch_length, DraftMode mode);
  // The mixed tree (draft_mix.h) of the requested sources: each proposes up
  // to decoding_length candidates (the tries by BuildTrieDraft, prompt and
  // output separately; the pools by NgramCandidates from the context
  // suffix), MixDrafts keeps the best decoding_length by calibrated
  // probability (score = that probability). The session remembers the tree
  // for the next Append's calibration. Errors as above.
  absl::StatusOr<MixedDraft> Retrieve(absl::string_view session_id,
                                      const RetrieveRequest& request);

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
  // ---- The session source (session_source.h) ----
  // Wires in the draft source with per-session state of its own (the
  // assistant), or none (null). The index then opens, advances and retires
  // its sessions with its own (Open after OpenSession, Advance after Append
  // with the tokens applied, Retired after a session ends, with no lock of
  // the index held) and asks it in Retrieve. Not owned; outlives the index's
  // use. REQUIRES: set before the first OpenSession (not synchronized).
  void SetSessionSource(SessionSource* source) { session_source_ = source; }
  bool has_session_source() const { return session_source_ != nullptr; }
  // The session source's CheckVocabulary; FAILED_PRECONDITION without one.
  absl::Status CheckSourceVocabulary(int32_t vocab_size) const;
  // Its Check for the session; NOT_FOUND without one.
  absl::Status CheckSessionSource(absl::string_view session_id) const;
  // Its RecentSecondsPerToken, step_deadline and TakeSeconds (0 / zero /
  // 0 without one).
  double SourceSecondsPerToken() const;
  absl::Duration SourceStepDeadline() const;
  double TakeSourceSeconds(absl::string_view session_id);
  // Starts the session's state in the source without drafting (its first
  // use, so that its background work starts before the first draft).
  void WarmSessionSource(absl::string_view session_id);
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
    Namespace(std::string name_in, int32_t vocab,
              const CalibrationOptions& calibration_options)
        : name(std::move(name_in)),
          vocab_size(vocab),
          calibration(calibration_options) {}
    const std::string name;
    const int32_t vocab_size;
    // Changed with atomics so that OpenSession/Close never wait on `mu`.
    std::atomic<int64_t> open_sessions{0};
    std::atomic<int64_t> prompt_nodes{0};

    // Null iff ngram_enabled is false. Thread-safe itself; changed only
    // under mu's writer lock so that its mutations reach the sink in order
    // with the trie's.
    std::unique_ptr<NgramPool> pool;
    SourceCalibration calibration;

    mutable absl::Mutex mu;  // Readers: retrieval, stats. Writers: changes.
    TokenTrie trie ABSL_GUARDED_BY(mu);
    int64_t prunes ABSL_GUARDED_BY(mu) = 0;
    // RestoreNgram's repair writes, submitted by FinishRestore.
    std::vector<TrieMutation> restore_mutations ABSL_GUARDED_BY(mu);
  };
  // Creates a namespace with its pool. REQUIRES: options_ valid.
  std::unique_ptr<Namespace> MakeNamespace(std::string name,
                                           int32_t vocab_size) const;
  struct Session;

  // Returns the namespace or null. Namespaces are never destroyed before
  // the index, so the pointer stays valid.
  Namespace* FindNamespace(absl::string_view canonical) const;
  // INVALID_ARGUMENT naming the limit unless decoding_length is in [0,
  // max_decoding_length] and branch_length in [0, max_branch_length].
  absl::Status CheckRetrieveLimits(int32_t decoding_length,
                                   int32_t branch_length) const;
  // The open session `session_id` and a copy of its context tail;
  // NOT_FOUND if unknown or closed.
  absl::StatusOr<std::shared_ptr<Session>> SessionContext(
      absl::string_view session_id, absl::InlinedVector<int32_t, 32>* context);
  // Returns the open session and renews its lease; NOT_FOUND if unknown, or
  // if its lease ran out (it is expired now); INVALID_ARGUMENT if the id is
  // longer than any session's.
  absl::StatusOr<std::shared_ptr<Session>> FindSession(
      absl::string_view session_id);
  // OK iff session `session_id` may open in namespace `name` (canonical)
  // with `vocab_size` now: ALREADY_EXISTS, RESOURCE_EXHAUSTED naming the
  // cap, or FAILED_PRECONDITION (another vocab_size) otherwise.
  absl::Status CheckAdmission(absl::string_view session_id,
                              const std::string& name, int32_t vocab_size) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // CheckAdmission under mu_, again after expiring idle sessions if it
  // failed on the id or a cap (an expired session may hold either).
  absl::Status Admit(absl::string_view session_id, const std::string& name,
                     int32_t vocab_size) ABSL_LOCKS_EXCLUDED(mu_);
  // A new, unpublished session (next serial, private pool, prompt trie of
  // every window of branch_length + 1 prompt tokens, context tail).
  // REQUIRES: branch_length >= 1; prompt_tokens checked.
  std::shared_ptr<Session> NewSession(absl::string_view session_id,
                                      absl::Span<const int32_t> prompt_tokens,
                                      int32_t branch_length);
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
  // One pool entry to add (Append step 3/4).
  struct PoolAdd {
    std::vector<int32_t> key;
    std::vector<int32_t> continuation;
    int64_t count = 1;
  };
  // InsertWindowsLocked, plus `pool_adds` into ns's pool (their mutations
  // after the windows', in the same batch sequence).
  bool ApplyLocked(Namespace* ns,
                   absl::Span<const absl::Span<const int32_t>> windows,
                   absl::Span<const PoolAdd> pool_adds,
                   std::function<void(absl::Status)>& on_durable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ns->mu);
  // Append steps 3 and 4: the pool entries of `input`, shared (namespace
  // pool) or private (session pool), for a session whose context tail (the
  // state before `input`) ends at absolute position total_tokens and whose
  // first prompt_length positions are its prompt.
  void CollectPoolAdds(absl::Span<const int32_t> context, int64_t total_tokens,
                       int64_t prompt_length, const StepInput& input,
                       std::vector<PoolAdd>* shared,
                       std::vector<PoolAdd>* private_adds) const;
  // Append's checks of `input` against ns's vocabulary and the limits.
  absl::Status ValidateStepInput(const StepInput& input,
                                 int32_t vocab_size) const;
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
  std::atomic<int64_t> next_serial_{1};
  SessionSource* session_source_ = nullptr;  // Set before serving; may be null.

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

#endif  // LOOKAHEAD_DRAFTSVC_INDEX_DRAFT_INDEX_H_
