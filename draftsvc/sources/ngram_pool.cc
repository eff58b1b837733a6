#include "draftsvc/sources/ngram_pool.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace lookahead::draftsvc {
namespace {

constexpr int32_t kMaxKeyTokens = 8;
constexpr int32_t kMaxContinuationTokens = 32;
constexpr int32_t kMaxContinuationsPerKey = 1024;
constexpr int64_t kMaxCapacityEntries = (int64_t{1} << 31) - 2;

// 4 bytes per id, big-endian (trie_format.h's order: numeric = byte order).
std::string EncodeKey(absl::Span<const int32_t> key) {
  std::string out(key.size() * 4, '\0');
  for (size_t i = 0; i < key.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(key[i]);
    out[4 * i] = static_cast<char>(v >> 24);
    out[4 * i + 1] = static_cast<char>(v >> 16);
    out[4 * i + 2] = static_cast<char>(v >> 8);
    out[4 * i + 3] = static_cast<char>(v);
  }
  return out;
}

// EncodeKey's inverse. REQUIRES: encoded.size() % 4 == 0.
std::vector<int32_t> DecodeKey(absl::string_view encoded) {
  std::vector<int32_t> key(encoded.size() / 4);
  for (size_t i = 0; i < key.size(); ++i) {
    const auto* u = reinterpret_cast<const unsigned char*>(&encoded[4 * i]);
    key[i] =
        static_cast<int32_t>((uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) |
                             (uint32_t{u[2]} << 8) | uint32_t{u[3]});
  }
  return key;
}

// Appends the kNgramPool mutation for the entry (key, continuation).
void Emit(std::vector<TrieMutation>* out, TrieMutation::Kind kind,
          absl::Span<const int32_t> key, absl::Span<const int32_t> continuation,
          int64_t value) {
  if (out == nullptr) return;
  TrieMutation m;
  m.kind = kind;
  m.path = NgramMutationPath(key, continuation);
  m.value = value;
  m.table = TrieMutation::Table::kNgramPool;
  out->push_back(std::move(m));
}

void EmitSet(std::vector<TrieMutation>* out, absl::Span<const int32_t> key,
             absl::Span<const int32_t> continuation, uint32_t count) {
  Emit(out, TrieMutation::Kind::kSetCount, key, continuation, int64_t{count});
}

void EmitDelete(std::vector<TrieMutation>* out, absl::Span<const int32_t> key,
                absl::Span<const int32_t> continuation) {
  Emit(out, TrieMutation::Kind::kDeleteSubtree, key, continuation, 0);
}

// Whether (key, continuation) has a store row (trie_format.h's NgramKey):
// the entries Restore may be handed.
bool HasRow(absl::Span<const int32_t> key,
            absl::Span<const int32_t> continuation) {
  auto non_negative = [](absl::Span<const int32_t> tokens) {
    return std::all_of(tokens.begin(), tokens.end(),
                       [](int32_t t) { return t >= 0; });
  };
  return !key.empty() && key.size() <= 255 && !continuation.empty() &&
         non_negative(key) && non_negative(continuation);
}

uint32_t SaturatingAdd(uint32_t a, int64_t b) {
  return static_cast<uint32_t>(
      std::min<int64_t>(NgramPool::kMaxCount, int64_t{a} + b));
}

// INVALID_ARGUMENT iff `tokens` (called `what`) is empty, longer than
// `limit` (the option `limit_name`) or holds a negative id.
absl::Status CheckTokens(absl::string_view what,
                         absl::Span<const int32_t> tokens,
                         absl::string_view limit_name, int32_t limit) {
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  }
  if (tokens.size() > static_cast<size_t>(limit)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", tokens.size(),
                                                   " tokens, more than ",
                                                   limit_name, " ", limit));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " token ", tokens[i], " at position ", i, " is negative"));
    }
  }
  return absl::OkStatus();
}

bool IsPrefix(absl::Span<const int32_t> prefix,
              absl::Span<const int32_t> tokens) {
  return prefix.size() <= tokens.size() &&
         std::equal(prefix.begin(), prefix.end(), tokens.begin());
}

}  // namespace

