#include "verifysvc/drafts/suffix_repeat.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::verifysvc {
namespace {

// The definition, by brute force: the last 3 tokens occur ending earlier.
bool Repeats(const std::vector<int32_t>& context) {
  const int n = static_cast<int>(context.size());
  if (n < 3) return false;
  for (int end = 2; end < n - 1; ++end) {
    if (context[end - 2] == context[n - 3] &&
        context[end - 1] == context[n - 2] && context[end] == context[n - 1]) {
      return true;
    }
  }
  return false;
}

TEST(SuffixRepeatTest, SeesAThreeTokenRepeatAndNothingShorter) {
  SuffixRepeat r;
  EXPECT_FALSE(r.repeats());
  r.Append({5, 6, 7, 8});
  EXPECT_FALSE(r.repeats());
  r.Append({5, 6});  // 2 tokens of "5 6 7": not yet.
  EXPECT_FALSE(r.repeats());
  r.Append({7});
  EXPECT_TRUE(r.repeats());
  r.Append({9});  // "6 7 9" is new.
  EXPECT_FALSE(r.repeats());
}

TEST(SuffixRepeatTest, OverlappingRunsRepeat) {
  SuffixRepeat r;
  r.Append({1, 1, 1});
  EXPECT_FALSE(r.repeats());  // The only occurrence is the suffix itself.
  r.Append({1});
  EXPECT_TRUE(r.repeats());
}

TEST(SuffixRepeatTest, MatchesBruteForceOnRandomText) {
  std::mt19937 rng(7);
  for (int vocab : {3, 5, 50}) {
    SuffixRepeat r;
    std::vector<int32_t> context;
    for (int i = 0; i < 2000; ++i) {
      // Chunks of 1-4 tokens, as steps emit them; large ids too.
      const int chunk = 1 + static_cast<int>(rng() % 4);
      std::vector<int32_t> tokens;
      for (int c = 0; c < chunk; ++c) {
        tokens.push_back(static_cast<int32_t>(rng() % vocab) * 40000);
      }
      r.Append(tokens);
      context.insert(context.end(), tokens.begin(), tokens.end());
      ASSERT_EQ(r.repeats(), Repeats(context))
          << "vocab " << vocab << ", after " << context.size() << " tokens";
    }
  }
}

TEST(SuffixRepeatTest, IdsItCannotPackNeverMatch) {
  SuffixRepeat r;
  const int32_t big = int32_t{1} << 22;
  r.Append({big, 1, 2, big, 1, 2});
  EXPECT_FALSE(r.repeats());
  r.Append({-1, 1, 2, -1, 1, 2});
  EXPECT_FALSE(r.repeats());
  // Packable again three tokens later: "1 2 3" then "1 2 3" repeats.
  r.Append({1, 2, 3, 4, 1, 2, 3});
  EXPECT_TRUE(r.repeats());
}

}  // namespace
}  // namespace lookahead::verifysvc
