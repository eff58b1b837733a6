// AssistantSource on the real model (SmolLM2-135M-Instruct Q4_1) as its own
// assistant: its chains are the model's greedy continuation of what the
// sequence has seen (the prompt's last tokens, then the emitted ones),
// after rejected drafts too; it drafts only where the sources before it are
// weak and while its gate says a node pays. Needs the model
// (tools/setup.sh).
#include "verifysvc/drafts/assistant_source.h"

#include <torch/types.h>

#include <memory>
#include <vector>

#include "engine/model/sampler.h"
#include "gtest/gtest.h"
#include "verifysvc/drafts/real_model_test_util.h"

namespace lookahead::verifysvc {
namespace {

class AssistantSourceTest : public RealModelSourceTest {
 protected:
  // The model's greedy continuation of `context`, n tokens, from a fresh
  // cache: one prefill, then one-token passes.
  static std::vector<int32_t> Greedy(const std::vector<int32_t>& context,
                                     int n) {
    const engine::LlamaModel& model = *real_->model;
    auto cache = *model.NewCache(static_cast<int>(context.size()) + n + 1);
    torch::Tensor logits = *model.Prefill(cache.get(), context);
    std::vector<int32_t> out;
    while (static_cast<int>(out.size()) < n) {
      torch::Tensor row = logits.to(torch::kCPU).contiguous();
      const int32_t next = engine::ArgMax(absl::MakeConstSpan(
          row.data_ptr<float>(), static_cast<size_t>(row.numel())));
      out.push_back(next);
      logits = *model.Prefill(cache.get(), {next});
    }
    return out;
  }
  static DraftPolicy Policy() {
    DraftPolicy policy;
    policy.mode = DraftMode::kTrieHierarchical;
    policy.decoding_length = 8;
    return policy;
  }
  static DraftAsk Ask(int64_t handle) {
    DraftAsk ask;
    ask.handle = handle;
    ask.budget = 8;
    ask.covered_score = 0;
    return ask;
  }
  static engine::DraftTree ProposeOne(AssistantSource& source,
                                      const DraftAsk& ask) {
    bool called = false;
    std::vector<engine::DraftTree> trees = source.Propose({ask}, &called);
    EXPECT_EQ(trees.size(), 1u);
    // Its passes are not draft calls: Stats() counts them instead.
    EXPECT_FALSE(called);
    return trees.empty() ? engine::DraftTree{} : trees[0];
  }
};

TEST_F(AssistantSourceTest, ChainsAreTheGreedyContinuationAfterAnyTokens) {
  AssistantSourceOptions options;
  options.prompt_tokens = 1 << 20;  // the whole prompt
  options.gate = false;
  AssistantSource source(real_->model.get(), options);
  std::vector<int32_t> context = Prompt();
  const int64_t handle = source.Open(Policy(), context);
  ASSERT_NE(handle, 0);

  engine::DraftTree tree = ProposeOne(source, Ask(handle));
  EXPECT_EQ(tree.tokens, Greedy(context, options.max_chain));
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{-1, 0, 1}));
  ASSERT_EQ(tree.scores.size(), tree.tokens.size());
  for (size_t i = 0; i < tree.scores.size(); ++i) {
    EXPECT_GT(tree.scores[i], 0);
    EXPECT_LE(tree.scores[i], 1);
    if (i > 0) {
      EXPECT_LE(tree.scores[i], tree.scores[i - 1]);
    }
  }
  for (engine::DraftSourceTag tag : tree.sources) {
    EXPECT_EQ(tag, engine::DraftSourceTag::kAssistant);
  }
  EXPECT_GT(tree.source_seconds, 0);

  // The first node accepted, the second rejected, and a bonus token other
  // than the draft's: the cache drops the rejected drafts and catches up.
  const int32_t bonus = tree.tokens[1] == 42 ? 43 : 42;
  source.Observe(handle, {tree.tokens[0], bonus});
  context.push_back(tree.tokens[0]);
  context.push_back(bonus);
  tree = ProposeOne(source, Ask(handle));
  EXPECT_EQ(tree.tokens, Greedy(context, options.max_chain));

  // Several steps' tokens at once (steps it did not draft).
  const std::vector<int32_t> more = Greedy(context, 5);
  source.Observe(handle, {more[0], more[1]});
  source.Observe(handle, {more[2]});
  context.insert(context.end(), more.begin(), more.begin() + 3);
  tree = ProposeOne(source, Ask(handle));
  EXPECT_EQ(tree.tokens, Greedy(context, options.max_chain));
  source.Close(handle);
  EXPECT_EQ(source.Stats().open_sessions, 0);
}

