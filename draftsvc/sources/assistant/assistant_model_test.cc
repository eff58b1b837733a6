// draftsvc runs the model through the shared engine: the embedded GGUF
// loads, one forward pass continues a prompt exactly as the engine's plain
// greedy decoding does, and a vocabulary mismatch is a clear error.
#include "draftsvc/sources/assistant/assistant_model.h"

#include <memory>
#include <vector>

#include "engine/gguf/model_files.h"
#include "engine/testing/reference_decode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

using ::testing::HasSubstr;

// Token ids of a prompt in SmolLM2's vocabulary (any ids would do).
const std::vector<int32_t> kPrompt = {504, 30150, 3501, 5343, 11627, 314};

TEST(AssistantModelTest, ContinuesLikePlainGreedyDecoding) {
  auto assistant =
      AssistantModel::Load(engine::DefaultModelPath(), /*vocab_size=*/49152);
  ASSERT_TRUE(assistant.ok()) << assistant.status();
  EXPECT_EQ((*assistant)->config().vocab_size, 49152);
  // One forward pass: the first token after the prompt.
  auto one = (*assistant)->Continue(kPrompt, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);

  auto four = (*assistant)->Continue(kPrompt, 4);
  ASSERT_TRUE(four.ok()) << four.status();
  auto file = engine::OpenModelFile(engine::DefaultModelPath());
  ASSERT_TRUE(file.ok());
  auto model = engine::LlamaModel::Load(**file, {});
  ASSERT_TRUE(model.ok());
  engine::GenerationOptions options;
  options.max_new_tokens = 4;
  auto plain = engine::Generate(**model, kPrompt, options, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*four, plain->tokens);
  EXPECT_EQ((*one)[0], plain->tokens[0]);
}

TEST(AssistantModelTest, VocabularyMismatchIsFailedPrecondition) {
  auto assistant = AssistantModel::Load(engine::DefaultModelPath(), 32000);
  ASSERT_FALSE(assistant.ok());
  EXPECT_EQ(assistant.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(assistant.status().message(), HasSubstr("49152"));
  EXPECT_THAT(assistant.status().message(), HasSubstr("32000"));
}

TEST(AssistantModelTest, BadInputIsNamed) {
  auto assistant = AssistantModel::Load(engine::DefaultModelPath(), 0);
  ASSERT_TRUE(assistant.ok()) << assistant.status();
  EXPECT_EQ((*assistant)->Continue({}, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*assistant)->Continue(kPrompt, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*assistant)->Continue({49152}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssistantModel::Load("/nonexistent.gguf", 0).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace lookahead::draftsvc
