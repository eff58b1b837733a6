#include "engine/testing/byte_tokenizer.h"

#include <utility>

#include "engine/testing/utf8_test_util.h"
#include "gtest/gtest.h"

namespace lookahead::engine {

std::string ByteChar(unsigned char b) {
  uint32_t next = 256;
  for (int x = 0; x < 256; ++x) {
    const bool printable =
        (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
    const uint32_t cp = printable ? x : next++;
    if (x == b) return Utf8(cp);
  }
  return "";
}

TokenizerSpec ByteLevelSpec(const std::vector<std::string>& control_tokens) {
  TokenizerSpec spec;
  spec.model = "gpt2";
  spec.pre = "gpt2";
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(ByteChar(b));
  spec.token_types.assign(256, static_cast<int32_t>(TokenType::kNormal));
  for (const std::string& token : control_tokens) {
    spec.tokens.push_back(token);
    spec.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  return spec;
}

std::unique_ptr<Tokenizer> MustCreateTokenizer(TokenizerSpec spec) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

std::vector<int32_t> ByteIds(absl::string_view text) {
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

}  // namespace lookahead::engine
