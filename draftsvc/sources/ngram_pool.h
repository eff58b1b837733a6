// NgramPool: one namespace's pool of model-derived n-grams (issue 15): the
// verifier's recycled top-k predictions and Jacobi lookahead n-grams. Key =
// the last 1..max_key_tokens tokens; value = a bounded set of continuations
// with counts. A dynamic draft source (this namespace's past steps, every
// replica), never a session's private one.
//
// Thread-safety: all methods are safe to call concurrently (Lookup, Stats
// and ForEach take a reader lock, Add and Restore the writer lock; an
// automatic prune runs inside the Add that crosses capacity_entries).
//
// Persistence: the state is a set of entries (key, continuation) -> count,
// stored as TrieStore rows (trie_format.h "p" keys). Add reports, as
// TrieMutation::Table::kNgramPool mutations, every entry it creates,
// changes or removes (prunes included); the caller submits them in the
// batch that carries the same step's trie mutations, so the pool gets the
// trie's crash-safety. After a restart, Restore each scanned entry
// (TrieScanVisitor::OnNgram). The in-memory recency stamp (eviction tie
// break only) is not persisted; a restore assigns stamps in call order
// (key order in a scan).
#ifndef LOOKAHEAD_DRAFTSVC_SOURCES_NGRAM_POOL_H_
#define LOOKAHEAD_DRAFTSVC_SOURCES_NGRAM_POOL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "draftsvc/storage/trie_mutation.h"

namespace lookahead::draftsvc {

struct NgramPoolOptions {
  // Longest key (N - 1 of the Jacobi window's N-grams). Longer keys are more
  // specific (better acceptance when they match) but match less often and
  // multiply entries when producers add every suffix. In [1, 8].
  int32_t max_key_tokens = 4;
  // Longest continuation stored (deepest draft branch the pool proposes).
  // Lookahead Decoding's N=5 gives 4; longer rarely pays. In [1, 32].
  int32_t max_continuation_tokens = 4;
  // Continuations kept per key (the bounded set). More keeps rarer
  // alternatives for wide trees; fewer keeps memory and Lookup cheap.
  // In [1, 1024].
  int32_t max_continuations_per_key = 8;
  // Entries ((key, continuation) pairs) before an automatic prune. An entry
  // costs roughly 100 bytes plus 4 per token (estimated, not measured), so
  // 1M entries is ~100-150 MiB.
  // In [1, 2^31 - 2].
  int64_t capacity_entries = int64_t{1} << 20;
  // A prune keeps at most this fraction of capacity_entries (as
  // IndexOptions::low_water for the trie). Lower: rarer prunes, each dropping
  // more. In (0, 1].
  double low_water = 0.75;
  // Whether a prune halves the survivors' counts, rounding down, and drops
  // those that reach 0 (decay-and-drop: an entry must be seen again between
  // prunes to survive a second). false: a prune only cuts to low water.
  bool prune_halves_counts = true;
};

// One continuation returned by Lookup.
struct NgramMatch {
  std::vector<int32_t> continuation;
  int64_t count = 0;
  int32_t key_length = 0;  // Tokens of the context suffix it was stored under.
};

struct NgramPoolStats {
  int64_t entries = 0;         // (key, continuation) pairs now.
  int64_t keys = 0;            // Keys with at least one continuation now.
  int64_t prunes = 0;          // Automatic prunes so far.
  int64_t pruned_entries = 0;  // Entries dropped by those prunes.
  int64_t evicted = 0;         // Continuations replaced under a full key.
  int64_t rejected = 0;        // New continuations refused by a full key.
};

class NgramPool {
 public:
  // Counts saturate here.
  static constexpr int64_t kMaxCount = 0xFFFFFFFF;

  // Returns INVALID_ARGUMENT naming the field iff `options` is unusable.
  static absl::Status ValidateOptions(const NgramPoolOptions& options);
  // ValidateOptions, then an empty pool.
  static absl::StatusOr<std::unique_ptr<NgramPool>> Create(
      NgramPoolOptions options);
  NgramPool(const NgramPool&) = delete;
  NgramPool& operator=(const NgramPool&) = delete;

