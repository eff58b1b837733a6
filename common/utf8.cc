#include "common/utf8.h"

#include <cstdint>

namespace lookahead {
namespace {

// Length of the valid character starting at `s[0]` (n >= 1 bytes left), or
// 0 if none starts there. Table 3-7 of the Unicode standard.
size_t CharLength(const uint8_t* s, size_t n) {
  const uint8_t b0 = s[0];
  if (b0 < 0x80) return 1;
  auto cont = [&](size_t i, uint8_t lo = 0x80, uint8_t hi = 0xBF) {
    return i < n && s[i] >= lo && s[i] <= hi;
  };
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80;  // no overlong forms
    const uint8_t hi = b0 == 0xED ? 0x9F : 0xBF;  // no surrogates
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80;  // no overlong forms
    const uint8_t hi = b0 == 0xF4 ? 0x8F : 0xBF;  // <= U+10FFFF
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;  // 0x80..0xC1 (continuation, overlong lead), 0xF5..0xFF
}

}  // namespace

size_t ValidUtf8Prefix(absl::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {  // ASCII runs, the common case
      ++i;
      continue;
    }
    const size_t length = CharLength(s + i, n - i);
    if (length == 0) return i;
    i += length;
  }
  return n;
}

}  // namespace lookahead
