#include "engine/text/stop_strings.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

// Feeds `pieces` one by one; returns everything emitted (Flush included
// unless stopped).
std::string PushAll(StopStringMatcher* m,
                    const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += m->Push(p);
  if (!m->stopped()) out += m->Flush();
  return out;
}

TEST(StopStringMatcherTest, NoStopsPassesEverythingThrough) {
  StopStringMatcher m({});
  EXPECT_EQ(m.Push("hello "), "hello ");
  EXPECT_EQ(m.Push("world"), "world");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStringMatcherTest, CutsBeforeStopSpanningPieces) {
  StopStringMatcher m({"\n\nQ:"});
  EXPECT_EQ(m.Push("answer."), "answer.");
  EXPECT_EQ(m.Push("\n"), "");  // Could be the start of the stop.
  EXPECT_EQ(m.Push("\nQ"), "");
  EXPECT_EQ(m.Push(": next"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Push("more"), "");
}

TEST(StopStringMatcherTest, ReleasesHeldTextWhenItCannotBeAStop) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.Push("the E"), "the ");
  EXPECT_EQ(m.Push("nd"), "End");  // "End" != "END": released.
  EXPECT_EQ(m.Push("EN"), "");
  EXPECT_EQ(m.Flush(), "EN");  // Generation ended for another reason.
  EXPECT_FALSE(m.stopped());
}

TEST(StopStringMatcherTest, EarliestOfSeveralStopsWins) {
  StopStringMatcher m({"world", "lo w"});
  EXPECT_EQ(PushAll(&m, {"hello world"}), "hel");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStringMatcherTest, StopInsideOnePieceKeepsTextBefore) {
  StopStringMatcher m({"."});
  EXPECT_EQ(PushAll(&m, {"One. Two."}), "One");
}

TEST(StopStringMatcherTest, MultibyteStopIsHeldWhole) {
  StopStringMatcher m({"\xE2\x80\x94"});  // U+2014 EM DASH
  EXPECT_EQ(PushAll(&m, {"a \xE2\x80\x94 b"}), "a ");
}

TEST(ValidateStopStringsTest, RejectsEmptyInvalidAndTooMany) {
  EXPECT_TRUE(ValidateStopStrings({"a", "bc"}, 4).ok());
  absl::Status empty = ValidateStopStrings({"a", ""}, 4);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("stop[1] is empty"), std::string::npos);
  absl::Status bad = ValidateStopStrings({"\xC3"}, 4);
  EXPECT_NE(bad.message().find("not valid UTF-8"), std::string::npos);
  absl::Status many = ValidateStopStrings({"a", "b", "c"}, 2);
  EXPECT_NE(many.message().find("at most 2"), std::string::npos);
}

}  // namespace
}  // namespace lookahead::engine
