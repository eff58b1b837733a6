// RecycledSource: the verify pass's top-k predictions become a table of
// successors per token and per pair of tokens; a sequence drafts the chain
// of top-1 successors after its last token (by the pair where it was seen),
// with the second-best beside the first node, best first within the budget;
// rates learn from the emitted tokens, process-wide and per sequence;
// policies that exclude the n-gram source get no handle; a withheld kNgram,
// or a step the sources before it covered with a first node rated at least
// as high, drafts nothing.

#include "verifysvc/drafts/recycled_source.h"

#include <vector>

#include "engine/model/draft_tree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verifysvc/drafts/draft_policy.h"
#include "verifysvc/drafts/source_test_util.h"

namespace lookahead::verifysvc {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

engine::DraftTree ProposeOne(RecycledSource* source, int64_t handle, int budget,
                             engine::DraftSourceSet withheld = 0) {
  bool called = true;
  DraftAsk ask{handle, budget};
  ask.withheld = withheld;
  std::vector<engine::DraftTree> trees = source->Propose({ask}, &called);
  EXPECT_FALSE(called);
  return trees.at(0);
}

// A verify pass of a chain tree `nodes` after the root, with k = 2:
// `top[i]` = the two best next tokens at row i (row 0: the root).
VerifiedPredictions Pass(std::vector<int32_t> nodes,
                         std::vector<std::array<int32_t, 2>> top) {
  VerifiedPredictions p;
  p.tokens = nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    p.parents.push_back(static_cast<int32_t>(i) - 1);
  }
  p.k = 2;
  for (const auto& row : top) {
    p.top_tokens.insert(p.top_tokens.end(), row.begin(), row.end());
  }
  return p;
}

TEST(RecycledSourceTest, DraftsTheChainOfRecordedSuccessors) {
  RecycledSource source;
  const int64_t h = source.Open(SourceTestPolicy(), {1, 2, 3});
  ASSERT_NE(h, 0);
  ASSERT_TRUE(source.WantsPredictions(h));
  // Nothing recorded yet: nothing to draft.
  EXPECT_TRUE(ProposeOne(&source, h, 8).empty());

  // Root 3 predicted 10 (then 11); draft node 20 predicted 21 (then 22).
  source.ObserveVerified(h, Pass({20}, {{10, 11}, {21, 22}}));
  source.Observe(h, {10});
  // Then after 10: 12, 13; after 12: 14, 15.
  source.ObserveVerified(h, Pass({12}, {{12, 13}, {14, 15}}));
  source.Observe(h, {12, 14});
  // Last token 14: no successors recorded.
  EXPECT_TRUE(ProposeOne(&source, h, 8).empty());
  EXPECT_THAT(source.Successors(3), ElementsAre(10, 11));
  EXPECT_THAT(source.Successors(20), ElementsAre(21, 22));
  EXPECT_THAT(source.Successors(12), ElementsAre(14, 15));

  // A second sequence after token 3 (the table is the process's): the
  // chain 3 -> 10 -> 12 -> 14, and 11 beside 10.
  const int64_t g = source.Open(SourceTestPolicy(), {7, 3});
  const engine::DraftTree tree = ProposeOne(&source, g, 8);
  ASSERT_EQ(tree.size(), 4);
  EXPECT_THAT(tree.tokens, ElementsAre(10, 11, 12, 14));
  EXPECT_THAT(tree.parents, ElementsAre(-1, -1, 0, 2));
  for (int i = 0; i < tree.size(); ++i) {
    EXPECT_EQ(tree.sources[i], engine::DraftSourceTag::kNgram);
    if (i > 0) EXPECT_LE(tree.scores[i], tree.scores[i - 1]) << i;
  }
  // The budget keeps the best prefix.
  const engine::DraftTree two = ProposeOne(&source, g, 2);
  EXPECT_THAT(two.tokens, ElementsAre(10, 11));
  // branch_length caps the chain.
  DraftPolicy shallow = SourceTestPolicy();
  shallow.branch_length = 1;
  const int64_t s = source.Open(shallow, {3});
  EXPECT_THAT(ProposeOne(&source, s, 8).tokens, ElementsAre(10, 11));
}

TEST(RecycledSourceTest, RatesLearnFromEmittedTokens) {
  RecycledSource source;
  const int64_t h = source.Open(SourceTestPolicy(), {5});
  source.ObserveVerified(h, Pass({6}, {{6, 9}, {7, 8}}));
  const double prior1 = source.Rate(1);
  const double prior2 = source.Rate(2);
  const double prior_second = source.Rate(1, 1);
  source.Observe(h, {6, 7});                      // last token 7
  source.ObserveVerified(h, Pass({}, {{5, 4}}));  // 7 -> 5
  source.Observe(h, {5});
  // The chain after 5 runs 6, 7, 5, 6 (a cycle, cut at branch_length 4),
  // with 9 beside 6; the model emits 6 then 1.
  ASSERT_THAT(ProposeOne(&source, h, 8).tokens, ElementsAre(6, 9, 7, 5, 6));
  source.Observe(h, {6, 1});
  // 6 was found by the token 5 alone (the pair (7, 5) was never seen),
  // 7 by the pair (5, 6).
  EXPECT_GT(source.Rate(1), prior1);                              // 6 held
  EXPECT_LT(source.Rate(2, 0, RecycledSource::kByPair), prior2);  // 7 did not
  EXPECT_EQ(source.Rate(2), prior2);
  EXPECT_LT(source.Rate(1, 1), prior_second);  // 9 did not
  EXPECT_EQ(source.Rate(3), RecycledSource::kPriorHits /
                                RecycledSource::kPriorTries);  // not reached
}