TEST_F(AssistantSourceTest, ReadsThePromptsLastTokensOnly) {
  AssistantSourceOptions options;
  options.prompt_tokens = 8;
  options.max_chain = 2;
  options.gate = false;
  AssistantSource source(real_->model.get(), options);
  const std::vector<int32_t> prompt = Prompt();
  ASSERT_GT(prompt.size(), 8u);
  const int64_t handle = source.Open(Policy(), prompt);
  const engine::DraftTree tree = ProposeOne(source, Ask(handle));
  EXPECT_EQ(tree.tokens,
            Greedy(std::vector<int32_t>(prompt.end() - 8, prompt.end()), 2));
}

TEST_F(AssistantSourceTest, DraftsOnlyWhereTheSourcesBeforeItAreWeak) {
  AssistantSourceOptions options;
  options.gate = false;
  AssistantSource source(real_->model.get(), options);
  const int64_t handle = source.Open(Policy(), Prompt());
  DraftAsk ask = Ask(handle);
  ask.covered_score = options.covered_below;
  EXPECT_TRUE(ProposeOne(source, ask).empty());
  ask.covered_score = options.covered_below / 2;
  EXPECT_FALSE(ProposeOne(source, ask).empty());
  ask.budget = 0;
  EXPECT_TRUE(ProposeOne(source, ask).empty());
  ask.budget = 1;
  EXPECT_EQ(ProposeOne(source, ask).size(), 1);
}

TEST_F(AssistantSourceTest, TheGateWeighsAPassAgainstWhatItSaves) {
  AssistantSource source(real_->model.get(), AssistantSourceOptions{});
  const int64_t handle = source.Open(Policy(), Prompt());
  DraftAsk ask = Ask(handle);
  // Its pass is unknown until one ran: it drafts, and times it.
  ask.token_seconds = 1e-9;
  EXPECT_FALSE(ProposeOne(source, ask).empty());
  DraftSourceStats stats = source.Stats();
  EXPECT_EQ(stats.model_gate_runs, 1);
  EXPECT_EQ(stats.model_gate_skips, 0);
  EXPECT_GE(stats.model_passes, 1);
  EXPECT_GT(stats.model_seconds, 0);
  // A token worth a nanosecond never pays for a pass.
  EXPECT_TRUE(ProposeOne(source, ask).empty());
  EXPECT_EQ(source.Stats().model_gate_skips, 1);
  EXPECT_EQ(source.Stats().model_passes, stats.model_passes);
  // One worth a minute always does, as deep as the chain goes: one pass
  // over the last context token (the cache still holds the first chain),
  // then one for each node after the first.
  ask.token_seconds = 60;
  EXPECT_EQ(ProposeOne(source, ask).size(), AssistantSourceOptions{}.max_chain);
  EXPECT_EQ(source.Stats().model_gate_runs, 2);
  EXPECT_EQ(source.Stats().model_passes,
            stats.model_passes + AssistantSourceOptions{}.max_chain);
  // Misses lower the sequence's rate (from its prior, 0.6) until a token
  // worth 2.5 passes stops paying.
  ask.row_seconds = 0;
  int drafted = 0;
  for (int step = 0; step < 40; ++step) {
    ask.token_seconds = 2.5 * source.seconds_per_pass();
    const engine::DraftTree tree = ProposeOne(source, ask);
    if (tree.empty()) break;
    ++drafted;
    source.Observe(handle, {tree.tokens[0] == 42 ? 43 : 42});
  }
  EXPECT_GT(drafted, 0);
  EXPECT_LT(drafted, 40);
}

TEST_F(AssistantSourceTest, OnlyForPoliciesThatMayUseTheAssistant) {
  AssistantSource source(real_->model.get(), AssistantSourceOptions{});
  DraftPolicy trie_only = Policy();
  trie_only.sources = engine::SourceBit(engine::DraftSourceTag::kTrie);
  EXPECT_EQ(source.Open(trie_only, Prompt()), 0);
  DraftPolicy off = Policy();
  off.mode = DraftMode::kOff;
  EXPECT_EQ(source.Open(off, Prompt()), 0);
  DraftPolicy named = Policy();
  named.sources = engine::SourceBit(engine::DraftSourceTag::kAssistant);
  EXPECT_NE(source.Open(named, Prompt()), 0);
  EXPECT_EQ(source.Open(Policy(), {}), 0);
}

}  // namespace
}  // namespace lookahead::verifysvc
