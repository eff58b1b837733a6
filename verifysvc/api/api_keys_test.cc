#include "verifysvc/api/api_keys.h"

#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::verifysvc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const char kKeyA[] = "a-0123456789abcdef";
const char kKeyB[] = "b-0123456789abcdef";

std::string WriteKeys(const std::string& contents) {
  static int n = 0;
  std::string path =
      std::string(::testing::TempDir()) + "/keys" + std::to_string(++n);
  std::ofstream(path) << contents;
  return path;
}

std::unique_ptr<ApiKeys> LoadOrDie(const std::string& contents) {
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys =
      ApiKeys::Load(WriteKeys(contents));
  EXPECT_TRUE(keys.ok()) << keys.status();
  return keys.ok() ? *std::move(keys) : nullptr;
}

std::string Bearer(absl::string_view key) {
  return absl::StrCat("Bearer ", key);
}

TEST(ApiKeysTest, KeysMapToTheirNamespaces) {
  std::unique_ptr<ApiKeys> keys = LoadOrDie(absl::StrCat(
      "# team keys\n\n", kKeyA, " team-a\n", kKeyB, "\tteam.b  # comment\n"));
  ASSERT_NE(keys, nullptr);
  absl::StatusOr<KeyGrant> a = keys->Authorize(Bearer(kKeyA), nullptr);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->name_space, "team-a");
  EXPECT_EQ(a->line, 3);
  absl::StatusOr<KeyGrant> b = keys->Authorize(Bearer(kKeyB), nullptr);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->name_space, "team.b");
  EXPECT_EQ(b->line, 4);
  // The scheme is case-insensitive, as in HTTP.
  EXPECT_TRUE(keys->Authorize(absl::StrCat("bearer  ", kKeyA), nullptr).ok());
}

TEST(ApiKeysTest, MissingWrongSchemeAndUnknownKeysAreUnauthenticated) {
  std::unique_ptr<ApiKeys> keys = LoadOrDie(absl::StrCat(kKeyA, " a\n"));
  ASSERT_NE(keys, nullptr);
  struct Case {
    std::string authorization;
    std::string message;
  };
  const std::string wrong = "x-0123456789abcdef";
  for (const Case& c : std::vector<Case>{
           {"", "no API key"},
           {"   ", "no API key"},
           {absl::StrCat("Basic ", kKeyA), "not of the Bearer scheme"},
           {kKeyA, "not of the Bearer scheme"},
           {"Bearer ", "no API key"},
           {"Bearer", "no API key"},
           {"Bearerx", "not of the Bearer scheme"},
           {Bearer(wrong), "unknown API key"},
           {Bearer(std::string(kKeyA) + "x"), "unknown API key"},
           {Bearer(std::string(kKeyA).substr(1)), "unknown API key"},
           {Bearer(std::string(5000, 'k')), "no API key"},
       }) {
    absl::StatusOr<KeyGrant> grant = keys->Authorize(c.authorization, nullptr);
    EXPECT_EQ(grant.status().code(), absl::StatusCode::kUnauthenticated)
        << c.authorization;
    EXPECT_THAT(grant.status().message(), HasSubstr(c.message))
        << c.authorization;
    // Never echoes what was presented.
    EXPECT_THAT(grant.status().message(), Not(HasSubstr("0123456789")));
  }
}

