#include "common/status_macros.h"

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/grpc_status.h"
#include "gtest/gtest.h"

namespace lookahead {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status Check(int x) {
  if (x < 0) return absl::OutOfRangeError("negative");
  return absl::OkStatus();
}

absl::StatusOr<int> Quarter(int x) {
  RETURN_IF_ERROR(Check(x));
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(auto quarter, Half(half));
  return quarter;
}

TEST(StatusMacrosTest, PropagatesFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(-4).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Quarter(6).status().message(), "odd");
  EXPECT_EQ(Quarter(3).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GrpcStatusTest, RoundTripsCodeAndMessage) {
  absl::Status s = absl::ResourceExhaustedError("full: 8 of 8 sequences");
  grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(g.error_message(), "full: 8 of 8 sequences");
  EXPECT_EQ(FromGrpcStatus(g), s);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace lookahead
