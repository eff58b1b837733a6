#include "engine/model/torch_status.h"

#include <ATen/Parallel.h>
#include <torch/types.h>

#include <new>
#include <stdexcept>

#include "engine/model/threading.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(TorchStatusTest, ExceptionsBecomeStatuses) {
  absl::Status shape = TorchStatus("reshape", [] {
    torch::ones({2, 3}).view({4});
  });
  EXPECT_EQ(shape.code(), absl::StatusCode::kInternal);
  // (Debian's LibTorch throws std::runtime_error for this one.)
  EXPECT_THAT(shape.message(), HasSubstr("reshape: "));
  EXPECT_THAT(shape.message(), HasSubstr("is invalid for input of size 6"));
  EXPECT_THAT(shape.message(), Not(HasSubstr("\n")));  // no backtrace
  absl::Status index =
      TorchStatus("select", [] { torch::ones({2}).select(0, 5); });
  EXPECT_EQ(index.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(index.message(), HasSubstr("select: torch index error"));
  EXPECT_EQ(TorchStatus("alloc", [] { throw std::bad_alloc(); }).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      TorchStatus("std", [] { throw std::runtime_error("boom"); }).message(),
      HasSubstr("std: boom"));
}

TEST(TorchStatusTest, ValuesAndStatusesPassThrough) {
  EXPECT_TRUE(TorchStatus("ok", [] {}).ok());
  EXPECT_EQ(TorchStatus("s", [] { return absl::NotFoundError("x"); }).code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<int64_t> n = TorchStatusOr<int64_t>("numel", [] {
    return torch::ones({3, 4}).numel();
  });
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 12);
  absl::StatusOr<int> bad = TorchStatusOr<int>(
      "bad",
      []() -> absl::StatusOr<int> { return absl::OutOfRangeError("far"); });
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kOutOfRange);
}

TEST(ThreadingTest, ConfigureThreadsAppliesSettings) {
  ThreadOptions options;
  options.intra_op_threads = 1;
  options.blas_threads = 2;
  ASSERT_TRUE(ConfigureThreads(options).ok());
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_EQ(at::get_num_interop_threads(), 1);
  EXPECT_EQ(BlasThreads(), 2);  // Debian's libtorch links OpenBLAS
  options.blas_threads = 1;
  ASSERT_TRUE(ConfigureThreads(options).ok());  // a second call is fine
  EXPECT_EQ(BlasThreads(), 1);
  options.intra_op_threads = 0;
  EXPECT_EQ(ConfigureThreads(options).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lookahead::engine
