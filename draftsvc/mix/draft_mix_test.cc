#include "draftsvc/mix/draft_mix.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

CandidateTree Chain(CandidateSource source, std::vector<int32_t> tokens) {
  CandidateTree tree;
  tree.source = source;
  for (size_t i = 0; i < tokens.size(); ++i) {
    tree.nodes.push_back({tokens[i], static_cast<int32_t>(i) - 1, 0});
  }
  return tree;
}

void ExpectValidTree(const MixedDraft& draft) {
  for (size_t i = 0; i < draft.nodes.size(); ++i) {
    const DraftNode& n = draft.nodes[i];
    ASSERT_LT(n.parent, static_cast<int32_t>(i));
    ASSERT_GE(n.parent, -1);
    ASSERT_EQ(n.depth, n.parent < 0 ? 1 : draft.nodes[n.parent].depth + 1);
    if (n.parent >= 0) {
      ASSERT_LE(n.score, draft.nodes[n.parent].score);
    }
  }
}

TEST(DraftMixTest, IdenticalPathsFromTwoSourcesMergeIntoOneNode) {
  const CalibrationTable rates = CalibrationTable::Prior();
  const CandidateTree trees[] = {Chain(CandidateSource::kOutput, {5, 6, 7}),
                                 Chain(CandidateSource::kNgram, {5, 6, 9})};
  const MixedDraft draft = MixDrafts(trees, rates, {10, 8});
  ExpectValidTree(draft);
  ASSERT_EQ(draft.nodes.size(), 4u);  // 5, 6, then 7 and 9 below 6.
  const uint32_t both = CandidateSourceBit(CandidateSource::kOutput) |
                        CandidateSourceBit(CandidateSource::kNgram);
  EXPECT_EQ(draft.nodes[0].token, 5);
  EXPECT_EQ(draft.nodes[0].source_set, both);
  EXPECT_EQ(draft.nodes[0].source, CandidateSource::kOutput);  // Higher rate.
  const float c = 1 - (1 - 0.5f) * (1 - 0.35f);
  EXPECT_FLOAT_EQ(draft.nodes[0].score, c);
  EXPECT_EQ(draft.nodes[1].source_set, both);
  EXPECT_FLOAT_EQ(draft.nodes[1].score, c * c);
  EXPECT_EQ(draft.nodes[2].token, 7);  // Output's rate is higher.
  EXPECT_EQ(draft.nodes[2].source_set,
            CandidateSourceBit(CandidateSource::kOutput));
  EXPECT_FLOAT_EQ(draft.nodes[2].score, c * c * 0.5f);
  EXPECT_EQ(draft.nodes[3].token, 9);
  EXPECT_EQ(draft.nodes[3].source, CandidateSource::kNgram);
  EXPECT_EQ(draft.nodes[3].ranks[static_cast<int>(CandidateSource::kNgram)], 0);
  EXPECT_EQ(draft.nodes[3].ranks[static_cast<int>(CandidateSource::kOutput)],
            kNoRank);
}

TEST(DraftMixTest, BudgetAndDepthAreRespectedBestFirst) {
  const CalibrationTable rates = CalibrationTable::Prior();
  // A wide prompt fan-out and a long output chain.
  CandidateTree fan;
  fan.source = CandidateSource::kPrompt;
  for (int32_t r = 0; r < 6; ++r) fan.nodes.push_back({100 + r, -1, r});
  const CandidateTree trees[] = {
      fan, Chain(CandidateSource::kOutput, {1, 2, 3, 4, 5, 6, 7, 8})};
  for (int32_t budget : {0, 1, 3, 5, 14}) {
    for (int32_t depth : {1, 3, 8}) {
      const MixedDraft draft = MixDrafts(trees, rates, {budget, depth});
      ExpectValidTree(draft);
      EXPECT_LE(draft.nodes.size(), static_cast<size_t>(budget));
      for (const DraftNode& n : draft.nodes) EXPECT_LE(n.depth, depth);
      // Selected in non-increasing p.
      for (size_t i = 1; i < draft.nodes.size(); ++i) {
        EXPECT_LE(draft.nodes[i].score, draft.nodes[i - 1].score);
      }
    }
  }
  const MixedDraft three = MixDrafts(trees, rates, {3, 8});
  ASSERT_EQ(three.nodes.size(), 3u);
  EXPECT_EQ(three.nodes[0].token, 100);  // 0.6
  EXPECT_EQ(three.nodes[1].token, 1);    // 0.5
  EXPECT_EQ(three.nodes[2].token, 101);  // 0.3 > 0.25 (1 -> 2)
}

TEST(DraftMixTest, CalibrationReordersSources) {
  CalibrationTable rates = CalibrationTable::Prior();
  const CandidateTree trees[] = {Chain(CandidateSource::kPrompt, {1}),
                                 Chain(CandidateSource::kNgram, {2})};
  EXPECT_EQ(MixDrafts(trees, rates, {1, 8}).nodes[0].token, 1);
  rates.set_rate(CandidateSource::kNgram, 0, 0, 0, 0.9f);
  EXPECT_EQ(MixDrafts(trees, rates, {1, 8}).nodes[0].token, 2);
}

