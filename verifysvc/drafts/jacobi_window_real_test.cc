// JacobiWindow on the real model (SmolLM2-135M-Instruct Q4_1): greedy
// decoding of a chat prompt with the window in every verify pass and drafts
// from its n-grams gives exactly plain decoding's tokens. Needs the model
// (tools/setup.sh).
#include <vector>

#include "engine/testing/engine_test_util.h"
#include "engine/testing/reference_decode.h"
#include "gtest/gtest.h"
#include "verifysvc/drafts/jacobi_decode.h"
#include "verifysvc/drafts/jacobi_window.h"

namespace lookahead::verifysvc {
namespace {

TEST(JacobiWindowRealTest, GreedyDecodeWithWindowIsLossless) {
  auto real = engine::LoadRealModel(*engine::TestDeviceOptions());
  ASSERT_TRUE(real.ok()) << real.status();
  std::vector<engine::ChatMessage> chat = {
      {"user", "List three uses of a binary search tree, one line each."}};
  auto prompt = real->tokenizer->EncodeChat(chat, true);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  constexpr int kTokens = 50;
  engine::GenerationOptions plain_options;
  plain_options.max_new_tokens = kTokens;
  auto plain = engine::Generate(*real->model, *prompt, plain_options, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status();
  JacobiDecodeOptions options;
  options.window.window = 4;
  options.window.ngram = 4;
  options.window.max_ngrams = 4;
  options.max_new_tokens = kTokens;
  auto jacobi = JacobiDecode(*real->model, *prompt, options);
  ASSERT_TRUE(jacobi.ok()) << jacobi.status();
  EXPECT_EQ(jacobi->tokens, plain->tokens);
  EXPECT_GT(jacobi->harvested, 0);
}

}  // namespace
}  // namespace lookahead::verifysvc
