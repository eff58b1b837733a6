// NgramPool: one namespace's pool of model-derived n-grams (issue 15): the
// verifier's recycled top-k predictions and Jacobi lookahead n-grams. Key =
// the last 1..max_key_tokens tokens; value = a bounded set of continuations
// with counts. A dynamic draft source (this namespace's past steps, every
// replica), never a session's private one. Groundwork: not yet wired in.
//
// Thread-safety: all methods are safe to call concurrently (Lookup and
// Stats take a reader lock, Add the writer lock; an automatic prune runs
// inside the Add that crosses capacity_entries).
//
// Persistence (later): the state is a map from key to a list of
// (continuation, count), i.e. rows "key tokens | continuation tokens ->
// count" with ids big-endian as in trie_format.h. Every Add/prune will emit
// set-count/delete rows into the TrieStore's mutation batches, so the pool
// gets the trie's crash-safety. The in-memory recency stamp (eviction tie
// break only) is not persisted; a restore assigns stamps in key order.
#ifndef LOOKAHEAD_DRAFTSVC_NGRAM_POOL_H_
#define LOOKAHEAD_DRAFTSVC_NGRAM_POOL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

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
  absl::Status Add(absl::Span<const int32_t> key,
                   absl::Span<const int32_t> continuation, int64_t count = 1);

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

  // Cuts to low water and halves (see Add). REQUIRES: mu_ held.
  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const NgramPoolOptions options_;

  mutable absl::Mutex mu_;
  // Key: the key's ids as 4-byte big-endian integers (EncodeKey).
  absl::flat_hash_map<std::string, ContinuationSet> keys_ ABSL_GUARDED_BY(mu_);
  int64_t entries_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_stamp_ ABSL_GUARDED_BY(mu_) = 0;
  NgramPoolStats stats_ ABSL_GUARDED_BY(mu_);  // Counters; sizes filled late.
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_NGRAM_POOL_H_
