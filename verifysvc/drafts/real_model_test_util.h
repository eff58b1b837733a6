// The fixture of the draft sources' suites that run the real model
// (SmolLM2-135M-Instruct Q4_1; tools/setup.sh): the model loaded once per
// process (engine::SharedRealModel) and the chat prompt they share.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_REAL_MODEL_TEST_UTIL_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_REAL_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "engine/testing/engine_test_util.h"
#include "gtest/gtest.h"

namespace lookahead::verifysvc {

class RealModelSourceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { real_ = engine::SharedRealModel(); }
  void SetUp() override { ASSERT_NE(real_, nullptr); }

  // One user turn, in the model's chat template.
  static std::vector<int32_t> Prompt() {
    std::vector<engine::ChatMessage> chat = {
        {"user", "List three uses of a binary search tree, one line each."}};
    return *real_->tokenizer->EncodeChat(chat, true);
  }

  static inline const engine::RealModel* real_ = nullptr;  // process-lifetime
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_REAL_MODEL_TEST_UTIL_H_