TEST(DraftMixTest, MatchLengthsReachTheScores) {
  // Two trie nodes alike but for the context match behind them.
  MixedDraft long_match, short_match;
  long_match.nodes = {{4, -1, 1, CandidateSource::kPrompt, 1.0f}};
  long_match.nodes[0].matches[static_cast<int>(CandidateSource::kPrompt)] = 12;
  short_match.nodes = {{5, -1, 1, CandidateSource::kOutput, 1.0f}};
  short_match.nodes[0].matches[static_cast<int>(CandidateSource::kOutput)] = 1;
  const CandidateTree trees[] = {
      TrieCandidates(long_match, CandidateSource::kPrompt),
      TrieCandidates(short_match, CandidateSource::kOutput)};
  EXPECT_EQ(trees[0].nodes[0].match, 12);
  EXPECT_EQ(trees[1].nodes[0].match, 1);
  CalibrationTable rates = CalibrationTable::Prior();
  rates.set_rate(CandidateSource::kPrompt, 0, 0,
                 CalibrationTable::MatchBucket(1), 0.1f);
  rates.set_rate(CandidateSource::kPrompt, 0, 0,
                 CalibrationTable::MatchBucket(12), 0.95f);
  rates.set_rate(CandidateSource::kOutput, 0, 0,
                 CalibrationTable::MatchBucket(1), 0.3f);
  const MixedDraft draft = MixDrafts(trees, rates, {2, 8});
  ASSERT_EQ(draft.nodes.size(), 2u);
  EXPECT_EQ(draft.nodes[0].token, 4);
  EXPECT_FLOAT_EQ(draft.nodes[0].score, 0.95f);
  EXPECT_EQ(draft.nodes[0].matches[static_cast<int>(CandidateSource::kPrompt)],
            12);
  EXPECT_FLOAT_EQ(draft.nodes[1].score, 0.3f);
}

TEST(DraftMixTest, ParallelModeLaysOutChains) {
  const CalibrationTable rates = CalibrationTable::Prior();
  const CandidateTree trees[] = {Chain(CandidateSource::kOutput, {1, 2, 3}),
                                 Chain(CandidateSource::kNgram, {1, 2, 4})};
  const MixedDraft draft =
      MixDrafts(trees, rates, {8, 8, DraftMode::kParallel});
  ExpectValidTree(draft);
  ASSERT_EQ(draft.nodes.size(), 6u);  // Two chains of 3, prefixes repeated.
  EXPECT_EQ(draft.nodes[3].parent, -1);
  EXPECT_EQ(draft.nodes[3].token, 1);
  EXPECT_TRUE(MixDrafts(trees, rates, {8, 8, DraftMode::kOff}).nodes.empty());
}

TEST(DraftMixTest, TrieCandidatesRankSiblingsByScore) {
  MixedDraft draft;
  draft.nodes = {{7, -1, 1, CandidateSource::kOutput, 2.0f},
                 {8, -1, 1, CandidateSource::kOutput, 5.0f},
                 {9, 0, 2, CandidateSource::kOutput, 1.0f}};
  const CandidateTree c = TrieCandidates(draft, CandidateSource::kOutput);
  ASSERT_EQ(c.nodes.size(), 3u);
  EXPECT_EQ(c.nodes[0].rank, 1);
  EXPECT_EQ(c.nodes[1].rank, 0);
  EXPECT_EQ(c.nodes[2].rank, 0);
  EXPECT_EQ(c.nodes[2].parent, 0);
}

TEST(DraftMixTest, RankedCandidatesRankByScoreAndDropBadParents) {
  // An assistant-style stairs draft: chain 5 6 7, runner-up 8 beside 5.
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9};
  const std::vector<int32_t> parents = {-1, 0, 1, -1, 7};
  const std::vector<float> probs = {0.7f, 0.6f, 0.5f, 0.2f, 0.9f};
  const CandidateTree c =
      RankedCandidates(CandidateSource::kAssistant, tokens, parents, probs);
  EXPECT_EQ(c.source, CandidateSource::kAssistant);
  ASSERT_EQ(c.nodes.size(), 4u);  // 9's parent 7 is out of range.
  EXPECT_EQ(c.nodes[0].rank, 0);
  EXPECT_EQ(c.nodes[3].token, 8);
  EXPECT_EQ(c.nodes[3].rank, 1);
  EXPECT_EQ(c.nodes[2].parent, 1);
  // Mixed with a trie proposing 5 8: the assistant's 5 merges with it.
  const CandidateTree trees[] = {c, Chain(CandidateSource::kOutput, {5, 8})};
  const MixedDraft draft = MixDrafts(trees, CalibrationTable::Prior(), {16, 8});
  ExpectValidTree(draft);
  ASSERT_FALSE(draft.nodes.empty());
  EXPECT_EQ(draft.nodes[0].token, 5);
  EXPECT_EQ(draft.nodes[0].source_set,
            CandidateSourceBit(CandidateSource::kAssistant) |
                CandidateSourceBit(CandidateSource::kOutput));
  EXPECT_EQ(draft.nodes.size(), 5u);  // 5, 6, 7, 8 (root), 8 (below 5).
}

