#include "engine/model/linear_weight.h"

#include <torch/types.h>
#include <torch/utils.h>

#include "engine/model/threading.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

class LinearWeightTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(ConfigureThreads({}).ok()); }
};

TEST_F(LinearWeightTest, PackedAndDenseAgreeWithMm) {
  torch::manual_seed(0);
  // 70 outputs: not a whole number of panels for either instruction set.
  const torch::Tensor w = torch::randn({96, 70});
  const torch::Tensor x = torch::randn({9, 96});
  const torch::Tensor expected =
      torch::mm(x.to(torch::kDouble), w.to(torch::kDouble));
  for (bool packed : {false, true}) {
    absl::StatusOr<LinearWeight> lw = LinearWeight::Create(w, packed);
    ASSERT_TRUE(lw.ok()) << lw.status();
    EXPECT_EQ(lw->packed(),
              packed && kernels::BestPackedIsa() != kernels::PackedIsa::kNone);
    EXPECT_EQ(lw->in(), 96);
    EXPECT_EQ(lw->out(), 70);
    const torch::Tensor y = lw->Apply(x);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{9, 70}));
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_LT((y.to(torch::kDouble) - expected).abs().max().item<double>(),
              1e-4)
        << "packed=" << packed;
    EXPECT_TRUE(torch::equal(lw->Dense(), w)) << "packed=" << packed;
  }
}

TEST_F(LinearWeightTest, TransposedViewsArePackedAsTheirValues) {
  const torch::Tensor out_major = torch::randn({130, 64});
  absl::StatusOr<LinearWeight> lw = LinearWeight::Create(out_major.t(), true);
  ASSERT_TRUE(lw.ok()) << lw.status();
  EXPECT_TRUE(torch::equal(lw->Dense(), out_major.t()));
}

// What the engine relies on: one token's output is the same bits whether
// it is multiplied alone or with a tree's other tokens (packed only).
TEST_F(LinearWeightTest, PackedRowsDoNotDependOnTheBatch) {
  if (kernels::BestPackedIsa() == kernels::PackedIsa::kNone) {
    GTEST_SKIP() << "no packed kernel on this CPU";
  }
  const torch::Tensor w = torch::randn({576, 960});
  const torch::Tensor x = torch::randn({37, 576});
  absl::StatusOr<LinearWeight> lw = LinearWeight::Create(w, true);
  ASSERT_TRUE(lw.ok()) << lw.status();
  const torch::Tensor all = lw->Apply(x);
  for (int64_t r = 0; r < x.size(0); ++r) {
    EXPECT_TRUE(torch::equal(lw->Apply(x.narrow(0, r, 1)), all.narrow(0, r, 1)))
        << "row " << r;
  }
}

TEST_F(LinearWeightTest, RejectsNonMatrices) {
  absl::StatusOr<LinearWeight> lw =
      LinearWeight::Create(torch::zeros({4}), true);
  EXPECT_EQ(lw.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(lw.status().message().find("2-D"), std::string::npos)
      << lw.status();
  lw = LinearWeight::Create(torch::Tensor(), true);
  EXPECT_EQ(lw.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LinearWeightTest, MismatchedInputThrowsForTheTorchSeam) {
  absl::StatusOr<LinearWeight> lw =
      LinearWeight::Create(torch::zeros({8, 4}), true);
  ASSERT_TRUE(lw.ok());
  EXPECT_THROW(lw->Apply(torch::zeros({2, 7})), c10::Error);
}

}  // namespace
}  // namespace lookahead::engine
