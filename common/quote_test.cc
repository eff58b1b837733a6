#include "common/quote.h"

#include <string>

#include "gtest/gtest.h"

namespace lookahead {
namespace {

TEST(QuoteInputTest, ShortInputIsQuotedWhole) {
  EXPECT_EQ(QuoteInput("user"), "\"user\"");
  EXPECT_EQ(QuoteInput(""), "\"\"");
}

TEST(QuoteInputTest, LongInputIsCutAndCounted) {
  const std::string input(100000, 'a');
  const std::string quoted = QuoteInput(input);
  EXPECT_EQ(quoted, "\"" + std::string(kQuotedInputBytes, 'a') +
                        "...\" (100000 bytes)");
}

TEST(QuoteInputTest, RawBytesAreEscaped) {
  EXPECT_EQ(QuoteInput(std::string("a\xff\n\0b", 5)), "\"a\\xff\\n\\x00\\x62\"");
  for (char c : QuoteInput(std::string(200, '\x80'))) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(c);
  }
}

}  // namespace
}  // namespace lookahead
