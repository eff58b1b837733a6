// LocalSource: the continuations of the longest earlier suffix as one
// scored tree (best first, topological, within the budget), fresh after
// every Observe; calibration learns from the emitted tokens; policies that
// exclude the tries get no handle; a withheld kTrie drafts nothing.

#include "verifysvc/drafts/local_source.h"

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

engine::DraftTree ProposeOne(LocalSource* source, int64_t handle, int budget) {
  bool called = true;
  std::vector<engine::DraftTree> trees =
      source->Propose({DraftAsk{handle, budget}}, &called);
  EXPECT_FALSE(called);
  return trees.at(0);
}

void ExpectBestFirstTree(const engine::DraftTree& tree) {
  ASSERT_EQ(tree.scores.size(), tree.tokens.size());
  ASSERT_EQ(tree.sources.size(), tree.tokens.size());
  for (int i = 0; i < tree.size(); ++i) {
    EXPECT_GE(tree.parents[i], -1);
    EXPECT_LT(tree.parents[i], i);
    if (i > 0) EXPECT_LE(tree.scores[i], tree.scores[i - 1]);
    EXPECT_GT(tree.scores[i], 0);
    EXPECT_LE(tree.scores[i], 1);
  }
}

TEST(LocalSourceTest, DraftsTheContinuationsOfTheLongestEarlierSuffix) {
  LocalSource source;
  // "1 2 3 4 5" twice with different continuations after "2 3": the
  // suffix "2 3" (key 2) continued by 4 5 6 and by 9 8.
  const int64_t handle = source.Open(
      SourceTestPolicy(), {7, 2, 3, 4, 5, 6, 7, 1, 2, 3, 9, 8, 0, 2, 3});
  ASSERT_NE(handle, 0);
  engine::DraftTree tree = ProposeOne(&source, handle, 16);
  ExpectBestFirstTree(tree);
  // Two branches, depth at most the policy's branch_length (4).
  EXPECT_THAT(tree.tokens,
              ::testing::UnorderedElementsAre(9, 8, 0, 2, 4, 5, 6, 7));
  int roots = 0;
  for (int32_t parent : tree.parents) roots += parent == -1;
  EXPECT_EQ(roots, 2);

  // The budget keeps the best nodes and still a tree.
  engine::DraftTree small = ProposeOne(&source, handle, 3);
  EXPECT_EQ(small.size(), 3);
  ExpectBestFirstTree(small);

  // After emitting 9, the suffix "3 9" (key 2) has one continuation: 8 0 2 3.
  source.Observe(handle, {9});
  tree = ProposeOne(&source, handle, 16);
  EXPECT_THAT(tree.tokens, ElementsAre(8, 0, 2, 3));
  EXPECT_THAT(tree.parents, ElementsAre(-1, 0, 1, 2));
  source.Close(handle);
  EXPECT_EQ(source.Stats().open_sessions, 0);
}

TEST(LocalSourceTest, NoEarlierOccurrenceDraftsNothing) {
  LocalSource source;
  const int64_t handle = source.Open(SourceTestPolicy(), {1, 2, 3, 4});
  EXPECT_THAT(ProposeOne(&source, handle, 8).tokens, IsEmpty());
  EXPECT_THAT(ProposeOne(&source, handle, 0).tokens, IsEmpty());
}

TEST(LocalSourceTest, CalibrationLearnsFromTheEmittedTokens) {
  LocalSource source;
  const double prior = source.Rate(1, 1);
  // A context where "5" was always followed by 6, and drafts that hold.
  const int64_t handle = source.Open(SourceTestPolicy(), {5, 6, 1, 5, 6, 2, 5});
  for (int step = 0; step < 20; ++step) {
    ASSERT_FALSE(ProposeOne(&source, handle, 4).empty());
    source.Observe(handle, {6, 3, 5});  // the draft's 6 holds, then a miss
  }
  // The first steps match 1 token ("5"); later ones the repeated
  // "5 6 3 5" (4), where the whole chain holds.
  EXPECT_GT(source.Rate(1, 1), prior);
  EXPECT_GT(source.Rate(4, 1), 0.8);
  EXPECT_GT(source.Rate(4, 3), 0.8);
}

TEST(LocalSourceTest, OnlyForPoliciesThatMayUseTheTries) {
  LocalSource source;
  EXPECT_EQ(source.Open(SourceTestPolicy(engine::SourceBit(
                            engine::DraftSourceTag::kAssistant)),
                        {1, 1, 1}),
            0);
  DraftPolicy off = SourceTestPolicy();
  off.mode = DraftMode::kOff;
  EXPECT_EQ(source.Open(off, {1, 1, 1}), 0);
  const int64_t handle = source.Open(
      SourceTestPolicy(engine::SourceBit(engine::DraftSourceTag::kTrie)),
      {1, 2, 1, 2, 1});
  ASSERT_NE(handle, 0);
  bool called = false;
  DraftAsk withheld{handle, 8};
  withheld.withheld = engine::SourceBit(engine::DraftSourceTag::kTrie);
  EXPECT_THAT(source.Propose({withheld}, &called).at(0).tokens, IsEmpty());
  EXPECT_FALSE(ProposeOne(&source, handle, 8).empty());
}

}  // namespace
}  // namespace lookahead::verifysvc