TEST(DraftMixTest, NgramCandidatesChainOneTokenContinuations) {
  auto pool = NgramPool::Create({}).value();
  // A recycled chain a -> b -> c -> d of 1-token continuations, and a
  // 3-token continuation after x.
  ASSERT_TRUE(pool->Add({10}, {11}).ok());
  ASSERT_TRUE(pool->Add({11}, {12}).ok());
  ASSERT_TRUE(pool->Add({12}, {13}).ok());
  ASSERT_TRUE(pool->Add({20}, {21, 22, 23}).ok());
  const NgramPool* pools[] = {pool.get()};
  const CalibrationTable rates = CalibrationTable::Prior();
  const std::vector<int32_t> context = {1, 10};
  CandidateTree c = NgramCandidates(pools, context, rates, 16, 8, 4);
  ASSERT_EQ(c.nodes.size(), 3u);
  EXPECT_EQ(c.nodes[0].token, 11);
  EXPECT_EQ(c.nodes[1].token, 12);
  EXPECT_EQ(c.nodes[2].token, 13);
  EXPECT_EQ(c.nodes[2].parent, 1);
  // Depth limit and budget.
  EXPECT_EQ(NgramCandidates(pools, context, rates, 16, 2, 4).nodes.size(), 2u);
  EXPECT_EQ(NgramCandidates(pools, context, rates, 1, 8, 4).nodes.size(), 1u);
  // A multi-token continuation becomes a branch.
  const std::vector<int32_t> x = {20};
  c = NgramCandidates(pools, x, rates, 16, 8, 4);
  ASSERT_EQ(c.nodes.size(), 3u);
  EXPECT_EQ(c.nodes[2].token, 23);
  EXPECT_EQ(c.nodes[2].parent, 1);
  // A null pool and an unknown context give nothing.
  const NgramPool* none[] = {nullptr};
  EXPECT_TRUE(NgramCandidates(none, context, rates, 16, 8, 4).nodes.empty());
  const std::vector<int32_t> unknown = {99};
  EXPECT_TRUE(NgramCandidates(pools, unknown, rates, 16, 8, 4).nodes.empty());
}

TEST(DraftMixTest, NgramCandidatesCarryTheirKeyLengthAsTheirMatch) {
  auto pool = NgramPool::Create({}).value();
  // After ... 1 2 3: a continuation 30 31 stored under the 3-token key and
  // 40 under the 1-token key 3.
  ASSERT_TRUE(pool->Add({1, 2, 3}, {30, 31}).ok());
  ASSERT_TRUE(pool->Add({3}, {40}).ok());
  const NgramPool* pools[] = {pool.get()};
  const std::vector<int32_t> context = {9, 1, 2, 3};
  CalibrationTable rates = CalibrationTable::Prior();
  CandidateTree c = NgramCandidates(pools, context, rates, 16, 8, 4);
  ASSERT_EQ(c.nodes.size(), 3u);
  // Longest key first (rank 0), then the other root child; the rest of a
  // continuation keeps its key's length.
  EXPECT_EQ(c.nodes[0].token, 30);
  EXPECT_EQ(c.nodes[0].match, 3);
  EXPECT_EQ(c.nodes[1].token, 40);
  EXPECT_EQ(c.nodes[1].match, 1);
  EXPECT_EQ(c.nodes[2].token, 31);
  EXPECT_EQ(c.nodes[2].parent, 0);
  EXPECT_EQ(c.nodes[2].match, 3);
  // The rates are the match's: where 1-token keys have been accepted far
  // more often than 3-token ones, 40 is the one best node.
  for (int rank = 0; rank < CalibrationTable::kRankBuckets; ++rank) {
    const int d = CalibrationTable::DepthBucket(1);
    rates.set_rate(CandidateSource::kNgram, d, rank,
                   CalibrationTable::MatchBucket(1), 0.9f);
    rates.set_rate(CandidateSource::kNgram, d, rank,
                   CalibrationTable::MatchBucket(3), 0.1f);
  }
  c = NgramCandidates(pools, context, rates, 1, 8, 4);
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.nodes[0].token, 40);
  // And the mixer scores them by it too.
  const CandidateTree trees[] = {
      NgramCandidates(pools, context, rates, 16, 8, 4)};
  const MixedDraft draft = MixDrafts(trees, rates, {1, 8});
  ASSERT_EQ(draft.nodes.size(), 1u);
  EXPECT_EQ(draft.nodes[0].token, 40);
  EXPECT_EQ(draft.nodes[0].matches[static_cast<int>(CandidateSource::kNgram)],
            1);
}

}  // namespace
}  // namespace lookahead::draftsvc
