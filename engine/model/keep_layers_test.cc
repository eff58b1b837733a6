// ModelOptions::keep_layers (layer skipping for draftsvc's self-drafting
// assistant): a model loaded with a subset of a file's layers computes
// exactly what a model whose file holds only those layers computes (the
// oracle is an independently rewritten GGUF), on both weight formats; all
// layers is the plain model; bad subsets are INVALID_ARGUMENT.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/gguf/gguf.h"
#include "engine/model/llama_model.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;

TinyModelSpec FourLayers() {
  TinyModelSpec spec;
  spec.layers = 4;
  spec.weight_type = GgmlType::kQ4_1;
  return spec;
}

// The GGUF of `file` with only blk.<keep[i]> renamed to blk.<i> and the
// block count set to keep.size(): the oracle for keep_layers.
std::string KeepOnly(const GgufFile& file, const std::vector<int>& keep) {
  GgufWriter w;
  for (const auto& [key, value] : file.metadata()) {
    if (absl::EndsWith(key, ".block_count")) {
      w.AddMetadata(key, GgufValue::Uint32(keep.size()));
    } else {
      w.AddMetadata(key, value);
    }
  }
  for (const GgufTensorInfo& t : file.tensors()) {
    std::string name = t.name;
    if (absl::StartsWith(name, "blk.")) {
      const size_t dot = name.find('.', 4);
      const int layer = std::stoi(name.substr(4, dot - 4));
      int kept = -1;
      for (size_t i = 0; i < keep.size(); ++i) {
        if (keep[i] == layer) kept = static_cast<int>(i);
      }
      if (kept < 0) continue;
      name = absl::StrCat("blk.", kept, name.substr(dot));
    }
    absl::Span<const uint8_t> data = file.TensorData(t);
    w.AddRawTensor(name, t.dims, static_cast<uint32_t>(t.type),
                   std::string(data.begin(), data.end()));
  }
  return w.WriteToString();
}

class KeepLayersTest : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(KeepLayersTest, SubsetEqualsAFileOfOnlyThoseLayers) {
  auto bytes = TinyModelGguf(FourLayers());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto file = GgufFile::FromBuffer(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::vector<int32_t> tokens = {3, 14, 15, 92, 65, 35};
  ModelOptions options;
  options.weights = GetParam();
  for (const std::vector<int>& keep :
       std::vector<std::vector<int>>{{0}, {0, 2}, {1, 3}, {0, 1, 2}}) {
    SCOPED_TRACE(::testing::PrintToString(keep));
    ModelOptions subset = options;
    subset.keep_layers = keep;
    auto skipping = LlamaModel::Load(**file, subset);
    ASSERT_TRUE(skipping.ok()) << skipping.status();
    EXPECT_EQ((*skipping)->config().block_count, static_cast<int>(keep.size()));
    auto oracle_file = GgufFile::FromBuffer(KeepOnly(**file, keep));
    ASSERT_TRUE(oracle_file.ok()) << oracle_file.status();
    auto oracle = LlamaModel::Load(**oracle_file, options);
    ASSERT_TRUE(oracle.ok()) << oracle.status();
    EXPECT_TRUE(torch::equal(ChainLogits(**skipping, tokens),
                             ChainLogits(**oracle, tokens)));
  }
  // Every layer is the plain model; a real subset is not.
  ModelOptions all = options;
  all.keep_layers = {0, 1, 2, 3};
  auto full = LlamaModel::Load(**file, options);
  auto kept = LlamaModel::Load(**file, all);
  ModelOptions two = options;
  two.keep_layers = {0, 1};
  auto half = LlamaModel::Load(**file, two);
  ASSERT_TRUE(full.ok() && kept.ok() && half.ok());
  EXPECT_TRUE(
      torch::equal(ChainLogits(**full, tokens), ChainLogits(**kept, tokens)));
  EXPECT_FALSE(
      torch::equal(ChainLogits(**full, tokens), ChainLogits(**half, tokens)));
}

INSTANTIATE_TEST_SUITE_P(Formats, KeepLayersTest,
                         ::testing::Values(WeightFormat::kNative,
                                           WeightFormat::kF32));

TEST(KeepLayersErrorsTest, BadSubsetsAreInvalidArgument) {
  auto bytes = TinyModelGguf(FourLayers());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto file = GgufFile::FromBuffer(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  for (const std::vector<int>& keep :
       std::vector<std::vector<int>>{{4}, {-1}, {1, 1}, {2, 0}}) {
    ModelOptions options;
    options.keep_layers = keep;
    auto model = LlamaModel::Load(**file, options);
    ASSERT_FALSE(model.ok()) << ::testing::PrintToString(keep);
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(model.status().message(), HasSubstr("keep_layers"));
    EXPECT_THAT(model.status().message(), HasSubstr("[0, 4)"));
  }
}

}  // namespace
}  // namespace lookahead::engine