  // Records `continuation` after `key` (exactly that key: a producer that
  // wants shorter keys to match too adds each suffix it wants). Returns
  // INVALID_ARGUMENT, storing nothing, iff key or continuation is empty or
  // longer than max_key_tokens / max_continuation_tokens, holds a negative
  // id, or count is outside [1, kMaxCount]. Ids are not checked against a
  // vocabulary (the service does that).
  //
  // Under one key the continuations stay prefix-free:
  //  - identical, or a prefix of a stored one: its count is added to the
  //    stored one (the best-ranked, if several extend it);
  //  - extends stored ones: they are removed and their counts added to it.
  // A prefix proposes no draft token its extension does not, so it would
  // only waste a slot of the bounded set; its evidence is for the shared
  // first tokens, and the tree builder's per-depth calibration discounts
  // the deeper ones.
  //  - otherwise, if the key holds max_continuations_per_key: it replaces
  //    the lowest in retention order (count, then most recently added)
  //    iff it would rank above it there, i.e. iff its count is >= that
  //    one's (at equal counts the newer wins: FIFO among equals, as
  //    Lookahead Decoding's per-key pool); else it is dropped (rejected).
  // Then, if entries exceed capacity_entries, the pool is pruned: it keeps
  // the floor(capacity_entries * low_water) best entries in retention order
  // (as TokenTrie::Prune keeps the best nodes by count), then, with
  // prune_halves_counts, sets each survivor's count to floor(count / 2) and
  // drops those at 0. (The trie rounds up because a node must stay to keep
  // its descendants; pool entries are independent, so one-off predictions,
  // the bulk of the recycled top-k, decay out instead of filling the pool.)
  //
  // If `mutations` is not null, appends to it, in apply order, the
  // kNgramPool mutations that replay this Add on a store holding the pool's
  // previous entries: kSetCount with the new count of each entry created or
  // changed (merges, the absorbing extension, halved survivors) and
  // kDeleteSubtree for each entry removed (absorbed prefixes, the evicted
  // one, pruned ones). Nothing is appended on error or rejection. A prune
  // with prune_halves_counts appends one whole-pool delete (kDeleteSubtree
  // with an empty path) and then a kSetCount per survivor; without, a
  // delete per entry it drops. REQUIRES of the caller: one Add's mutations
  // go to the store in one batch (atomic), or a crash between the wipe and
  // the survivors would lose the survivors.
  absl::Status Add(absl::Span<const int32_t> key,
                   absl::Span<const int32_t> continuation, int64_t count = 1,
                   std::vector<TrieMutation>* mutations = nullptr);

  // Rebuilds the pool from stored entries (a TrieStore scan): adds the
  // entry as Add does (same rules, stats and stamps), but as one that is
  // already a stored row with `count`, so a consistent store needs no
  // mutations. Returns INVALID_ARGUMENT, storing nothing, iff Add would
  // (empty or too long for the options, negative id, count outside
  // [1, kMaxCount]).
  //
  // A store written under other options (or damaged) can hold entries that
  // break the pool's invariants; the pool stays valid: a continuation that
  // prefixes a restored one is merged into it (in scan order prefixes come
  // first, so the extension absorbs them), a key past
  // max_continuations_per_key keeps the best in retention order, entries
  // past capacity_entries trigger a prune. If `mutations` is not null it
  // receives the writes that make the store match the pool again: deletes
  // of the rows merged away, dropped or pruned (one by one: rows not
  // restored yet must stay), set-counts of changed ones,
  // and, on INVALID_ARGUMENT for an entry that has a row (ids >= 0, key of
  // 1..255 tokens), the delete of that row (the pool can never hold it under
  // these options). Submit them after the scan.
  absl::Status Restore(absl::Span<const int32_t> key,
                       absl::Span<const int32_t> continuation, int64_t count,
                       std::vector<TrieMutation>* mutations = nullptr);

