// PrefixCache: the K/V of recently prefilled prompt prefixes, in blocks of
// `block_tokens` tokens, so a repeated system prompt or RAG document is not
// prefilled twice. A block holds, for every layer, the K/V rows of
// block_tokens consecutive committed tokens, keyed EXACTLY by (its parent
// block, its tokens): a chain of blocks from the root is a prompt prefix,
// and a block's rows are what prefill computed for its tokens after exactly
// that prefix. Blocks are shared read-only, reference-counted while a
// Lookup's PrefixHit holds them, and evicted least-recently-used (leaves
// before their parents) when the bytes held would pass the cap; a held block
// is never evicted, so Insert skips blocks it cannot make room for and the
// bytes held never exceed the cap.
//
// One cache serves ONE model (the K/V layout is checked, the weights are
// not). It is shared by every namespace: a tenant can tell by timing whether
// another tenant sent the same prefix (a per-namespace key could be added).
//
// Thread-safe: every method may be called concurrently.
#ifndef LOOKAHEAD_ENGINE_MODEL_PREFIX_CACHE_H_
#define LOOKAHEAD_ENGINE_MODEL_PREFIX_CACHE_H_

#include <torch/types.h>

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/model/kv_cache.h"

namespace lookahead::engine {

struct PrefixCacheOptions {
  // Tokens per block (default 32). Only whole blocks are cached, so a
  // prefix is reused up to its last block boundary; smaller blocks reuse
  // more of a prefix that ends mid-block at more bookkeeping per token.
  int block_tokens = 32;
  // Most bytes of K/V held (default 512 MiB; SmolLM2-135M in float32 needs
  // 45 KiB per token, so ~11K tokens). 0 caches nothing.
  int64_t capacity_bytes = int64_t{512} << 20;
};

// Totals since Create, and the state now.
struct PrefixCacheStats {
  int64_t lookups = 0;
  int64_t lookup_tokens = 0;  // prompt tokens looked up
  int64_t hit_tokens = 0;     // of them, found (whole blocks)
  int64_t inserted_blocks = 0;
  int64_t evicted_blocks = 0;
  int64_t skipped_blocks = 0;  // not inserted: no room (all held)
  int64_t blocks = 0;          // held now
  int64_t bytes = 0;           // held now, <= capacity_bytes
  int64_t peak_bytes = 0;      // most ever held
  int64_t capacity_bytes = 0;
};

class PrefixCache;

// The blocks of one Lookup, held (not evictable) until destroyed. Move-only.
class PrefixHit {
 public:
  PrefixHit() = default;
  PrefixHit(PrefixHit&&) = default;
  PrefixHit& operator=(PrefixHit&&) = default;

  // Prompt tokens covered: blocks x block_tokens.
  int tokens() const { return tokens_; }
  bool empty() const { return blocks_.empty(); }

 private:
  friend class PrefixCache;
  struct Block {
    int64_t id = 0;
    // Keeps the parent cached while this block is (leaves are evicted
    // first); null for a first block.
    std::shared_ptr<const Block> parent;
    torch::Tensor k, v;  // (layers, kv_heads, block_tokens, head_dim)
  };
  std::vector<std::shared_ptr<const Block>> blocks_;  // root first
  int tokens_ = 0;
};

class PrefixCache {
 public:
  // An empty cache for K/V of `layout` (layers, kv_heads, head_dim; the
  // capacity is ignored) in `dtype` on `device`. INVALID_ARGUMENT iff
  // block_tokens < 1, capacity_bytes < 0 or a layout dimension is < 1.
  static absl::StatusOr<std::unique_ptr<PrefixCache>> Create(
      const PrefixCacheOptions& options, const KvCacheShape& layout,
      torch::Dtype dtype, torch::Device device);

  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  const PrefixCacheOptions& options() const { return options_; }
  // Bytes of one block (K and V).
  int64_t block_bytes() const { return block_bytes_; }

  // The longest chain of cached blocks that is a prefix of `prompt`, leaving
  // at least one prompt token uncovered (its logits give the first output
  // token). Marks the chain recently used and counts the lookup.
  PrefixHit Lookup(absl::Span<const int32_t> prompt);

  // Appends the hit's K/V rows to `cache` as committed tokens 0 ..
  // hit.tokens() - 1 (a copy: the blocks stay shared and read-only).
  // FAILED_PRECONDITION iff the cache is not empty; the errors of
  // KvCache::AppendCommitted otherwise (wrong layout, no room).
  absl::Status Restore(const PrefixHit& hit, KvCache* cache) const;

  // Caches the whole blocks of `tokens` not cached yet, copying their rows
  // from `cache`, whose committed slots [0, tokens.size()) must hold the K/V
  // that prefill computed for `tokens`. Evicts unheld blocks, least recently
  // used first, to make room; stops (counting skipped blocks) when it
  // cannot. INVALID_ARGUMENT iff tokens.size() > cache.Length() or the
  // cache's layout, dtype or device differ from the cache's.
  absl::Status Insert(absl::Span<const int32_t> tokens, const KvCache& cache);

  PrefixCacheStats Stats() const;

 private:
  using Block = PrefixHit::Block;
  // Exact key of a block: its parent's id (0 for the root) and its tokens.
  struct Key {
    int64_t parent = 0;
    std::vector<int32_t> tokens;

    template <typename H>
    friend H AbslHashValue(H h, const Key& key) {
      return H::combine(std::move(h), key.parent, key.tokens);
    }
    friend bool operator==(const Key& a, const Key& b) {
      return a.parent == b.parent && a.tokens == b.tokens;
    }
  };
  struct Entry {
    std::shared_ptr<const Block> block;
    std::list<const Key*>::iterator lru;  // position in lru_
  };
  // Node-based: lru_ points at keys, which must not move.
  using Map = absl::node_hash_map<Key, Entry>;

  PrefixCache(const PrefixCacheOptions& options, const KvCacheShape& layout,
              torch::Dtype dtype, torch::Device device);

  absl::Status CheckLayout(const KvCache& cache) const;
  // Moves the entry to the most recently used end.
  void Touch(Entry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts unheld blocks, least recently used first, until `bytes` more fit
  // under the cap. Returns false iff they cannot.
  bool MakeRoom(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PrefixCacheOptions options_;
  const KvCacheShape layout_;
  const torch::Dtype dtype_;
  const torch::Device device_;
  const int64_t block_bytes_;

  mutable absl::Mutex mu_;
  // A block is held iff its shared_ptr's use_count() > 1 (a child, a
  // PrefixHit or an Insert in progress); counts only grow under mu_.
  Map blocks_ ABSL_GUARDED_BY(mu_);
  // Least recently used at the front. Points into blocks_' keys.
  std::list<const Key*> lru_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  PrefixCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_PREFIX_CACHE_H_
