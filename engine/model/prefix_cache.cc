#include "engine/model/prefix_cache.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model/torch_status.h"

namespace lookahead::engine {

absl::StatusOr<std::unique_ptr<PrefixCache>> PrefixCache::Create(
    const PrefixCacheOptions& options, const KvCacheShape& layout,
    torch::Dtype dtype, torch::Device device) {
  if (options.block_tokens < 1 || options.capacity_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix cache: block_tokens must be >= 1 and capacity_bytes >= 0, "
        "got ",
        options.block_tokens, " and ", options.capacity_bytes));
  }
  if (layout.layers < 1 || layout.kv_heads < 1 || layout.head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix cache: K/V layout dimensions must be >= 1, got layers=",
        layout.layers, " kv_heads=", layout.kv_heads,
        " head_dim=", layout.head_dim));
  }
  return std::unique_ptr<PrefixCache>(
      new PrefixCache(options, layout, dtype, device));
}

PrefixCache::PrefixCache(const PrefixCacheOptions& options,
                         const KvCacheShape& layout, torch::Dtype dtype,
                         torch::Device device)
    : options_(options),
      layout_(layout),
      dtype_(dtype),
      device_(device),
      block_bytes_(int64_t{2} * layout.layers * layout.kv_heads *
                   options.block_tokens * layout.head_dim *
                   static_cast<int64_t>(c10::elementSize(dtype))) {
  stats_.capacity_bytes = options.capacity_bytes;
}

PrefixHit PrefixCache::Lookup(absl::Span<const int32_t> prompt) {
  const int bt = options_.block_tokens;
  // At least one prompt token stays uncovered.
  const size_t max_blocks = prompt.empty() ? 0 : (prompt.size() - 1) / bt;
  PrefixHit hit;
  std::vector<Entry*> chain;
  Key key;
  absl::MutexLock lock(&mu_);
  ++stats_.lookups;
  stats_.lookup_tokens += static_cast<int64_t>(prompt.size());
  for (size_t b = 0; b < max_blocks; ++b) {
    key.tokens.assign(prompt.begin() + b * bt, prompt.begin() + (b + 1) * bt);
    auto it = blocks_.find(key);
    if (it == blocks_.end()) break;
    chain.push_back(&it->second);
    hit.blocks_.push_back(it->second.block);
    key.parent = it->second.block->id;
  }
  // Deepest first, so parents end up more recently used than children.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) Touch(*it);
  hit.tokens_ = static_cast<int>(chain.size()) * bt;
  stats_.hit_tokens += hit.tokens_;
  return hit;
}