absl::Status NgramPool::ValidateOptions(const NgramPoolOptions& o) {
  if (o.max_key_tokens < 1 || o.max_key_tokens > kMaxKeyTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_key_tokens ", o.max_key_tokens, " is outside [1, ",
                     kMaxKeyTokens, "]"));
  }
  if (o.max_continuation_tokens < 1 ||
      o.max_continuation_tokens > kMaxContinuationTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_continuation_tokens ", o.max_continuation_tokens,
                     " is outside [1, ", kMaxContinuationTokens, "]"));
  }
  if (o.max_continuations_per_key < 1 ||
      o.max_continuations_per_key > kMaxContinuationsPerKey) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_continuations_per_key ", o.max_continuations_per_key,
                     " is outside [1, ", kMaxContinuationsPerKey, "]"));
  }
  if (o.capacity_entries < 1 || o.capacity_entries > kMaxCapacityEntries) {
    return absl::InvalidArgumentError(absl::StrCat(
        "capacity_entries ", o.capacity_entries, " is outside [1, 2^31 - 2]"));
  }
  if (!(o.low_water > 0.0 && o.low_water <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("low_water ", o.low_water, " is outside (0, 1]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NgramPool>> NgramPool::Create(
    NgramPoolOptions options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  return std::unique_ptr<NgramPool>(new NgramPool(std::move(options)));
}

NgramPool::NgramPool(NgramPoolOptions options) : options_(std::move(options)) {}

bool NgramPool::RanksBefore(const Continuation& a, const Continuation& b) {
  if (a.count != b.count) return a.count > b.count;
  if (a.tokens.size() != b.tokens.size()) {
    return a.tokens.size() > b.tokens.size();
  }
  return a.tokens < b.tokens;
}

bool NgramPool::RetainedBefore(const Continuation& a, const Continuation& b) {
  if (a.count != b.count) return a.count > b.count;
  return a.stamp > b.stamp;
}

absl::Status NgramPool::CheckEntry(absl::Span<const int32_t> key,
                                   absl::Span<const int32_t> continuation,
                                   int64_t count) const {
  RETURN_IF_ERROR(
      CheckTokens("key", key, "max_key_tokens", options_.max_key_tokens));
  RETURN_IF_ERROR(CheckTokens("continuation", continuation,
                              "max_continuation_tokens",
                              options_.max_continuation_tokens));
  if (count < 1 || count > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("count ", count, " is outside [1, ", kMaxCount, "]"));
  }
  return absl::OkStatus();
}

absl::Status NgramPool::Add(absl::Span<const int32_t> key,
                            absl::Span<const int32_t> continuation,
                            int64_t count,
                            std::vector<TrieMutation>* mutations) {
  RETURN_IF_ERROR(CheckEntry(key, continuation, count));
  absl::MutexLock lock(&mu_);
  InsertLocked(key, continuation, static_cast<uint32_t>(count),
               /*stored=*/false, mutations);
  return absl::OkStatus();
}

absl::Status NgramPool::Restore(absl::Span<const int32_t> key,
                                absl::Span<const int32_t> continuation,
                                int64_t count,
                                std::vector<TrieMutation>* mutations) {
  absl::Status valid = CheckEntry(key, continuation, count);
  if (!valid.ok()) {
    // The pool can never hold this row under these options: drop it from
    // the store too, or every restart would meet it again.
    if (HasRow(key, continuation)) EmitDelete(mutations, key, continuation);
    return valid;
  }
  absl::MutexLock lock(&mu_);
  InsertLocked(key, continuation, static_cast<uint32_t>(count),
               /*stored=*/true, mutations);
  return absl::OkStatus();
}

void NgramPool::InsertLocked(absl::Span<const int32_t> key,
                             absl::Span<const int32_t> continuation,
                             uint32_t count, bool stored,
                             std::vector<TrieMutation>* mutations) {
  const uint64_t stamp = ++next_stamp_;
  ContinuationSet& set = keys_[EncodeKey(key)];
  // Identical to or a prefix of a stored continuation: merge into the
  // best-ranked such one (the set is in rank order).
  for (Continuation& c : set) {
    if (IsPrefix(continuation, c.tokens)) {
      c.count = SaturatingAdd(c.count, count);
      c.stamp = stamp;
      EmitSet(mutations, key, c.tokens, c.count);
      // A restored proper prefix's own row goes (an identical one is the
      // same row, just set).
      if (stored && c.tokens.size() != continuation.size()) {
        EmitDelete(mutations, key, continuation);
      }
      std::sort(set.begin(), set.end(), RanksBefore);
      return;
    }
  }
  // Extends stored continuations: absorb them.
  Continuation added;
  added.tokens.assign(continuation.begin(), continuation.end());
  added.count = count;
  added.stamp = stamp;
  const size_t before = set.size();
  set.erase(std::remove_if(set.begin(), set.end(),
                           [&](const Continuation& c) {
                             if (!IsPrefix(c.tokens, continuation)) {
                               return false;
                             }
                             added.count = SaturatingAdd(added.count, c.count);
                             EmitDelete(mutations, key, c.tokens);
                             return true;
                           }),
            set.end());
  const bool absorbed = set.size() != before;
  entries_ -= static_cast<int64_t>(before - set.size());

  if (set.size() < static_cast<size_t>(options_.max_continuations_per_key)) {
    if (!stored || absorbed) {
      EmitSet(mutations, key, added.tokens, added.count);
    }
    set.push_back(std::move(added));
    ++entries_;
  } else {
    // Full, so nothing was absorbed (that would have freed a slot).
    auto victim = std::max_element(set.begin(), set.end(), RetainedBefore);
    if (!RetainedBefore(added, *victim)) {
      ++stats_.rejected;
      if (stored) EmitDelete(mutations, key, continuation);
      return;
    }
    EmitDelete(mutations, key, victim->tokens);
    if (!stored) EmitSet(mutations, key, added.tokens, added.count);
    *victim = std::move(added);
    ++stats_.evicted;
  }
  std::sort(set.begin(), set.end(), RanksBefore);

  // A restore's prune must not wipe: rows not scanned yet are kept as they
  // are (no mutation), so a wipe would delete them.
  if (entries_ > options_.capacity_entries) {
    PruneLocked(mutations, /*may_wipe=*/!stored);
  }
}

void NgramPool::PruneLocked(std::vector<TrieMutation>* mutations,
                            bool may_wipe) {
  const int64_t target = std::max<int64_t>(
      0, static_cast<int64_t>(static_cast<double>(options_.capacity_entries) *
                              options_.low_water));
  const int64_t before = entries_;
  if (before <= target) return;
  const bool keep_none = target == 0;
  const std::pair<uint32_t, uint64_t> threshold =
      keep_none ? std::pair<uint32_t, uint64_t>{0, 0}
                : PruneThresholdLocked(target);

  // A halving prune rewrites every survivor anyway, and most entries (the
  // one-off predictions) die: one range delete of the whole pool plus the
  // survivors beats a delete per dead entry (1M rows: seconds of writes).
  const bool wipe =
      mutations != nullptr && may_wipe && options_.prune_halves_counts;
  if (mutations != nullptr) {
    mutations->reserve(mutations->size() +
                       static_cast<size_t>(wipe ? target + 1
                                           : options_.prune_halves_counts
                                               ? before
                                               : before - target));
  }
  if (wipe) {
    TrieMutation all;
    all.kind = TrieMutation::Kind::kDeleteSubtree;
    all.table = TrieMutation::Table::kNgramPool;
    mutations->push_back(std::move(all));  // Empty path: the whole pool.
  }
  const bool emit_deletes = mutations != nullptr && !wipe;
  int64_t after = 0;
  std::vector<int32_t> key;
  for (auto it = keys_.begin(); it != keys_.end();) {
    ContinuationSet& set = it->second;
    PruneKey(it->first, &set, keep_none, threshold, emit_deletes, mutations,
             &key);
    if (set.empty()) {
      keys_.erase(it++);
      continue;
    }
    after += static_cast<int64_t>(set.size());
    ++it;
  }
  entries_ = after;
  ++stats_.prunes;
  stats_.pruned_entries += before - after;
}

std::pair<uint32_t, uint64_t> NgramPool::PruneThresholdLocked(
    int64_t target) const {
  std::vector<std::pair<uint32_t, uint64_t>> all;
  all.reserve(static_cast<size_t>(entries_));
  for (const auto& [key, set] : keys_) {
    for (const Continuation& c : set) all.emplace_back(c.count, c.stamp);
  }
  std::nth_element(all.begin(), all.begin() + (target - 1), all.end(),
                   std::greater<>());
  return all[static_cast<size_t>(target - 1)];
}

void NgramPool::PruneKey(absl::string_view encoded_key, ContinuationSet* set,
                         bool keep_none,
                         std::pair<uint32_t, uint64_t> threshold,
                         bool emit_deletes,
                         std::vector<TrieMutation>* mutations,
                         std::vector<int32_t>* key) const {
  // The key's ids, decoded only for a key that emits (after a wipe, few).
  bool decoded = false;
  auto key_ids = [&]() -> const std::vector<int32_t>& {
    if (!decoded) *key = DecodeKey(encoded_key);
    decoded = true;
    return *key;
  };
  set->erase(
      std::remove_if(set->begin(), set->end(),
                     [&](Continuation& c) {
                       if (keep_none ||
                           std::make_pair(c.count, c.stamp) < threshold) {
                         if (emit_deletes) {
                           EmitDelete(mutations, key_ids(), c.tokens);
                         }
                         return true;
                       }
                       if (!options_.prune_halves_counts) return false;
                       c.count /= 2;
                       if (c.count == 0) {
                         if (emit_deletes) {
                           EmitDelete(mutations, key_ids(), c.tokens);
                         }
                         return true;
                       }
                       if (mutations != nullptr) {
                         EmitSet(mutations, key_ids(), c.tokens, c.count);
                       }
                       return false;
                     }),
      set->end());
  // Halving can tie counts that RanksBefore then orders by tokens.
  if (!set->empty()) std::sort(set->begin(), set->end(), RanksBefore);
}

std::vector<NgramMatch> NgramPool::Lookup(absl::Span<const int32_t> context,
                                          int32_t max_results) const {
  std::vector<NgramMatch> out;
  if (max_results <= 0) return out;
  const int32_t longest = static_cast<int32_t>(std::min<size_t>(
      context.size(), static_cast<size_t>(options_.max_key_tokens)));

  absl::ReaderMutexLock lock(&mu_);
  for (int32_t k = longest; k >= 1; --k) {
    const std::string encoded = EncodeKey(context.subspan(context.size() - k));
    auto it = keys_.find(encoded);
    if (it == keys_.end()) continue;
    for (const Continuation& c : it->second) {
      const bool seen = std::any_of(
          out.begin(), out.end(),
          [&](const NgramMatch& m) { return m.continuation == c.tokens; });
      if (seen) continue;
      out.push_back(NgramMatch{c.tokens, int64_t{c.count}, k});
      if (out.size() == static_cast<size_t>(max_results)) return out;
    }
  }
  return out;
}

void NgramPool::ForEach(
    absl::FunctionRef<void(absl::Span<const int32_t> key,
                           absl::Span<const int32_t> continuation,
                           int64_t count)>
        visit) const {
  absl::ReaderMutexLock lock(&mu_);
  // Store order: shorter keys first (the row's length byte), then the
  // big-endian bytes, which compare as the ids do.
  std::vector<const std::pair<const std::string, ContinuationSet>*> keys;
  keys.reserve(keys_.size());
  for (const auto& entry : keys_) keys.push_back(&entry);
  std::sort(keys.begin(), keys.end(), [](const auto* a, const auto* b) {
    if (a->first.size() != b->first.size()) {
      return a->first.size() < b->first.size();
    }
    return a->first < b->first;
  });
  std::vector<const Continuation*> continuations;
  for (const auto* entry : keys) {
    const std::vector<int32_t> key = DecodeKey(entry->first);
    continuations.clear();
    for (const Continuation& c : entry->second) continuations.push_back(&c);
    std::sort(continuations.begin(), continuations.end(),
              [](const Continuation* a, const Continuation* b) {
                return a->tokens < b->tokens;
              });
    for (const Continuation* c : continuations) {
      visit(key, c->tokens, int64_t{c->count});
    }
  }
}

NgramPoolStats NgramPool::Stats() const {
  absl::ReaderMutexLock lock(&mu_);
  NgramPoolStats s = stats_;
  s.entries = entries_;
  s.keys = static_cast<int64_t>(keys_.size());
  return s;
}

}  // namespace lookahead::draftsvc
