#include "common/listen_host.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead {
namespace {

using ::testing::HasSubstr;

TEST(IsLoopbackHostTest, LoopbackNames) {
  for (const char* host :
       {"127.0.0.1", "127.1.2.3", "localhost", "LocalHost", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
}

TEST(IsLoopbackHostTest, EverythingElse) {
  for (const char* host :
       {"0.0.0.0", "::", "[::]", "10.0.0.1", "128.0.0.1", "example.com", "",
        "[::1", "localhost.evil.com", "127.0.0.1.nip.io"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(CheckListenHostTest, NonLoopbackNeedsAuthOrExplicitConsent) {
  absl::Status refused =
      CheckListenHost("0.0.0.0", false, false, "--api_keys_file");
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("--host=0.0.0.0"));
  EXPECT_THAT(refused.message(), HasSubstr("--api_keys_file"));
  EXPECT_THAT(refused.message(), HasSubstr("--allow_unauthenticated"));
  EXPECT_TRUE(CheckListenHost("0.0.0.0", true, false, "x").ok());
  EXPECT_TRUE(CheckListenHost("0.0.0.0", false, true, "x").ok());
  EXPECT_TRUE(CheckListenHost("127.0.0.1", false, false, "x").ok());
}

}  // namespace
}  // namespace lookahead
