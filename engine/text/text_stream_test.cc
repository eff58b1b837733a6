#include "engine/text/text_stream.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "engine/testing/utf8_test_util.h"
#include "engine/text/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;

constexpr char kFffd[] = "\xEF\xBF\xBD";

// The oracle: the sets of all well-formed encodings and all their proper
// prefixes, built by encoding every scalar value. Replacement follows the
// definition directly: take a complete character if one starts here, else
// replace the longest prefix of some character (at least one byte).
class Utf8Oracle {
 public:
  Utf8Oracle() {
    for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string e = Utf8(cp);
      complete_.insert(e);
      for (size_t k = 1; k < e.size(); ++k) prefixes_.insert(e.substr(0, k));
    }
  }
  std::string Sanitize(const std::string& bytes) const {
    std::string out;
    size_t i = 0;
    while (i < bytes.size()) {
      bool done = false;
      for (size_t len = 1; len <= 4 && i + len <= bytes.size(); ++len) {
        if (complete_.contains(bytes.substr(i, len))) {
          out += bytes.substr(i, len);
          i += len;
          done = true;
          break;
        }
      }
      if (done) continue;
      size_t skip = 1;
      for (size_t len = 3; len >= 1; --len) {
        if (i + len <= bytes.size() &&
            prefixes_.contains(bytes.substr(i, len))) {
          skip = len;
          break;
        }
      }
      out += kFffd;
      i += skip;
    }
    return out;
  }
  bool IsValid(const std::string& s) const {
    size_t i = 0;
    while (i < s.size()) {
      bool ok = false;
      for (size_t len = 1; len <= 4 && i + len <= s.size(); ++len) {
        if (complete_.contains(s.substr(i, len))) {
          i += len;
          ok = true;
          break;
        }
      }
      if (!ok) return false;
    }
    return true;
  }

 private:
  absl::flat_hash_set<std::string> complete_;
  absl::flat_hash_set<std::string> prefixes_;
};

const Utf8Oracle& Oracle() {
  static const Utf8Oracle* oracle = new Utf8Oracle();
  return *oracle;
}

// Bytes biased towards UTF-8 structure: whole characters, cut characters,
// lead/continuation bytes, surrogates, over-longs, and out-of-range leads.
std::string RandomBytes(std::mt19937& rng, int n) {
  std::string s;
  std::uniform_int_distribution<int> kind(0, 9);
  while (static_cast<int>(s.size()) < n) {
    switch (kind(rng)) {
      case 0:
        s += static_cast<char>(rng() % 128);
        break;
      case 1:
      case 2: {
        uint32_t cp = rng() % 0x110000;
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xE000;
        s += Utf8(cp);
        break;
      }
      case 3: {  // a cut character
        std::string e = Utf8(0x80 + rng() % (0x110000 - 0x80));
        s += e.substr(0, 1 + rng() % (e.size() - 1));
        break;
      }
      case 4:
        s += static_cast<char>(0x80 + rng() % 64);  // continuation
        break;
      case 5:
        s += static_cast<char>(0xC0 + rng() % 64);  // any lead, incl. bad
        break;
      case 6:
        s += "\xED\xA0\x80";  // surrogate D800
        break;
      case 7:
        s += "\xE0\x80\xAF";  // over-long '/'
        break;
      case 8:
        s += "\xF4\x90\x80\x80";  // > U+10FFFF
        break;
      default:
        s += static_cast<char>(rng() % 256);
    }
  }
  return s;
}

TEST(Utf8AssemblerTest, HoldsBackIncompleteCharacter) {
  Utf8Assembler a;
  EXPECT_EQ(a.Push("a\xE2\x82"), "a");
  EXPECT_EQ(a.pending(), 2u);
  EXPECT_EQ(a.Push("\xAC"
                   "b"),
            "\xE2\x82\xAC"
            "b");  // U+20AC
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_EQ(a.Finish(), "");
}

TEST(Utf8AssemblerTest, ReplacesOnlyWhenNoLongerCompletable) {
  Utf8Assembler a;
  EXPECT_EQ(a.Push("\xF0\x9F"), "");
  // 'x' cannot continue the sequence: one U+FFFD for the maximal subpart.
  EXPECT_EQ(a.Push("x"), std::string(kFffd) + "x");
  EXPECT_EQ(a.Push("\xF0\x9F\x98"), "");
  EXPECT_EQ(a.Finish(), kFffd);
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_EQ(a.Push("\x80\xC0\xAF"), std::string(kFffd) + kFffd + kFffd);
}

