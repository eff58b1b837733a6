// ModelOptions::head_tokens (draftsvc's --assistant_head_tokens): the LM
// head scores only the ids below it, each exactly as the whole head does,
// and every other id's logit is -infinity, so no argmax or sample picks it;
// in both activation forms and with a tied or separate output matrix. Out
// of range values, and weights other than native ones, are
// INVALID_ARGUMENT.
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/gguf/gguf.h"
#include "engine/model/llama_model.h"
#include "engine/model/native_linear.h"
#include "engine/testing/engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kVocab = 101;

struct HeadCase {
  LinearActivations activations;
  bool tied;
};

class HeadTokensTest : public ::testing::TestWithParam<HeadCase> {};

TEST_P(HeadTokensTest, ScoresTheLowIdsAsTheWholeHeadAndNoOthers) {
  TinyModelSpec spec;
  spec.vocab = kVocab;
  spec.weight_type = GgmlType::kQ4_1;
  spec.tied = GetParam().tied;
  auto bytes = TinyModelGguf(spec);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto file = GgufFile::FromBuffer(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  ModelOptions options;
  options.activations = GetParam().activations;
  auto whole = LlamaModel::Load(**file, options);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::vector<int32_t> tokens = {3, 14, 15, 92, 65, 35};
  const torch::Tensor all = ChainLogits(**whole, tokens);
  // Cut at the highest id some row's argmax takes, so that row's winner is
  // among the ids cut off.
  const int64_t head = all.argmax(1).max().item<int64_t>();
  ASSERT_GE(head, 1);
  options.head_tokens = head;
  auto cut = LlamaModel::Load(**file, options);
  ASSERT_TRUE(cut.ok()) << cut.status();

  EXPECT_THAT((*cut)->DescribeWeights(),
              HasSubstr(absl::StrCat("LM head ", head, " of 101 ids")));
  EXPECT_THAT((*whole)->DescribeWeights(), Not(HasSubstr("LM head")));

  const torch::Tensor low = ChainLogits(**cut, tokens);
  ASSERT_EQ(low.sizes(), all.sizes());
  EXPECT_TRUE(torch::equal(low.narrow(1, 0, head), all.narrow(1, 0, head)));
  const torch::Tensor rest = low.narrow(1, head, kVocab - head);
  EXPECT_TRUE(
      torch::all(rest == -std::numeric_limits<float>::infinity()).item<bool>());
  EXPECT_TRUE(torch::all(low.argmax(1) < head).item<bool>());

  // head_tokens = vocabulary size is the whole head.
  options.head_tokens = kVocab;
  auto every = LlamaModel::Load(**file, options);
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_TRUE(torch::equal(ChainLogits(**every, tokens), all));
}

INSTANTIATE_TEST_SUITE_P(
    Forms, HeadTokensTest,
    ::testing::Values(HeadCase{LinearActivations::kF32, true},
                      HeadCase{LinearActivations::kF32, false},
                      HeadCase{LinearActivations::kInt8, true},
                      HeadCase{LinearActivations::kInt8, false}));

TEST(HeadTokensErrorsTest, OutOfRangeAndNonNativeWeightsAreInvalidArgument) {
  TinyModelSpec spec;
  spec.vocab = kVocab;
  auto bytes = TinyModelGguf(spec);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto file = GgufFile::FromBuffer(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  for (const int64_t head : {int64_t{-1}, int64_t{kVocab + 1}}) {
    ModelOptions options;
    options.head_tokens = head;
    auto model = LlamaModel::Load(**file, options);
    ASSERT_FALSE(model.ok()) << head;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(model.status().message(), HasSubstr("head tokens"));
    EXPECT_THAT(model.status().message(), HasSubstr("101"));
  }
  ModelOptions dense;
  dense.weights = WeightFormat::kF32;
  dense.head_tokens = 40;
  auto model = LlamaModel::Load(**file, dense);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), HasSubstr("native weights"));
}

}  // namespace
}  // namespace lookahead::engine
