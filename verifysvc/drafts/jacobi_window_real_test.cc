// JacobiWindow on the real model (SmolLM2-135M-Instruct Q4_1): each window
// row's logits are those of its explicit causal context, the verify tree's
// logits do not move when the window joins the pass, and greedy decoding of
// a chat prompt with the window in every verify pass and drafts from its
// n-grams gives exactly plain decoding's tokens. Needs the model
// (tools/setup.sh).
#include <torch/types.h>

#include <memory>
#include <vector>

#include "engine/model/batch.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/reference_decode.h"
#include "gtest/gtest.h"
#include "verifysvc/drafts/jacobi_decode.h"
#include "verifysvc/drafts/jacobi_window.h"
#include "verifysvc/drafts/real_model_test_util.h"

namespace lookahead::verifysvc {
namespace {

// Max |difference| of float32 logits between two evaluation orders of the
// same math (as llama_model_real_test's kTol; logits are O(10)).
constexpr double kTol = 1e-4;

class JacobiWindowRealTest : public RealModelSourceTest {};

// One verify pass of [root, 3-node draft] + a (4, 4) window: every window
// row equals the last logits of its own causal context prefilled alone, and
// the tree's rows equal the tree verified without the window.
TEST_F(JacobiWindowRealTest, RowsMatchTheirCausalContexts) {
  const engine::LlamaModel& model = *real_->model;
  const std::vector<int32_t> prompt = Prompt();
  const std::vector<int32_t> head(prompt.begin(), prompt.end() - 1);
  const int32_t root = prompt.back();
  auto cache = *model.NewCache(256);
  auto alone = *model.NewCache(256);
  ASSERT_TRUE(model.Prefill(cache.get(), head).ok());
  ASSERT_TRUE(model.Prefill(alone.get(), head).ok());
  JacobiOptions options;
  options.window = 4;
  options.ngram = 4;
  options.max_ngrams = 4;
  options.vocab_size = model.config().vocab_size;
  auto window = *JacobiWindow::Create(options, prompt);
  engine::DraftTree draft{{504, 2683, 30}, {-1, 0, -1}, {}};
  auto want_tree = model.VerifyTree(alone.get(), root, draft);
  ASSERT_TRUE(want_tree.ok()) << want_tree.status();
  engine::SequenceRows rows =
      *engine::RowsFromTree(engine::MakeVerifyInput(cache.get(), root, draft));
  ASSERT_TRUE(window->AppendRows(&rows).ok());
  auto logits = model.ForwardRows(absl::MakeConstSpan(&rows, 1));
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_LT(engine::MaxAbsDiff((*logits)[0].narrow(0, 0, 4), *want_tree), kTol);
  for (int l = 0; l < 3; ++l) {
    for (int i = 0; i < 4; ++i) {
      std::vector<int32_t> context = prompt;
      for (int j = 0; j < i; ++j) context.push_back(window->token(0, j));
      for (int m = 0; m <= l; ++m) context.push_back(window->token(m, i));
      auto fresh = *model.NewCache(256);
      auto want = model.Prefill(fresh.get(), context);
      ASSERT_TRUE(want.ok()) << want.status();
      EXPECT_LT(engine::MaxAbsDiff((*logits)[0][4 + l * 4 + i], *want), kTol)
          << "row " << l << "," << i;
    }
  }
}

TEST_F(JacobiWindowRealTest, GreedyDecodeWithWindowIsLossless) {
  const std::vector<int32_t> prompt = Prompt();
  const engine::LlamaModel& model = *real_->model;
  constexpr int kTokens = 50;
  engine::GenerationOptions plain_options;
  plain_options.max_new_tokens = kTokens;
  auto plain = engine::Generate(model, prompt, plain_options, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status();
  JacobiDecodeOptions options;
  options.window.window = 4;
  options.window.ngram = 4;
  options.window.max_ngrams = 4;
  options.max_new_tokens = kTokens;
  auto jacobi = JacobiDecode(model, prompt, options);
  ASSERT_TRUE(jacobi.ok()) << jacobi.status();
  EXPECT_EQ(jacobi->tokens, plain->tokens);
  EXPECT_GT(jacobi->harvested, 0);
}

}  // namespace
}  // namespace lookahead::verifysvc
