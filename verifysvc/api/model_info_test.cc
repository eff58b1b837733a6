// ModelInfo reports what is loaded: the model's name and file type from its
// GGUF, and the dtype and device the model actually runs in.
#include "verifysvc/api/model_info.h"

#include <memory>
#include <string>
#include <utility>

#include "engine/model/device_options.h"
#include "engine/testing/byte_tokenizer.h"
#include "engine/testing/engine_test_util.h"
#include "gtest/gtest.h"

namespace lookahead::verifysvc {
namespace {

TEST(ModelInfoTest, ReportsTheLoadedDtypeAndDevice) {
  engine::TinyModelSpec spec;
  auto bytes = engine::TinyModelGguf(spec);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto file = engine::GgufFile::FromBuffer(*std::move(bytes));
  ASSERT_TRUE(file.ok()) << file.status();
  std::unique_ptr<engine::Tokenizer> tokenizer =
      engine::MustCreateTokenizer(engine::ByteLevelSpec({}));
  ASSERT_NE(tokenizer, nullptr);
  RequestLimits limits;
  limits.max_context_tokens = 128;
  limits.max_prompt_tokens = 100;
  limits.default_max_new_tokens = 20;

  for (const char* dtype : {"float32", "bfloat16"}) {
    engine::ModelOptions options;
    ASSERT_TRUE(engine::ParseDeviceOptions("cpu", dtype, &options).ok());
    auto model = engine::LlamaModel::Load(**file, options);
    ASSERT_TRUE(model.ok()) << model.status();
    lookahead::v1::ModelInfoResponse info =
        MakeModelInfo(**file, "/models/tiny.gguf", **model, *tokenizer, limits);
    EXPECT_EQ(info.dtype(), dtype);
    EXPECT_EQ(info.device(), "cpu");
    EXPECT_EQ(info.name(), "tiny-random");
    EXPECT_EQ(info.model_file(), "/models/tiny.gguf");
    EXPECT_EQ(info.architecture(), "llama");
    EXPECT_EQ(info.vocab_size(), spec.vocab);
    EXPECT_EQ(info.context_length(), 128);
    EXPECT_EQ(info.max_prompt_tokens(), 100);
    EXPECT_EQ(info.max_new_tokens(), 20);
  }
}

TEST(ModelInfoTest, FileTypeNamesFollowLlamaCpp) {
  EXPECT_EQ(FileTypeName(0), "F32");
  EXPECT_EQ(FileTypeName(3), "Q4_1");
  EXPECT_EQ(FileTypeName(15), "Q4_K_M");
  EXPECT_EQ(FileTypeName(99), "type 99");
}

}  // namespace
}  // namespace lookahead::verifysvc