  // Calls `visit` for every entry in store order: key length, key,
  // continuation (ids ascending, a continuation before its extensions).
  // Holds the reader lock throughout: `visit` must not call the pool. The
  // spans are valid only during the call. O(entries log entries).
  void ForEach(absl::FunctionRef<void(absl::Span<const int32_t> key,
                                      absl::Span<const int32_t> continuation,
                                      int64_t count)>
                   visit) const;

  // Up to max_results continuations for what follows `context` (oldest
  // first). For k = min(|context|, max_key_tokens) down to 1, the key of the
  // last k tokens contributes its continuations best first until
  // max_results are returned: longer (more specific) keys first, shorter
  // ones only fill what is left (so a key without continuations falls back
  // to the next shorter), a continuation already returned for a longer key
  // skipped. Within a key: count descending, then longer first, then
  // tokens ascending, so the order is a function of the pool's contents
  // (the same after a restore and on every replica). Empty if
  // max_results <= 0 or nothing matches; negative ids match nothing.
  std::vector<NgramMatch> Lookup(absl::Span<const int32_t> context,
                                 int32_t max_results) const;

  NgramPoolStats Stats() const;

 private:
  struct Continuation {
    std::vector<int32_t> tokens;
    uint32_t count = 0;
    uint64_t stamp = 0;  // Last Add that touched it; eviction ties only.
  };
  // A key's continuations, kept in Lookup order (RanksBefore).
  using ContinuationSet = std::vector<Continuation>;

  explicit NgramPool(NgramPoolOptions options);

  // Lookup order: count desc, longer first, tokens asc.
  static bool RanksBefore(const Continuation& a, const Continuation& b);
  // Retention order: count desc, then newer first (stamps are unique).
  static bool RetainedBefore(const Continuation& a, const Continuation& b);

  // Checks Add's argument rules.
  absl::Status CheckEntry(absl::Span<const int32_t> key,
                          absl::Span<const int32_t> continuation,
                          int64_t count) const;
  // Add's rules for a checked entry. `stored`: the entry is already a row
  // with `count` (Restore), so only changes to it are emitted. Appends to
  // `mutations` if not null. REQUIRES: mu_ held.
  void InsertLocked(absl::Span<const int32_t> key,
                    absl::Span<const int32_t> continuation, uint32_t count,
                    bool stored, std::vector<TrieMutation>* mutations)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cuts to low water and halves (see Add); appends the removals and new
  // counts to `mutations` if not null, as one whole-pool delete plus the
  // survivors iff `may_wipe` and halving. REQUIRES: mu_ held.
  void PruneLocked(std::vector<TrieMutation>* mutations, bool may_wipe)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The target-th best (count, stamp) in retention order; stamps are
  // unique, so exactly `target` entries are at or above it.
  // REQUIRES: 0 < target <= entries_; mu_ held.
  std::pair<uint32_t, uint64_t> PruneThresholdLocked(int64_t target) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // PruneLocked's cut of one key's `set` (encoded key `encoded_key`): drops
  // the entries below `threshold` (every one iff `keep_none`) and, when
  // halving, halves the rest and drops those that reach 0; re-sorts the
  // rest. Appends their deletes iff `emit_deletes` and the new counts iff
  // `mutations` is not null. `key`: a buffer for the decoded key.
  void PruneKey(absl::string_view encoded_key, ContinuationSet* set,
                bool keep_none, std::pair<uint32_t, uint64_t> threshold,
                bool emit_deletes, std::vector<TrieMutation>* mutations,
                std::vector<int32_t>* key) const;

  const NgramPoolOptions options_;

  mutable absl::Mutex mu_;
  // Key: the key's ids as 4-byte big-endian integers (EncodeKey).
  absl::flat_hash_map<std::string, ContinuationSet> keys_ ABSL_GUARDED_BY(mu_);
  int64_t entries_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_stamp_ ABSL_GUARDED_BY(mu_) = 0;
  NgramPoolStats stats_ ABSL_GUARDED_BY(mu_);  // Counters; sizes filled late.
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SOURCES_NGRAM_POOL_H_
