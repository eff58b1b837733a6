#include "common/utf8.h"

#include <random>
#include <string>

#include "google/protobuf/stubs/common.h"
#include "gtest/gtest.h"

namespace lookahead {
namespace {

TEST(Utf8Test, ValidTextOfEveryLength) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ASCII\n\t"));
  EXPECT_TRUE(IsValidUtf8(std::string("nul\0inside", 10)));
  EXPECT_TRUE(IsValidUtf8("\xC2\x80 \xDF\xBF"));  // 2 bytes
  EXPECT_TRUE(IsValidUtf8("\xE0\xA0\x80 \xED\x9F\xBF \xEF\xBF\xBF"));  // 3
  EXPECT_TRUE(IsValidUtf8("\xF0\x90\x80\x80 \xF4\x8F\xBF\xBF"));       // 4
  EXPECT_TRUE(
      IsValidUtf8("h\xC3\xA9llo w\xC3\xB6rld \xE2\x82\xAC \xF0\x9F\x98\x80"));
}

TEST(Utf8Test, InvalidBytesAndWhereTheyStart) {
  struct Case {
    std::string text;
    size_t prefix;
  };
  const Case cases[] = {
      {"ab\x80", 2},            // lone continuation byte
      {"\xFF", 0},              // never in UTF-8
      {"a\xC0\xAF", 1},         // overlong '/'
      {"a\xC1\xBF", 1},         // overlong
      {"ab\xE0\x80\xAF", 2},    // overlong 3-byte
      {"\xED\xA0\x80", 0},      // UTF-16 surrogate U+D800
      {"x\xED\xBF\xBF", 1},     // surrogate U+DFFF
      {"\xF0\x80\x80\xAF", 0},  // overlong 4-byte
      {"\xF4\x90\x80\x80", 0},  // U+110000
      {"\xF5\x80\x80\x80", 0},  // lead byte past U+10FFFF
      {"ok\xE2\x82", 2},        // cut 3-byte character
      {"ok\xF0\x9F\x98", 2},    // cut 4-byte character
      {"\xC3(", 0},             // lead without continuation
      {"\xE2\x82\xAC\x80", 3},  // valid, then a stray continuation
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_FALSE(IsValidUtf8(c.text));
    EXPECT_EQ(ValidUtf8Prefix(c.text), c.prefix);
  }
}

// protobuf's own check is the oracle: what we accept, its parser accepts,
// so a request that passes ValidUtf8Prefix never fails to parse on UTF-8.
TEST(Utf8Test, AgreesWithProtobufOnRandomBytes) {
  std::mt19937 rng(17);
  // Bytes near every boundary of the encoding, and ASCII.
  const uint8_t interesting[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F,
                                 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0,
                                 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1,
                                 0xF3, 0xF4, 0xF5, 0xFE, 0xFF};
  std::uniform_int_distribution<int> pick(0, sizeof(interesting) - 1);
  std::uniform_int_distribution<int> length(0, 12);
  int valid = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string text;
    for (int n = length(rng); n > 0; --n) {
      text.push_back(static_cast<char>(interesting[pick(rng)]));
    }
    const bool ours = IsValidUtf8(text);
    ASSERT_EQ(ours, google::protobuf::internal::IsStructurallyValidUTF8(text))
        << "bytes: " << testing::PrintToString(text);
    valid += ours;
    if (!ours) {  // The prefix is valid and the next byte starts no char.
      const size_t prefix = ValidUtf8Prefix(text);
      ASSERT_LT(prefix, text.size());
      ASSERT_TRUE(IsValidUtf8(text.substr(0, prefix)));
    }
  }
  EXPECT_GT(valid, 1000);  // both sides of the boundary were exercised
}

}  // namespace
}  // namespace lookahead
