// Test helper: the UTF-8 encoding of one code point. Pure; thread-safe.
#ifndef LOOKAHEAD_ENGINE_TESTING_UTF8_TEST_UTIL_H_
#define LOOKAHEAD_ENGINE_TESTING_UTF8_TEST_UTIL_H_

#include <cstdint>
#include <string>

namespace lookahead::engine {

// REQUIRES: cp <= 0x10FFFF. Surrogates are encoded as is (invalid UTF-8 on
// purpose, which tests use).
inline std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_TESTING_UTF8_TEST_UTIL_H_
