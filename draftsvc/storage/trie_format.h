// The on-disk format of draftsvc's RocksDB store: key and value encodings.
//
// Every key starts with a one-byte tag:
//   "F"                             -> fixed32 format version
//   "m" + namespace                 -> fixed32 vocab_size of the namespace
//   "n" + namespace + '\0' + tokens -> fixed64 count of the trie node
//   "p" + namespace + '\0' + L + key + continuation
//                                   -> fixed64 count of the n-gram pool entry
// where tokens are the node's path from the root as fixed-width 4-byte
// BIG-ENDIAN token ids, so RocksDB's bytewise order is numeric order: a prefix
// seek is a trie descent, parents sort before their children, and a node's
// subtree is the single key range [NodeKey(path), PrefixSuccessor(NodeKey)).
// A pool entry (ngram_pool.h) is one row: L is one byte, the key's length in
// tokens (1..255), then the key and the continuation as big-endian ids; L
// makes the split unambiguous, so each (key, continuation) has exactly one
// row. The tags sort F < m < n < p, so a full scan meets every namespace
// before any node or pool entry. Namespace names never contain '\0', so one
// namespace's rows never share a key prefix with another's. Fixed-width
// integers in values are little-endian. Everything here is pure and
// thread-safe.
#ifndef LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_FORMAT_H_
#define LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lookahead::draftsvc::trie_format {

// Version of the layout below. Bump on any incompatible change; a store
// refuses to open a database with a version outside
// [kOldestReadableFormatVersion, kFormatVersion]. DO NOT CHANGE the meaning
// of an existing version.
//   1: "F", "m", "n" rows.
//   2: version 1 plus "p" rows (the n-gram pool, issue 15).
// Version 2 reads every version 1 database as is (it simply has an empty
// pool); the first read-write open rewrites its record to 2. The bump is
// for the way back: a version 1 build refuses a version 2 database at Open
// with one clear line, instead of failing later on the unknown "p" rows.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kOldestReadableFormatVersion = 1;

// Key tags. Persisted: DO NOT CHANGE.
inline constexpr char kFormatTag = 'F';
inline constexpr char kNamespaceTag = 'm';
inline constexpr char kNodeTag = 'n';
inline constexpr char kNgramTag = 'p';
// Ends the namespace name inside node keys. Persisted: DO NOT CHANGE.
inline constexpr char kNamespaceEnd = '\0';

// Name under which RocksDB records the count merge operator (operands and
// values are fixed64 two's-complement counts that add). Persisted in the
// OPTIONS file: DO NOT CHANGE.
inline constexpr char kCountMergeOperatorName[] = "lookahead.Int64Add";

// Longest namespace name and deepest path the format accepts.
inline constexpr int kMaxNamespaceBytes = 128;  // = v1::kMaxNamespaceBytes
inline constexpr int kMaxPathTokens = 4096;
// Longest n-gram key (one length byte); key plus continuation tokens are at
// most kMaxPathTokens.
inline constexpr int kMaxNgramKeyTokens = 255;

// Returns OK iff `name` is 1..128 bytes of [A-Za-z0-9_.-]: the API's rule
// (proto/namespace_name.h), which also keeps '\0' out of node keys.
absl::Status ValidateNamespace(absl::string_view name);

// The key of the format-version record.
std::string FormatKey();

// "m" + name. REQUIRES: ValidateNamespace(name).ok().
std::string NamespaceKey(absl::string_view name);

// "n" + name + '\0': the prefix of every node key of the namespace.
std::string NodePrefix(absl::string_view name);

// NodePrefix(name) + big-endian tokens. REQUIRES: every token >= 0.
std::string NodeKey(absl::string_view name, absl::Span<const int32_t> path);

// The smallest key greater than every key that starts with `prefix`
// (increments the last byte below 0xff and drops what follows). Returns an
// empty string iff `prefix` is all 0xff bytes (no successor).
std::string PrefixSuccessor(absl::string_view prefix);

// A parsed node key. `name_space` points into the parsed key.
struct ParsedNodeKey {
  absl::string_view name_space;
  std::vector<int32_t> path;
};

// Parses a key that starts with kNodeTag. Returns DATA_LOSS iff it is not a
// well-formed node key (no terminator, empty path, ragged token bytes,
// negative ids).
absl::Status ParseNodeKey(absl::string_view key, ParsedNodeKey* out);

// "p" + name + '\0': the prefix of every pool entry of the namespace.
std::string NgramPrefix(absl::string_view name);

// NgramPrefix(name) + key length byte + big-endian key + big-endian
// continuation. REQUIRES: 1 <= key.size() <= kMaxNgramKeyTokens, continuation
// non-empty, every token >= 0.
std::string NgramKey(absl::string_view name, absl::Span<const int32_t> key,
                     absl::Span<const int32_t> continuation);

// A parsed pool entry key. `name_space` points into the parsed key.
struct ParsedNgramKey {
  absl::string_view name_space;
  std::vector<int32_t> key;
  std::vector<int32_t> continuation;
};

// Parses a key that starts with kNgramTag. Returns DATA_LOSS iff it is not a
// well-formed pool entry key (no terminator, key length 0 or past the bytes
// that follow, ragged token bytes, empty continuation, negative ids).
absl::Status ParseNgramKey(absl::string_view key, ParsedNgramKey* out);

// Fixed-width little-endian integers used in values.
std::string EncodeFixed32(uint32_t value);
std::string EncodeFixed64(uint64_t value);
// Return false iff `bytes` has the wrong size.
bool DecodeFixed32(absl::string_view bytes, uint32_t* value);
bool DecodeFixed64(absl::string_view bytes, uint64_t* value);

}  // namespace lookahead::draftsvc::trie_format

#endif  // LOOKAHEAD_DRAFTSVC_STORAGE_TRIE_FORMAT_H_
