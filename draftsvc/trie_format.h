// The on-disk format of draftsvc's RocksDB store: key and value encodings.
//
// Every key starts with a one-byte tag:
//   "F"                             -> fixed32 format version
//   "m" + namespace                 -> fixed32 vocab_size of the namespace
//   "n" + namespace + '\0' + tokens -> fixed64 count of the trie node
// where tokens are the node's path from the root as fixed-width 4-byte
// BIG-ENDIAN token ids, so RocksDB's bytewise order is numeric order: a prefix
// seek is a trie descent, parents sort before their children, and a node's
// subtree is the single key range [NodeKey(path), PrefixSuccessor(NodeKey)).
// Namespace names never contain '\0', so one namespace's nodes never share a
// key prefix with another's. Fixed-width integers in values are
// little-endian. Everything here is pure and thread-safe.
#ifndef LOOKAHEAD_DRAFTSVC_TRIE_FORMAT_H_
#define LOOKAHEAD_DRAFTSVC_TRIE_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lookahead::draftsvc::trie_format {

// Version of the layout below. Bump on any incompatible change; a store
// refuses to open a database with another version. DO NOT CHANGE the meaning
// of an existing version.
inline constexpr uint32_t kFormatVersion = 1;

// Key tags. Persisted: DO NOT CHANGE.
inline constexpr char kFormatTag = 'F';
inline constexpr char kNamespaceTag = 'm';
inline constexpr char kNodeTag = 'n';
// Ends the namespace name inside node keys. Persisted: DO NOT CHANGE.
inline constexpr char kNamespaceEnd = '\0';

// Name under which RocksDB records the count merge operator (operands and
// values are fixed64 two's-complement counts that add). Persisted in the
// OPTIONS file: DO NOT CHANGE.
inline constexpr char kCountMergeOperatorName[] = "lookahead.Int64Add";

// Longest namespace name and deepest path the format accepts.
inline constexpr int kMaxNamespaceBytes = 128;  // = v1::kMaxNamespaceBytes
inline constexpr int kMaxPathTokens = 4096;

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

// Fixed-width little-endian integers used in values.
std::string EncodeFixed32(uint32_t value);
std::string EncodeFixed64(uint64_t value);
// Return false iff `bytes` has the wrong size.
bool DecodeFixed32(absl::string_view bytes, uint32_t* value);
bool DecodeFixed64(absl::string_view bytes, uint64_t* value);

}  // namespace lookahead::draftsvc::trie_format

#endif  // LOOKAHEAD_DRAFTSVC_TRIE_FORMAT_H_
