#include "verifysvc/serving/field_error.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace lookahead::verifysvc {
namespace {

TEST(FieldErrorTest, MessageBeginsWithTheAttachedField) {
  const absl::Status s = FieldError("stop[1]", " is empty; remove it");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "stop[1] is empty; remove it");
  EXPECT_EQ(ErrorField(s), "stop[1]");
}

TEST(FieldErrorTest, PlainErrorsHaveNoField) {
  EXPECT_EQ(ErrorField(absl::InvalidArgumentError("stop is bad")), "");
  EXPECT_EQ(ErrorField(absl::OkStatus()), "");
}

TEST(FieldErrorTest, OutOfRangeHasOneWording) {
  const absl::Status s = OutOfRange("draft.decoding_length", "in [0, 64]",
                                    "0 = server default", "-1");
  EXPECT_EQ(s.message(),
            "draft.decoding_length must be in [0, 64] (0 = server default); "
            "got -1");
  EXPECT_EQ(ErrorField(s), "draft.decoding_length");
  EXPECT_EQ(OutOfRange("x", "in [0, 1]", "", "2").message(),
            "x must be in [0, 1]; got 2");
}

}  // namespace
}  // namespace lookahead::verifysvc
