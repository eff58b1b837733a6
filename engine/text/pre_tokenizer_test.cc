#include "engine/text/pre_tokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Expected pieces follow the patterns' Perl semantics by hand; the tokenizer
// tests check whole encodings against HF tokenizers.
std::vector<std::string> Split(const std::string& name,
                               const std::string& text) {
  auto pre = PreTokenizer::Create(name);
  EXPECT_TRUE(pre.ok()) << pre.status();
  std::vector<absl::string_view> pieces;
  (*pre)->Split(text, &pieces);
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

TEST(PreTokenizerTest, Gpt2WhitespaceLookaheadEmulation) {
  EXPECT_THAT(Split("gpt2", "Hello world"), ElementsAre("Hello", " world"));
  // \s+(?!\S): a run before a word leaves its last space to the word.
  EXPECT_THAT(Split("gpt2", "a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(Split("gpt2", "a\n\nb"), ElementsAre("a", "\n", "\n", "b"));
  EXPECT_THAT(Split("gpt2", "a \n b"), ElementsAre("a", " \n", " b"));
  EXPECT_THAT(Split("gpt2", "end   "), ElementsAre("end", "   "));
  EXPECT_THAT(Split("gpt2", "\xE3\x80\x80\xE3\x80\x80x"),  // U+3000 x2
              ElementsAre("\xE3\x80\x80", "\xE3\x80\x80", "x"));
  EXPECT_THAT(Split("gpt2", "it's 'S x12 ?!"),
              ElementsAre("it", "'s", " '", "S", " x", "12", " ?!"));
}

TEST(PreTokenizerTest, SmolLmSplitsEveryDigit) {
  EXPECT_THAT(Split("smollm", "x 123y"),
              ElementsAre("x", " ", "1", "2", "3", "y"));
  // The digit split ends the piece, so a space run before it stays whole.
  EXPECT_THAT(Split("smollm", "x =  5"), ElementsAre("x", " =", "  ", "5"));
  EXPECT_THAT(Split("gpt2", "x =  5"), ElementsAre("x", " =", " ", " 5"));
  EXPECT_THAT(Split("smollm", "\xD9\xA3\xE2\x85\xA0"),  // Arabic 3, Roman I
              ElementsAre("\xD9\xA3", "\xE2\x85\xA0"));
}

TEST(PreTokenizerTest, Llama3Pattern) {
  EXPECT_THAT(Split("llama-bpe", "Hello, WORLD'S 12345!\n\n  x"),
              ElementsAre("Hello", ",", " WORLD", "'S", " ", "123", "45",
                          "!\n\n", " ", " x"));
}

TEST(PreTokenizerTest, PiecesAlwaysConcatenateToInput) {
  std::mt19937 rng(3);
  for (const char* name : {"gpt2", "smollm", "llama3", "qwen2", "default"}) {
    auto pre = PreTokenizer::Create(name);
    ASSERT_TRUE(pre.ok()) << pre.status();
    for (int i = 0; i < 200; ++i) {
      std::string bytes;
      const int len = rng() % 40;
      for (int k = 0; k < len; ++k) {
        bytes +=
            rng() % 2 ? static_cast<char>(rng() % 256) : " \n1a'"[rng() % 5];
      }
      std::vector<absl::string_view> pieces;
      (*pre)->Split(bytes, &pieces);
      std::string joined;
      for (absl::string_view p : pieces) {
        EXPECT_FALSE(p.empty());
        joined.append(p.data(), p.size());
      }
      EXPECT_EQ(joined, bytes) << name;
    }
  }
}

TEST(PreTokenizerTest, UnknownNameIsUnimplemented) {
  auto pre = PreTokenizer::Create("tekken");
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(pre.status().message(), HasSubstr("'tekken'"));
}

}  // namespace
}  // namespace lookahead::engine