TEST(ApiKeysTest, MalformedFilesNameTheLine) {
  struct Case {
    std::string contents;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {absl::StrCat("# c\n", kKeyA, "\n"), "line 2: 1 fields"},
           {absl::StrCat(kKeyA, " a 1 extra\n"), "line 1: 4 fields"},
           {"short a\n", "line 1: the key must have 16"},
           {absl::StrCat(kKeyA, " bad/ns\n"), "line 1: namespace"},
           {absl::StrCat(kKeyA, " ", std::string(129, 'n'), "\n"),
            "line 1: namespace"},
           {absl::StrCat(kKeyA, " a 0\n"), "line 1: rate \"0\""},
           {absl::StrCat(kKeyA, " a -2\n"), "line 1: rate \"-2\""},
           {absl::StrCat(kKeyA, " a nan\n"), "line 1: rate \"nan\""},
           {absl::StrCat(kKeyA, " a fast\n"), "line 1: rate \"fast\""},
           {absl::StrCat(kKeyA, " a\n", kKeyB, " b\n", kKeyA, " c\n"),
            "line 3: the key of line 1 again"},
           {"# only comments\n\n", "holds no key"},
           {"", "holds no key"},
       }) {
    absl::StatusOr<std::unique_ptr<ApiKeys>> keys =
        ApiKeys::Load(WriteKeys(c.contents));
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument)
        << c.contents;
    EXPECT_THAT(keys.status().message(), HasSubstr(c.message)) << c.contents;
    EXPECT_THAT(keys.status().message(), Not(HasSubstr("0123456789")))
        << "an error must not quote a key";
  }
}

TEST(ApiKeysTest, MissingFileIsNotFound) {
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys =
      ApiKeys::Load("/nonexistent/keys");
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(keys.status().message(),
              HasSubstr("--api_keys_file=/nonexistent/keys"));
}

TEST(ApiKeysTest, RateLimitsPerKeyWithRetryAfter) {
  // Rate 2/s: a burst of 2, then one every 0.5 s. Key B has no rate.
  std::unique_ptr<ApiKeys> keys =
      LoadOrDie(absl::StrCat(kKeyA, " a 2\n", kKeyB, " b\n"));
  ASSERT_NE(keys, nullptr);
  EXPECT_TRUE(keys->Authorize(Bearer(kKeyA), nullptr).ok());
  EXPECT_TRUE(keys->Authorize(Bearer(kKeyA), nullptr).ok());
  absl::Duration retry_after = absl::ZeroDuration();
  absl::StatusOr<KeyGrant> over = keys->Authorize(Bearer(kKeyA), &retry_after);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("line 1"));
  EXPECT_THAT(over.status().message(), HasSubstr("retry after"));
  EXPECT_GT(retry_after, absl::ZeroDuration());
  EXPECT_LE(retry_after, absl::Milliseconds(500));
  // Other keys are not limited by A's rate.
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(keys->Authorize(Bearer(kKeyB), nullptr).ok()) << i;
  }
  absl::SleepFor(retry_after + absl::Milliseconds(20));
  EXPECT_TRUE(keys->Authorize(Bearer(kKeyA), nullptr).ok());
  EXPECT_EQ(keys->Authorize(Bearer(kKeyA), nullptr).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ApiKeysTest, FractionalRateHasBurstOne) {
  std::unique_ptr<ApiKeys> keys = LoadOrDie(absl::StrCat(kKeyA, " a 0.1\n"));
  ASSERT_NE(keys, nullptr);
  EXPECT_TRUE(keys->Authorize(Bearer(kKeyA), nullptr).ok());
  absl::Duration retry_after;
  EXPECT_EQ(keys->Authorize(Bearer(kKeyA), &retry_after).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_GT(retry_after, absl::Seconds(9));
  EXPECT_LE(retry_after, absl::Seconds(10));
}

TEST(ApplyGrantTest, EmptyBecomesTheKeysOthersAreDenied) {
  KeyGrant grant{"team-a", 1};
  std::string name_space;
  EXPECT_TRUE(ApplyGrant(grant, &name_space).ok());
  EXPECT_EQ(name_space, "team-a");
  EXPECT_TRUE(ApplyGrant(grant, &name_space).ok());
  name_space = "team-b";
  absl::Status denied = ApplyGrant(grant, &name_space);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("\"team-a\""));
  EXPECT_THAT(denied.message(), HasSubstr("\"team-b\""));
  EXPECT_EQ(name_space, "team-b");
}

}  // namespace
}  // namespace lookahead::verifysvc