TEST(RecycledSourceTest, PolicyAndWithheldSourceDraftNothing) {
  RecycledSource source;
  EXPECT_EQ(source.Open(SourceTestPolicy(
                            engine::SourceBit(engine::DraftSourceTag::kTrie)),
                        {1}),
            0);
  DraftPolicy off = SourceTestPolicy();
  off.mode = DraftMode::kOff;
  EXPECT_EQ(source.Open(off, {1}), 0);
  const int64_t h = source.Open(
      SourceTestPolicy(engine::SourceBit(engine::DraftSourceTag::kNgram)), {1});
  ASSERT_NE(h, 0);
  source.ObserveVerified(h, Pass({}, {{2, 3}}));
  EXPECT_FALSE(ProposeOne(&source, h, 4).empty());
  EXPECT_TRUE(ProposeOne(&source, h, 4,
                         engine::SourceBit(engine::DraftSourceTag::kNgram))
                  .empty());
  EXPECT_TRUE(ProposeOne(&source, h, 0).empty());
  // A step the sources before it covered (the cascade's refresh unset)
  // with a first node rated at least as high as its own: nothing; rated
  // lower: its tree.
  bool called = true;
  DraftAsk covered{h, 4};
  covered.refresh = false;
  EXPECT_TRUE(source.Propose({covered}, &called).at(0).empty());
  covered.covered_score = 0.05f;
  EXPECT_FALSE(source.Propose({covered}, &called).at(0).empty());
  source.Close(h);
  EXPECT_FALSE(source.WantsPredictions(h));
  EXPECT_TRUE(ProposeOne(&source, h, 4).empty());
}

TEST(RecycledSourceTest, ThePairBeforeATokenChoosesItsSuccessor) {
  RecycledSource source;
  // After 3, the model predicted 10 where 1 came before it, 20 where 2 did.
  const int64_t a = source.Open(SourceTestPolicy(), {1, 3});
  source.ObserveVerified(a, Pass({}, {{10, 11}}));
  const int64_t b = source.Open(SourceTestPolicy(), {2, 3});
  source.ObserveVerified(b, Pass({}, {{20, 21}}));
  EXPECT_THAT(source.Successors(1, 3), ElementsAre(10, 11));
  EXPECT_THAT(source.Successors(2, 3), ElementsAre(20, 21));
  EXPECT_THAT(source.Successors(3), ElementsAre(20, 21));  // the latest
  EXPECT_EQ(ProposeOne(&source, a, 1).tokens.at(0), 10);
  EXPECT_EQ(ProposeOne(&source, b, 1).tokens.at(0), 20);
  // A pair never seen: the token's successors.
  const int64_t c = source.Open(SourceTestPolicy(), {9, 3});
  EXPECT_EQ(ProposeOne(&source, c, 1).tokens.at(0), 20);
  // A draft node's context is its parent: node 20 after root 3 recorded
  // the pair (3, 20).
  source.ObserveVerified(b, Pass({20}, {{20, 21}, {30, 31}}));
  EXPECT_THAT(source.Successors(3, 20), ElementsAre(30, 31));
}

TEST(RecycledSourceTest, ASequenceNothingPredictsStopsScoringHigh) {
  RecycledSource source;
  // Another sequence teaches the table that (6, 5) -> 6 holds.
  const int64_t good = source.Open(SourceTestPolicy(), {6, 5});
  for (int i = 0; i < 40; ++i) {
    source.ObserveVerified(good, Pass({}, {{6, 7}}));
    ASSERT_FALSE(ProposeOne(&source, good, 1).empty());
    source.Observe(good, {6, 5});  // back to 5: a loop the model keeps
  }
  const double process_wide = source.Rate(1, 0, RecycledSource::kByPair);
  EXPECT_GT(process_wide, 0.8);
  // A sequence after (6, 5) that never emits what the table says.
  const int64_t bad = source.Open(SourceTestPolicy(), {6, 5});
  const float first = ProposeOne(&source, bad, 1).scores.at(0);
  EXPECT_NEAR(first, process_wide, 0.01);
  for (int i = 0; i < 8; ++i) {
    ASSERT_FALSE(ProposeOne(&source, bad, 1).empty());
    source.Observe(bad, {8, 6, 5});  // 6 predicted, 8 emitted; back to 5
  }
  const float after = ProposeOne(&source, bad, 1).scores.at(0);
  EXPECT_LT(after, 0.5 * first);
  // The other sequence's score barely moved.
  EXPECT_GT(ProposeOne(&source, good, 1).scores.at(0), 0.75);
}

}  // namespace
}  // namespace lookahead::verifysvc