absl::Status PrefixCache::Restore(const PrefixHit& hit, KvCache* cache) const {
  if (hit.empty()) return absl::OkStatus();
  if (cache == nullptr || cache->Length() != 0) {
    return absl::FailedPreconditionError(
        "a prefix hit is restored into an empty KV cache only");
  }
  if (hit.tokens() > cache->Capacity()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("prefix hit of ", hit.tokens(),
                     " tokens > KV cache capacity ", cache->Capacity()));
  }
  for (const auto& block : hit.blocks_) {
    absl::Status status = cache->AppendCommitted(block->k, block->v);
    if (!status.ok()) {
      (void)cache->Truncate(0);
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status PrefixCache::CheckLayout(const KvCache& cache) const {
  const KvCacheShape& s = cache.shape();
  if (s.layers != layout_.layers || s.kv_heads != layout_.kv_heads ||
      s.head_dim != layout_.head_dim || cache.k().scalar_type() != dtype_ ||
      cache.k().device() != device_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache (layers=", s.layers, " kv_heads=", s.kv_heads,
        " head_dim=", s.head_dim, ", ", c10::toString(cache.k().scalar_type()),
        " on ", cache.k().device().str(),
        ") does not match the prefix cache's (layers=", layout_.layers,
        " kv_heads=", layout_.kv_heads, " head_dim=", layout_.head_dim, ", ",
        c10::toString(dtype_), " on ", device_.str(), ")"));
  }
  return absl::OkStatus();
}

absl::Status PrefixCache::Insert(absl::Span<const int32_t> tokens,
                                 const KvCache& cache) {
  absl::Status layout = CheckLayout(cache);
  if (!layout.ok()) return layout;
  if (static_cast<int64_t>(tokens.size()) > cache.Length()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot cache ", tokens.size(), " tokens from a KV cache ",
                     "holding ", cache.Length(), " committed tokens"));
  }
  const int bt = options_.block_tokens;
  const int blocks = static_cast<int>(tokens.size()) / bt;
  auto block_key = [&](int b, int64_t parent) {
    return Key{parent, std::vector<int32_t>(tokens.begin() + b * bt,
                                            tokens.begin() + (b + 1) * bt)};
  };
  // 1. The cached part of the chain (held by `parent` from here on, so its
  // entries stay put).
  std::shared_ptr<const Block> parent;
  std::vector<Entry*> chain;
  int first_new = 0;
  {
    absl::MutexLock lock(&mu_);
    for (; first_new < blocks; ++first_new) {
      auto it = blocks_.find(block_key(first_new, parent ? parent->id : 0));
      if (it == blocks_.end()) break;
      chain.push_back(&it->second);
      parent = it->second.block;
    }
    if (first_new == blocks) {
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) Touch(*it);
      return absl::OkStatus();
    }
  }
  // 2. Copies of the new blocks' rows, outside the lock.
  std::vector<torch::Tensor> k(blocks), v(blocks);
  absl::Status copied = TorchStatus("PrefixCache::Insert", [&] {
    for (int b = first_new; b < blocks; ++b) {
      k[b] = cache.k().narrow(2, int64_t{b} * bt, bt).clone();
      v[b] = cache.v().narrow(2, int64_t{b} * bt, bt).clone();
    }
  });
  if (!copied.ok()) return copied;
  // 3. Link them in (another Insert may have added some meanwhile).
  absl::MutexLock lock(&mu_);
  for (int b = first_new; b < blocks; ++b) {
    Key key = block_key(b, parent ? parent->id : 0);
    auto it = blocks_.find(key);
    if (it == blocks_.end()) {
      if (!MakeRoom(block_bytes_)) {
        stats_.skipped_blocks += blocks - b;
        break;
      }
      auto block = std::make_shared<Block>();
      block->id = next_id_++;
      block->parent = parent;
      block->k = std::move(k[b]);
      block->v = std::move(v[b]);
      it = blocks_.emplace(std::move(key), Entry{std::move(block), {}}).first;
      it->second.lru = lru_.insert(lru_.end(), &it->first);
      ++stats_.inserted_blocks;
      ++stats_.blocks;
      stats_.bytes += block_bytes_;
      stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.bytes);
    }
    chain.push_back(&it->second);
    parent = it->second.block;
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) Touch(*it);
  return absl::OkStatus();
}

void PrefixCache::Touch(Entry* entry) {
  lru_.splice(lru_.end(), lru_, entry->lru);
}

bool PrefixCache::MakeRoom(int64_t bytes) {
  const int64_t cap = options_.capacity_bytes;
  // Children precede their parents in lru_ (a chain is touched deepest
  // first), so one pass frees a whole unheld branch, leaf first; another
  // pass runs only if an eviction released a parent already passed.
  bool evicted = true;
  while (evicted && stats_.bytes + bytes > cap) {
    evicted = false;
    for (auto it = lru_.begin();
         it != lru_.end() && stats_.bytes + bytes > cap;) {
      auto found = blocks_.find(**it);
      if (found->second.block.use_count() > 1) {  // held
        ++it;
        continue;
      }
      it = lru_.erase(it);
      blocks_.erase(found);
      --stats_.blocks;
      stats_.bytes -= block_bytes_;
      ++stats_.evicted_blocks;
      evicted = true;
    }
  }
  return stats_.bytes + bytes <= cap;
}

PrefixCacheStats PrefixCache::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace lookahead::engine
