// ConfigFromFlags: how --activations resolves against the weights and the
// device (auto: int8 wherever our own CPU kernels run, the exact f32 form
// elsewhere), and its error for an unknown value.
#include "verifysvc/config.h"

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

}  // namespace
}  // namespace lookahead::verifysvc
