// ConfigFromFlags: how --activations resolves against the weights and the
// device (auto: int8 wherever our own CPU kernels run, the exact f32 form
// elsewhere), and its error for an unknown value; --free_ask_min_pass_ms's
// range.
#include "verifysvc/config.h"

#include <cmath>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, activations);
ABSL_DECLARE_FLAG(std::string, weights);
ABSL_DECLARE_FLAG(std::string, dtype);
ABSL_DECLARE_FLAG(std::string, kv_cache);
ABSL_DECLARE_FLAG(double, free_ask_min_pass_ms);

namespace lookahead::verifysvc {
namespace {

using ::testing::HasSubstr;

class ActivationsFlagTest : public ::testing::Test {
 protected:
  absl::FlagSaver saver_;  // every test starts from the defaults
};

TEST_F(ActivationsFlagTest, AutoIsInt8OnNativeWeights) {
  auto config = ConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model.activations, engine::LinearActivations::kInt8);
  EXPECT_FALSE(config->model.kv_f16);  // auto: float32
}

TEST_F(ActivationsFlagTest, KvCacheIsF32UnlessSet) {
  absl::SetFlag(&FLAGS_activations, "f32");
  auto exact = ConfigFromFlags();
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_FALSE(exact->model.kv_f16);
  absl::SetFlag(&FLAGS_kv_cache, "f16");
  auto f16 = ConfigFromFlags();
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_TRUE(f16->model.kv_f16);
  absl::SetFlag(&FLAGS_kv_cache, "q8");
  auto bad = ConfigFromFlags();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("--kv_cache"));
}

TEST_F(ActivationsFlagTest, AutoIsF32WhereInt8DoesNotRun) {
  absl::SetFlag(&FLAGS_weights, "f32");
  auto libtorch = ConfigFromFlags();
  ASSERT_TRUE(libtorch.ok()) << libtorch.status();
  EXPECT_EQ(libtorch->model.activations, engine::LinearActivations::kF32);
  absl::SetFlag(&FLAGS_weights, "native");
  absl::SetFlag(&FLAGS_dtype, "bfloat16");
  auto bf16 = ConfigFromFlags();
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->model.activations, engine::LinearActivations::kF32);
}

TEST_F(ActivationsFlagTest, ExplicitFormsAndBadValues) {
  absl::SetFlag(&FLAGS_activations, "f32");
  auto exact = ConfigFromFlags();
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->model.activations, engine::LinearActivations::kF32);
  absl::SetFlag(&FLAGS_activations, "fp8");
  auto bad = ConfigFromFlags();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("--activations"));
  EXPECT_THAT(bad.status().message(), HasSubstr("or auto"));
}

TEST_F(ActivationsFlagTest, FreeAskThresholdInMillisecondsWithinRange) {
  auto config = ConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->scheduler.free_ask_min_pass_seconds, 0.020);
  absl::SetFlag(&FLAGS_free_ask_min_pass_ms, 0.0);
  config = ConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->scheduler.free_ask_min_pass_seconds, 0);
  for (double bad : {-1.0, 60001.0, std::nan("")}) {
    absl::SetFlag(&FLAGS_free_ask_min_pass_ms, bad);
    config = ConfigFromFlags();
    ASSERT_FALSE(config.ok()) << bad;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(config.status().message(), HasSubstr("--free_ask_min_pass_ms"));
  }
}

}  // namespace
}  // namespace lookahead::verifysvc
