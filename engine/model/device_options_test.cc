#include "engine/model/device_options.h"

#include <torch/cuda.h>

#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

TEST(ParseDeviceOptions, CpuAndDtypes) {
  ModelOptions options;
  ASSERT_TRUE(ParseDeviceOptions("cpu", "", &options).ok());
  EXPECT_TRUE(options.device.is_cpu());
  EXPECT_EQ(options.dtype, torch::kFloat32);
  ASSERT_TRUE(ParseDeviceOptions("cpu", "bfloat16", &options).ok());
  EXPECT_EQ(options.dtype, torch::kBFloat16);
  EXPECT_EQ(DescribeDevice(options), "cpu bfloat16");
  EXPECT_EQ(DtypeName(options), "bfloat16");
  EXPECT_EQ(DeviceName(options), "cpu");
  ASSERT_TRUE(ParseDeviceOptions("cpu", "float16", &options).ok());
  EXPECT_EQ(options.dtype, torch::kFloat16);
}

TEST(ParseDeviceOptions, UnknownValuesNameTheFlag) {
  ModelOptions options;
  absl::Status s = ParseDeviceOptions("tpu", "float32", &options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--device=tpu: expected cpu, cuda or cuda:N"),
            absl::string_view::npos)
      << s;
  for (const char* bad : {"cuda:", "cuda:x", "cuda:-1", "cudax"}) {
    EXPECT_EQ(ParseDeviceOptions(bad, "", &options).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  s = ParseDeviceOptions("cpu", "fp8", &options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--dtype=fp8"), absl::string_view::npos) << s;
}

TEST(ParseDeviceOptions, CudaWithoutADeviceSaysHowToGetOne) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  ModelOptions options;
  absl::Status s = ParseDeviceOptions("cuda", "bfloat16", &options);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("tools/cuda_build.sh"), absl::string_view::npos)
      << s;
  EXPECT_TRUE(options.device.is_cpu());  // unchanged
}

}  // namespace
}  // namespace lookahead::engine
