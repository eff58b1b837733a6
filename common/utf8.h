// Strict UTF-8 (RFC 3629) validation of client strings, the definition
// protobuf applies to proto3 `string` fields: no overlong forms, no UTF-16
// surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no cut characters.
// Pure functions; thread-safe.
#ifndef LOOKAHEAD_COMMON_UTF8_H_
#define LOOKAHEAD_COMMON_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace lookahead {

// Returns the length of the longest prefix of `text` made of whole, valid
// UTF-8 characters: text.size() iff `text` is valid UTF-8, else the offset
// of the first byte that starts no valid character.
size_t ValidUtf8Prefix(absl::string_view text);

// True iff `text` is valid UTF-8 (the empty string is).
inline bool IsValidUtf8(absl::string_view text) {
  return ValidUtf8Prefix(text) == text.size();
}

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_UTF8_H_
