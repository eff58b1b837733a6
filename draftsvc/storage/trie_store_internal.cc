#include "draftsvc/storage/trie_store_internal.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "draftsvc/storage/trie_format.h"

namespace lookahead::draftsvc::trie_store_internal {

namespace fmt = trie_format;

bool IsNgramPoolWipe(const TrieMutation& m) {
  return m.table == TrieMutation::Table::kNgramPool &&
         m.kind == TrieMutation::Kind::kDeleteSubtree && m.path.empty();
}

// Returns OK iff `batch` may be written (the format's own limits).
absl::Status ValidateBatch(const TrieMutationBatch& batch) {
  absl::Status ns = fmt::ValidateNamespace(batch.name_space);
  if (!ns.ok()) return ns;
  if (batch.vocab_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative vocab_size ", batch.vocab_size));
  }
  for (const TrieMutation& m : batch.mutations) {
    // A pool path starts with the key length, which is not a token.
    size_t first_token = 0;
    if (IsNgramPoolWipe(m)) continue;
    if (m.table == TrieMutation::Table::kNgramPool) {
      const int64_t key_length = m.path.empty() ? 0 : m.path[0];
      const int64_t tokens = static_cast<int64_t>(m.path.size()) - 1;
      if (key_length < 1 || key_length > fmt::kMaxNgramKeyTokens ||
          tokens <= key_length || tokens > fmt::kMaxPathTokens) {
        return absl::InvalidArgumentError(absl::StrCat(
            "n-gram pool mutation path must be [key_length in [1, ",
            fmt::kMaxNgramKeyTokens,
            "], key tokens, continuation tokens] with a non-empty "
            "continuation and at most ",
            fmt::kMaxPathTokens,
            " tokens (or empty, for a kDeleteSubtree of the whole pool); got "
            "key_length ",
            key_length, " and ", std::max<int64_t>(tokens, 0), " tokens"));
      }
      first_token = 1;
    } else if (m.table != TrieMutation::Table::kTrie) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown mutation table ", static_cast<int>(m.table)));
    } else if (m.path.empty() || m.path.size() > fmt::kMaxPathTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("mutation path must hold 1..", fmt::kMaxPathTokens,
                       " tokens, got ", m.path.size()));
    }
    for (size_t i = first_token; i < m.path.size(); ++i) {
      const int32_t token = m.path[i];
      if (token < 0 || (batch.vocab_size > 0 && token >= batch.vocab_size)) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", token, " outside [0, ", batch.vocab_size,
                         ") in namespace ", batch.name_space));
      }
    }
  }
  return absl::OkStatus();
}

// The RocksDB key of a kNgramPool mutation. REQUIRES: ValidateBatch passed.
std::string NgramRowKey(absl::string_view name_space,
                        const std::vector<int32_t>& path) {
  absl::Span<const int32_t> all(path);
  const size_t key_length = static_cast<size_t>(path[0]);
  return fmt::NgramKey(name_space, all.subspan(1, key_length),
                       all.subspan(1 + key_length));
}

void NgramRowWrite::Apply(const TrieMutation& m) {
  const uint64_t v = static_cast<uint64_t>(m.value);
  switch (m.kind) {
    case TrieMutation::Kind::kAdd:
      if (kind == kDelete) {
        kind = kPut;
        value = v;
      } else {
        value += v;  // Wrapping, as the merge operator.
      }
      break;
    case TrieMutation::Kind::kSetCount:
      kind = kPut;
      value = v;
      break;
    case TrieMutation::Kind::kDeleteSubtree:
      kind = kDelete;
      value = 0;
      break;
  }
}

// Appends `rows` to `wb` in key order (cheap memtable inserts, as the adds).
void WriteNgramRows(const absl::flat_hash_map<std::string, NgramRowWrite>& rows,
                    rocksdb::WriteBatch* wb) {
  std::vector<const std::pair<const std::string, NgramRowWrite>*> sorted;
  sorted.reserve(rows.size());
  for (const auto& row : rows) sorted.push_back(&row);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  for (const auto* row : sorted) {
    const std::string& key = row->first;
    const NgramRowWrite& w = row->second;
    switch (w.kind) {
      case NgramRowWrite::kMerge:
        wb->Merge(key, fmt::EncodeFixed64(w.value));
        break;
      case NgramRowWrite::kPut:
        wb->Put(key, fmt::EncodeFixed64(w.value));
        break;
      case NgramRowWrite::kDelete:
        wb->Delete(key);
        break;
    }
  }
}

}  // namespace lookahead::draftsvc::trie_store_internal