TEST(Utf8AssemblerTest, RandomChunkingMatchesOracleAndIsAlwaysValid) {
  const Utf8Oracle& oracle = Oracle();
  std::mt19937 rng(1234);
  for (int round = 0; round < 3000; ++round) {
    const std::string bytes = RandomBytes(rng, 1 + rng() % 40);
    const std::string expected = oracle.Sanitize(bytes);
    ASSERT_EQ(SanitizeUtf8(bytes), expected) << "round " << round;
    Utf8Assembler a;
    std::string streamed;
    size_t pos = 0;
    while (pos < bytes.size()) {
      size_t len = std::min<size_t>(bytes.size() - pos, rng() % 5);
      std::string chunk = a.Push(bytes.substr(pos, len));
      ASSERT_TRUE(oracle.IsValid(chunk)) << "round " << round;
      streamed += chunk;
      pos += len;
    }
    std::string tail = a.Finish();
    ASSERT_TRUE(oracle.IsValid(tail));
    streamed += tail;
    ASSERT_EQ(streamed, expected) << "round " << round;
  }
}

// A byte-level vocabulary whose tokens are single bytes and 2-byte pieces
// of multi-byte characters, so streams cut characters all the time.
std::unique_ptr<Tokenizer> ByteTokenizer() {
  TokenizerSpec spec;
  spec.model = "gpt2";
  spec.pre = "gpt2";
  // GPT-2 byte stand-ins: printable bytes map to themselves, others to
  // U+0100 + their index among the non-printable bytes.
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable =
        (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    spec.tokens.push_back(Utf8(printable ? b : next++));
  }
  spec.tokens.push_back("<|end|>");
  spec.token_types.assign(spec.tokens.size(), 1);
  spec.token_types.back() = 3;
  spec.eos_id = 256;
  auto tokenizer = Tokenizer::Create(spec);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return *std::move(tokenizer);
}

TEST(TextStreamTest, StreamEqualsSanitizedBatchDecode) {
  auto tokenizer = ByteTokenizer();
  const Utf8Oracle& oracle = Oracle();
  std::mt19937 rng(99);
  for (int round = 0; round < 500; ++round) {
    // Ids from random bytes (UTF-8-ish) plus the control token.
    std::vector<int32_t> ids;
    for (unsigned char c : RandomBytes(rng, 1 + rng() % 30)) {
      ids.push_back(rng() % 10 == 0 ? 256 : c);
    }
    const bool render = round % 2 == 0;
    DecodeOptions options;
    options.render_special = render;
    auto batch = tokenizer->Decode(ids, options);
    ASSERT_TRUE(batch.ok()) << batch.status();
    TextStream stream(tokenizer.get(), options);
    std::string streamed;
    for (int32_t id : ids) {
      auto chunk = stream.Feed(id);
      ASSERT_TRUE(chunk.ok()) << chunk.status();
      ASSERT_TRUE(oracle.IsValid(*chunk));
      streamed += *chunk;
    }
    streamed += stream.Finish();
    EXPECT_EQ(streamed, oracle.Sanitize(*batch)) << "round " << round;
  }
}

TEST(TextStreamTest, OutOfRangeIdIsInvalidArgumentAndLeavesStream) {
  auto tokenizer = ByteTokenizer();
  TextStream stream(tokenizer.get());
  EXPECT_EQ(*stream.Feed(0xE2), "");
  auto bad = stream.Feed(257);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("257"));
  EXPECT_THAT(bad.status().message(), HasSubstr("257)"));  // vocab size
  EXPECT_EQ(stream.Feed(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*stream.Feed(0x82), "");
  EXPECT_EQ(*stream.Feed(0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(stream.Finish(), "");
}

TEST(TextStreamTest, FeedManyChecksAllIdsFirst) {
  auto tokenizer = ByteTokenizer();
  TextStream stream(tokenizer.get());
  const std::vector<int32_t> bad = {'a', 0xE2, 1000};
  auto chunk = stream.Feed(bad);
  EXPECT_EQ(chunk.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(chunk.status().message(), HasSubstr("1000"));
  const std::vector<int32_t> good = {'a', 0xE2, 0x82};
  EXPECT_EQ(*stream.Feed(good), "a");  // nothing of `bad` was fed
  const std::vector<int32_t> rest = {0xAC, 256, 'b'};
  EXPECT_EQ(*stream.Feed(rest), "\xE2\x82\xAC<|end|>b");
}

}  // namespace
}  // namespace lookahead::engine
