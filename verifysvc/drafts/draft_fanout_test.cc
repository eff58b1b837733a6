#include "verifysvc/drafts/draft_fanout.h"

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verifysvc/drafts/draft_policy.h"
#include "verifysvc/drafts/draft_source.h"

namespace lookahead::verifysvc {
namespace {

// Token ids the fanout accepts in these tests (trees here use small ids).
constexpr int32_t kFanoutVocab = 1 << 20;

using engine::DraftSourceTag;
using engine::DraftTree;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A tree from (token, parent) pairs, every node tagged `tag`.
DraftTree Tree(std::vector<std::pair<int32_t, int32_t>> nodes,
               DraftSourceTag tag) {
  DraftTree tree;
  for (const auto& [token, parent] : nodes) {
    tree.tokens.push_back(token);
    tree.parents.push_back(parent);
    tree.sources.push_back(tag);
  }
  return tree;
}

// A chain of `tokens` under the root.
DraftTree Chain(std::vector<int32_t> tokens, DraftSourceTag tag) {
  std::vector<std::pair<int32_t, int32_t>> nodes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    nodes.push_back({tokens[i], static_cast<int32_t>(i) - 1});
  }
  return Tree(std::move(nodes), tag);
}

// Node i's tokens from the root down to it.
std::vector<int32_t> PathTo(const DraftTree& tree, int i) {
  std::vector<int32_t> path;
  for (int n = i; n >= 0; n = tree.parents[n]) path.push_back(tree.tokens[n]);
  return {path.rbegin(), path.rend()};
}

// Every root path of `tree` -> the source tag of its (first) node.
std::map<std::vector<int32_t>, DraftSourceTag> Paths(const DraftTree& tree) {
  std::map<std::vector<int32_t>, DraftSourceTag> paths;
  for (int i = 0; i < tree.size(); ++i) {
    paths.try_emplace(PathTo(tree, i), tree.sources.empty()
                                           ? DraftSourceTag::kUnknown
                                           : tree.sources[i]);
  }
  return paths;
}

// "" iff `tree` is topologically ordered, its arrays agree in length and no
// two siblings carry one token; else what is wrong.
std::string TreeError(const DraftTree& tree) {
  if (tree.parents.size() != tree.tokens.size()) return "parents size";
  if (!tree.sources.empty() && tree.sources.size() != tree.tokens.size()) {
    return "sources size";
  }
  std::set<std::pair<int32_t, int32_t>> siblings;  // (parent, token)
  for (int i = 0; i < tree.size(); ++i) {
    if (tree.parents[i] < -1 || tree.parents[i] >= i) {
      return absl::StrCat("node ", i, " has parent ", tree.parents[i]);
    }
    if (!siblings.insert({tree.parents[i], tree.tokens[i]}).second) {
      return absl::StrCat("node ", i, " duplicates a sibling's token ",
                          tree.tokens[i]);
    }
  }
  return "";
}

// A DraftSource that records every call and proposes configured trees.
class FakeSource : public DraftSource {
 public:
  explicit FakeSource(std::string name) : name_(std::move(name)) {}

  struct ProposeCall {
    std::vector<DraftAsk> asks;
  };

  // The handle the next Open returns (then counts up); 0: never drafts.
  void set_next_handle(int64_t handle) { next_handle_ = handle; }
  // The tree Propose returns for `handle` (else an empty tree).
  void set_tree(int64_t handle, DraftTree tree) {
    trees_[handle] = std::move(tree);
  }
  void set_called(bool called) { called_ = called; }
  void set_cost(DraftCost cost) { cost_ = cost; }
  void set_stats(DraftSourceStats stats) { stats_ = stats; }

  std::string name() const override { return name_; }
  int64_t Open(const DraftPolicy& policy,
               absl::Span<const int32_t> prompt) override {
    opened_prompts.emplace_back(prompt.begin(), prompt.end());
    opened_policies.push_back(policy);
    const int64_t handle = next_handle_;
    if (next_handle_ != 0) ++next_handle_;
    return handle;
  }
  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override {
    observed.push_back({handle, {tokens.begin(), tokens.end()}});
  }
  std::vector<DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                 bool* called) override {
    proposed.push_back({{asks.begin(), asks.end()}});
    *called = called_;
    std::vector<DraftTree> out;
    for (const DraftAsk& ask : asks) {
      auto it = trees_.find(ask.handle);
      out.push_back(it == trees_.end() ? DraftTree{} : it->second);
    }
    return out;
  }
  void Close(int64_t handle) override { closed.push_back(handle); }
  DraftCost cost() const override { return cost_; }
  DraftSourceStats Stats() const override { return stats_; }
  bool WantsPredictions(int64_t handle) const override {
    return wants_predictions;
  }
  void ObserveVerified(int64_t handle,
                       const VerifiedPredictions& predictions) override {
    verified.push_back({handle, predictions.top_tokens});
  }
  void ObserveNgrams(int64_t handle,
                     absl::Span<const std::vector<int32_t>> ngrams) override {
    harvested.push_back({handle, {ngrams.begin(), ngrams.end()}});
  }
  absl::Status Failure(int64_t handle) const override {
    auto it = failures.find(handle);
    return it == failures.end() ? absl::OkStatus() : it->second;
  }
  void WaitOpened(int64_t handle, absl::Time deadline) const override {
    waited.push_back({handle, deadline});
  }

  bool wants_predictions = false;
  // Every WaitOpened: (handle, deadline).
  mutable std::vector<std::pair<int64_t, absl::Time>> waited;
  std::map<int64_t, absl::Status> failures;
  // Every ObserveVerified: (handle, top tokens).
  std::vector<std::pair<int64_t, std::vector<int32_t>>> verified;
  // Every ObserveNgrams: (handle, n-grams).
  std::vector<std::pair<int64_t, std::vector<std::vector<int32_t>>>> harvested;

  // What the fanout called, in order.
  std::vector<std::vector<int32_t>> opened_prompts;
  std::vector<DraftPolicy> opened_policies;
  std::vector<std::pair<int64_t, std::vector<int32_t>>> observed;
  std::vector<ProposeCall> proposed;
  std::vector<int64_t> closed;

 private:
  const std::string name_;
  int64_t next_handle_ = 1;
  std::map<int64_t, DraftTree> trees_;
  bool called_ = true;
  DraftCost cost_;
  DraftSourceStats stats_;
};

DraftPolicy Hierarchical(int decoding_length) {
  DraftPolicy policy;
  policy.mode = DraftMode::kTrieHierarchical;
  policy.decoding_length = decoding_length;
  policy.branch_length = 4;
  policy.name_space = "default";
  return policy;
}

DraftAsk Ask(int64_t handle, int budget) {
  DraftAsk ask;
  ask.handle = handle;
  ask.budget = budget;
  return ask;
}

// ---------------------------------------------------------------------------
// MergeDraftTrees.

TEST(MergeDraftTreesTest, OneTreeWithinBudgetIsReturnedAsIs) {
  const DraftTree tree =
      Tree({{5, -1}, {6, 0}, {7, 0}, {8, -1}}, DraftSourceTag::kTrie);
  for (int budget : {4, 5, 100}) {
    const DraftTree merged = MergeDraftTrees({tree}, budget);
    EXPECT_EQ(merged.tokens, tree.tokens);
    EXPECT_EQ(merged.parents, tree.parents);
    EXPECT_EQ(merged.sources, tree.sources);
  }
}

TEST(MergeDraftTreesTest, OneTreeOverBudgetKeepsItsFirstNodes) {
  const DraftTree tree =
      Tree({{5, -1}, {6, 0}, {7, 0}, {8, -1}, {9, 3}}, DraftSourceTag::kNgram);
  for (int budget = 0; budget < tree.size(); ++budget) {
    SCOPED_TRACE(budget);
    DraftTree trimmed = tree;
    engine::TrimDraft(&trimmed, budget);
    const DraftTree merged = MergeDraftTrees({tree}, budget);
    EXPECT_EQ(merged.tokens, trimmed.tokens);
    EXPECT_EQ(merged.parents, trimmed.parents);
    EXPECT_EQ(merged.sources, trimmed.sources);
  }
}

TEST(MergeDraftTreesTest, NoTreesOrEmptyTreesMergeToEmpty) {
  EXPECT_TRUE(MergeDraftTrees({}, 8).empty());
  EXPECT_TRUE(MergeDraftTrees({DraftTree{}, DraftTree{}}, 8).empty());
}

TEST(MergeDraftTreesTest, SharedPrefixesAreMergedAndKeepTheFirstSource) {
  // trie: 1 -> 2 -> 3.  ngram: 1 -> 2 -> 4, and 5.
  const DraftTree trie = Chain({1, 2, 3}, DraftSourceTag::kTrie);
  const DraftTree ngram =
      Tree({{1, -1}, {2, 0}, {4, 1}, {5, -1}}, DraftSourceTag::kNgram);
  const DraftTree merged = MergeDraftTrees({trie, ngram}, 16);
  EXPECT_EQ(TreeError(merged), "");
  EXPECT_THAT(merged.tokens, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(merged.parents, ElementsAre(-1, 0, 1, 1, -1));
  EXPECT_THAT(merged.sources,
              ElementsAre(DraftSourceTag::kTrie, DraftSourceTag::kTrie,
                          DraftSourceTag::kTrie, DraftSourceTag::kNgram,
                          DraftSourceTag::kNgram));
}

TEST(MergeDraftTreesTest, SharedNodesCarryEverySourceThatProposedThem) {
  // trie: 1 -> 2 -> 3.  ngram: 1 -> 2 -> 4.  assistant: 1 (already tagged
  // trie and assistant by its own source).
  const DraftTree trie = Chain({1, 2, 3}, DraftSourceTag::kTrie);
  const DraftTree ngram = Chain({1, 2, 4}, DraftSourceTag::kNgram);
  DraftTree assistant = Chain({1}, DraftSourceTag::kAssistant);
  assistant.source_sets = {engine::SourceBit(DraftSourceTag::kAssistant) |
                           engine::SourceBit(DraftSourceTag::kTrie)};
  const DraftTree merged = MergeDraftTrees({trie, ngram, assistant}, 16);
  EXPECT_THAT(merged.tokens, ElementsAre(1, 2, 3, 4));
  const engine::DraftSourceSet t = engine::SourceBit(DraftSourceTag::kTrie);
  const engine::DraftSourceSet n = engine::SourceBit(DraftSourceTag::kNgram);
  const engine::DraftSourceSet a =
      engine::SourceBit(DraftSourceTag::kAssistant);
  EXPECT_THAT(merged.source_sets, ElementsAre(t | n | a, t | n, t, n));
  // The primary source stays the first tree's.
  EXPECT_THAT(merged.sources,
              ElementsAre(DraftSourceTag::kTrie, DraftSourceTag::kTrie,
                          DraftSourceTag::kTrie, DraftSourceTag::kNgram));
}

TEST(DraftFanoutTest, PredictionsAndFailuresPassThroughPerSource) {
  FakeSource trie("trie"), ngram("ngram");
  ngram.wants_predictions = true;
  DraftFanout fanout({&trie, &ngram}, kFanoutVocab);
  const int64_t h = fanout.Open(DraftPolicy{DraftMode::kTrieHierarchical, 8},
                                std::vector<int32_t>{1, 2});
  ASSERT_NE(h, 0);
  EXPECT_TRUE(fanout.WantsPredictions(h));
  EXPECT_FALSE(fanout.WantsPredictions(h + 100));
  VerifiedPredictions p;
  p.k = 1;
  p.top_tokens = {7};
  fanout.ObserveVerified(h, p);
  EXPECT_THAT(trie.verified, IsEmpty());  // it does not want them
  ASSERT_EQ(ngram.verified.size(), 1u);
  EXPECT_EQ(ngram.verified[0].first, 1);  // the source's own handle
  EXPECT_THAT(ngram.verified[0].second, ElementsAre(7));

  fanout.ObserveNgrams(h, {{3, 4}});
  ASSERT_EQ(ngram.harvested.size(), 1u);
  EXPECT_EQ(ngram.harvested[0].second,
            (std::vector<std::vector<int32_t>>{{3, 4}}));
  EXPECT_EQ(trie.harvested.size(), 1u);  // each source decides

  EXPECT_TRUE(fanout.Failure(h).ok());
  ngram.failures[1] = absl::FailedPreconditionError("not served");
  EXPECT_EQ(fanout.Failure(h), absl::FailedPreconditionError("not served"));
  EXPECT_TRUE(fanout.Failure(h + 100).ok());

  // Every source of the sequence waits for its open, to one deadline.
  const absl::Time deadline = absl::UnixEpoch() + absl::Seconds(7);
  fanout.WaitOpened(h, deadline);
  fanout.WaitOpened(h + 100, deadline);  // unknown: nothing waits
  EXPECT_THAT(trie.waited, ElementsAre(std::make_pair(int64_t{1}, deadline)));
  EXPECT_THAT(ngram.waited, ElementsAre(std::make_pair(int64_t{1}, deadline)));
}

TEST(MergeDraftTreesTest, PriorityDecidesWhoseNodesFitAndWhoseTagSticks) {
  const DraftTree trie = Chain({1, 2, 3}, DraftSourceTag::kTrie);
  const DraftTree ngram = Chain({1, 9}, DraftSourceTag::kNgram);
  const DraftTree ngram_first = MergeDraftTrees({ngram, trie}, 3);
  EXPECT_THAT(ngram_first.tokens, ElementsAre(1, 9, 2));
  EXPECT_THAT(ngram_first.parents, ElementsAre(-1, 0, 0));
  EXPECT_THAT(ngram_first.sources,
              ElementsAre(DraftSourceTag::kNgram, DraftSourceTag::kNgram,
                          DraftSourceTag::kTrie));
  const DraftTree trie_first = MergeDraftTrees({trie, ngram}, 3);
  EXPECT_THAT(trie_first.tokens, ElementsAre(1, 2, 3));
  EXPECT_THAT(trie_first.sources,
              ElementsAre(DraftSourceTag::kTrie, DraftSourceTag::kTrie,
                          DraftSourceTag::kTrie));
}

TEST(MergeDraftTreesTest, BudgetBoundsTheMergeAndDropsCutSubtrees) {
  // a: 1.  b: 5, then 1 (shared with a), then 1 -> 2 (new, under shared 1).
  const DraftTree a = Chain({1}, DraftSourceTag::kTrie);
  const DraftTree b = Tree({{5, -1}, {1, -1}, {2, 1}}, DraftSourceTag::kNgram);
  EXPECT_THAT(MergeDraftTrees({a, b}, 0).tokens, IsEmpty());
  EXPECT_THAT(MergeDraftTrees({a, b}, -1).tokens, IsEmpty());
  EXPECT_THAT(MergeDraftTrees({a, b}, 1).tokens, ElementsAre(1));
  const DraftTree two = MergeDraftTrees({a, b}, 2);
  EXPECT_THAT(two.tokens, ElementsAre(1, 5));
  EXPECT_THAT(two.parents, ElementsAre(-1, -1));
  const DraftTree three = MergeDraftTrees({a, b}, 3);
  EXPECT_THAT(three.tokens, ElementsAre(1, 5, 2));
  EXPECT_THAT(three.parents, ElementsAre(-1, -1, 0));
  // A node that did not fit takes its subtree with it: b2's 7 is cut, so
  // its child 8 is not placed (under the root or any other node), while
  // b2's 1 is still shared with a's.
  const DraftTree b2 = Tree({{7, -1}, {8, 0}, {1, -1}}, DraftSourceTag::kNgram);
  const DraftTree cut = MergeDraftTrees({a, b2}, 1);
  EXPECT_THAT(cut.tokens, ElementsAre(1));
  EXPECT_EQ(TreeError(cut), "");
}

TEST(MergeDraftTreesTest, DuplicateSiblingsAcrossAndWithinTreesAreMerged) {
  // Two parallel chains under the root starting with one token (as
  // kTrieParallel drafts look), plus a second tree repeating one of them.
  const DraftTree parallel =
      Tree({{1, -1}, {2, 0}, {1, -1}, {3, 2}}, DraftSourceTag::kTrie);
  const DraftTree again = Chain({1, 3}, DraftSourceTag::kNgram);
  const DraftTree merged = MergeDraftTrees({parallel, again}, 16);
  EXPECT_EQ(TreeError(merged), "");
  EXPECT_THAT(merged.tokens, ElementsAre(1, 2, 3));
  EXPECT_THAT(merged.parents, ElementsAre(-1, 0, 0));
}

TEST(MergeDraftTreesTest, MissingSourceTagsBecomeUnknown) {
  DraftTree untagged = Chain({4, 5}, DraftSourceTag::kTrie);
  untagged.sources.clear();
  const DraftTree tagged = Chain({6}, DraftSourceTag::kAssistant);
  const DraftTree merged = MergeDraftTrees({untagged, tagged}, 8);
  EXPECT_THAT(merged.tokens, ElementsAre(4, 5, 6));
  EXPECT_THAT(merged.sources,
              ElementsAre(DraftSourceTag::kUnknown, DraftSourceTag::kUnknown,
                          DraftSourceTag::kAssistant));
}

// A random topologically ordered tree of up to `max_nodes` nodes over a
// small vocabulary (so trees share prefixes and repeat siblings).
DraftTree RandomTree(std::mt19937* rng, int max_nodes, DraftSourceTag tag) {
  const int n = std::uniform_int_distribution<int>(0, max_nodes)(*rng);
  std::vector<std::pair<int32_t, int32_t>> nodes;
  for (int i = 0; i < n; ++i) {
    const int32_t parent =
        std::uniform_int_distribution<int32_t>(-1, i - 1)(*rng);
    const int32_t token = std::uniform_int_distribution<int32_t>(0, 3)(*rng);
    nodes.push_back({token, parent});
  }
  return Tree(std::move(nodes), tag);
}

// Against an oracle of root paths: the merge holds min(budget, |union|)
// distinct paths, all from the inputs, each tagged by the first tree that
// has it, and the highest-priority tree's paths first.
TEST(MergeDraftTreesTest, RandomizedAgainstPathSets) {
  std::mt19937 rng(20240611);
  const DraftSourceTag tags[] = {DraftSourceTag::kTrie, DraftSourceTag::kNgram,
                                 DraftSourceTag::kAssistant};
  for (int iter = 0; iter < 2000; ++iter) {
    SCOPED_TRACE(iter);
    const int count = std::uniform_int_distribution<int>(2, 3)(rng);
    std::vector<DraftTree> trees;
    for (int t = 0; t < count; ++t)
      trees.push_back(RandomTree(&rng, 12, tags[t]));
    const int budget = std::uniform_int_distribution<int>(0, 30)(rng);

    // The oracle: union of paths in priority order, first tag wins.
    std::map<std::vector<int32_t>, DraftSourceTag> all;
    for (const DraftTree& tree : trees) {
      for (const auto& [path, tag] : Paths(tree)) all.try_emplace(path, tag);
    }
    const std::map<std::vector<int32_t>, DraftSourceTag> first =
        Paths(trees[0]);

    const DraftTree merged = MergeDraftTrees(trees, budget);
    ASSERT_EQ(TreeError(merged), "");
    ASSERT_EQ(merged.size(), std::min<int>(budget, all.size()));
    const std::map<std::vector<int32_t>, DraftSourceTag> got = Paths(merged);
    ASSERT_EQ(got.size(), static_cast<size_t>(merged.size()));  // distinct
    int from_first = 0;
    for (const auto& [path, tag] : got) {
      auto it = all.find(path);
      ASSERT_NE(it, all.end()) << "a path no input has";
      EXPECT_EQ(tag, it->second);
      from_first += first.count(path);
    }
    // The first tree keeps all its paths that fit.
    EXPECT_EQ(from_first, std::min<int>(budget, first.size()));
  }
}

// ---------------------------------------------------------------------------
// DraftFanout.

TEST(DraftFanoutTest, NoSourcesNeverDrafts) {
  DraftFanout fanout({}, kFanoutVocab);
  EXPECT_TRUE(fanout.empty());
  const std::vector<int32_t> prompt = {1, 2};
  EXPECT_EQ(fanout.Open(Hierarchical(8), prompt), 0);
  bool called = true;
  const std::vector<DraftTree> trees = fanout.Propose({Ask(0, 8)}, &called);
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_TRUE(trees[0].empty());
  EXPECT_FALSE(called);
  EXPECT_TRUE(fanout.Stats().available);
  EXPECT_EQ(fanout.cost().seconds_per_call, 0);
}

TEST(DraftFanoutTest, OneSourceIsAPassThroughTrimmedToTheBudget) {
  FakeSource trie("trie");
  trie.set_next_handle(40);
  DraftFanout fanout({&trie}, kFanoutVocab);
  EXPECT_FALSE(fanout.empty());
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  const DraftPolicy policy = Hierarchical(6);
  const int64_t handle = fanout.Open(policy, prompt);
  ASSERT_NE(handle, 0);
  ASSERT_EQ(trie.opened_prompts.size(), 1u);
  EXPECT_EQ(trie.opened_prompts[0], prompt);
  EXPECT_EQ(trie.opened_policies[0].decoding_length, 6);
  EXPECT_EQ(trie.opened_policies[0].name_space, "default");

  // Parallel chains repeat a sibling's token on purpose (kTrieParallel): a
  // single source's tree is passed on as it is, not merged.
  const DraftTree parallel =
      Tree({{1, -1}, {2, 0}, {1, -1}, {3, 2}, {1, -1}}, DraftSourceTag::kTrie);
  trie.set_tree(40, parallel);
  for (int budget : {0, 2, 4, 5, 9}) {
    SCOPED_TRACE(budget);
    bool called = false;
    const std::vector<DraftTree> trees =
        fanout.Propose({Ask(handle, budget)}, &called);
    EXPECT_TRUE(called);
    ASSERT_EQ(trees.size(), 1u);
    DraftTree expected = parallel;
    engine::TrimDraft(&expected, budget);
    EXPECT_EQ(trees[0].tokens, expected.tokens);
    EXPECT_EQ(trees[0].parents, expected.parents);
    EXPECT_EQ(trees[0].sources, expected.sources);
    // The source saw its own handle and the ask's budget and mode.
    ASSERT_EQ(trie.proposed.back().asks.size(), 1u);
    EXPECT_EQ(trie.proposed.back().asks[0].handle, 40);
    EXPECT_EQ(trie.proposed.back().asks[0].budget, budget);
  }
}

TEST(DraftFanoutTest, TwoSourcesMergeWithinEachBudget) {
  FakeSource trie("trie");
  FakeSource ngram("ngram");
  trie.set_next_handle(10);
  ngram.set_next_handle(20);
  DraftFanout fanout({&trie, &ngram}, kFanoutVocab);
  const std::vector<int32_t> prompt = {7};
  const int64_t first = fanout.Open(Hierarchical(8), prompt);
  const int64_t second = fanout.Open(Hierarchical(8), prompt);
  ASSERT_NE(first, 0);
  ASSERT_NE(second, 0);
  ASSERT_NE(first, second);

  trie.set_tree(10, Chain({1, 2, 3}, DraftSourceTag::kTrie));
  ngram.set_tree(
      20, Tree({{1, -1}, {2, 0}, {4, 1}, {5, -1}}, DraftSourceTag::kNgram));
  trie.set_tree(11, Chain({8}, DraftSourceTag::kTrie));
  ngram.set_tree(21, Chain({9, 9}, DraftSourceTag::kNgram));

  bool called = false;
  const std::vector<DraftTree> trees =
      fanout.Propose({Ask(first, 4), Ask(second, 16)}, &called);
  EXPECT_TRUE(called);
  ASSERT_EQ(trees.size(), 2u);
  EXPECT_EQ(TreeError(trees[0]), "");
  EXPECT_THAT(trees[0].tokens, ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(trees[0].parents, ElementsAre(-1, 0, 1, 1));
  EXPECT_THAT(trees[0].sources,
              ElementsAre(DraftSourceTag::kTrie, DraftSourceTag::kTrie,
                          DraftSourceTag::kTrie, DraftSourceTag::kNgram));
  EXPECT_EQ(TreeError(trees[1]), "");
  EXPECT_THAT(trees[1].tokens, ElementsAre(8, 9, 9));
  EXPECT_THAT(trees[1].parents, ElementsAre(-1, -1, 1));
  EXPECT_THAT(trees[1].sources,
              ElementsAre(DraftSourceTag::kTrie, DraftSourceTag::kNgram,
                          DraftSourceTag::kNgram));

  // One Propose per source per step, each with its own handles in order.
  ASSERT_EQ(trie.proposed.size(), 1u);
  ASSERT_EQ(ngram.proposed.size(), 1u);
  ASSERT_EQ(trie.proposed[0].asks.size(), 2u);
  EXPECT_EQ(trie.proposed[0].asks[0].handle, 10);
  EXPECT_EQ(trie.proposed[0].asks[0].budget, 4);
  EXPECT_EQ(trie.proposed[0].asks[1].handle, 11);
  EXPECT_EQ(trie.proposed[0].asks[1].budget, 16);
  ASSERT_EQ(ngram.proposed[0].asks.size(), 2u);
  EXPECT_EQ(ngram.proposed[0].asks[0].handle, 20);
  EXPECT_EQ(ngram.proposed[0].asks[1].handle, 21);
}

TEST(DraftFanoutTest, ASourceThatDeclinesASequenceIsNeverAskedForIt) {
  FakeSource trie("trie");
  FakeSource ngram("ngram");
  trie.set_next_handle(0);  // Declines every sequence.
  ngram.set_next_handle(30);
  DraftFanout fanout({&trie, &ngram}, kFanoutVocab);
  const std::vector<int32_t> prompt = {1, 2, 3};
  const int64_t handle = fanout.Open(Hierarchical(8), prompt);
  ASSERT_NE(handle, 0);
  EXPECT_EQ(trie.opened_prompts.size(), 1u);  // Asked to open, declined.
  ngram.set_tree(30, Chain({6, 7}, DraftSourceTag::kNgram));

  const std::vector<int32_t> emitted = {4, 5};
  fanout.Observe(handle, emitted);
  bool called = false;
  const std::vector<DraftTree> trees =
      fanout.Propose({Ask(handle, 8)}, &called);
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_THAT(trees[0].tokens, ElementsAre(6, 7));
  fanout.Close(handle);

  EXPECT_THAT(trie.observed, IsEmpty());
  EXPECT_THAT(trie.proposed, IsEmpty());
  EXPECT_THAT(trie.closed, IsEmpty());
  ASSERT_EQ(ngram.observed.size(), 1u);
  EXPECT_EQ(ngram.observed[0].first, 30);
  EXPECT_EQ(ngram.observed[0].second, emitted);
  EXPECT_THAT(ngram.closed, ElementsAre(30));
}

TEST(DraftFanoutTest, NoSourceDraftingMeansNoHandle) {
  FakeSource trie("trie");
  FakeSource ngram("ngram");
  trie.set_next_handle(0);
  ngram.set_next_handle(0);
  DraftFanout fanout({&trie, &ngram}, kFanoutVocab);
  const std::vector<int32_t> prompt = {1};
  EXPECT_EQ(fanout.Open(Hierarchical(8), prompt), 0);
  EXPECT_EQ(trie.opened_prompts.size(), 1u);
  EXPECT_EQ(ngram.opened_prompts.size(), 1u);
  // Asking with handle 0 (or any unknown handle) reaches no source.
  bool called = true;
  const std::vector<DraftTree> trees =
      fanout.Propose({Ask(0, 8), Ask(12345, 8)}, &called);
  ASSERT_EQ(trees.size(), 2u);
  EXPECT_TRUE(trees[0].empty());
  EXPECT_TRUE(trees[1].empty());
  EXPECT_FALSE(called);
  fanout.Observe(12345, prompt);
  fanout.Close(12345);
  EXPECT_THAT(trie.proposed, IsEmpty());
  EXPECT_THAT(ngram.proposed, IsEmpty());
  EXPECT_THAT(ngram.observed, IsEmpty());
  EXPECT_THAT(ngram.closed, IsEmpty());
}

TEST(DraftFanoutTest, ObserveAndCloseReachEachSourcesOwnHandle) {
  FakeSource trie("trie");
  FakeSource ngram("ngram");
  trie.set_next_handle(100);
  ngram.set_next_handle(200);
  DraftFanout fanout({&trie, &ngram}, kFanoutVocab);
  const std::vector<int32_t> prompt = {1};
  const int64_t a = fanout.Open(Hierarchical(8), prompt);  // 100, 200
  const int64_t b = fanout.Open(Hierarchical(8), prompt);  // 101, 201
  ASSERT_NE(a, b);

  const std::vector<int32_t> to_b = {9, 8};
  const std::vector<int32_t> to_a = {7};
  fanout.Observe(b, to_b);
  fanout.Observe(a, to_a);
  ASSERT_EQ(trie.observed.size(), 2u);
  EXPECT_EQ(trie.observed[0], std::make_pair(int64_t{101}, to_b));
  EXPECT_EQ(trie.observed[1], std::make_pair(int64_t{100}, to_a));
  ASSERT_EQ(ngram.observed.size(), 2u);
  EXPECT_EQ(ngram.observed[0], std::make_pair(int64_t{201}, to_b));
  EXPECT_EQ(ngram.observed[1], std::make_pair(int64_t{200}, to_a));

  fanout.Close(a);
  EXPECT_THAT(trie.closed, ElementsAre(100));
  EXPECT_THAT(ngram.closed, ElementsAre(200));
  // A closed handle is forgotten: no second Close, no Observe, no Propose.
  fanout.Close(a);
  fanout.Observe(a, to_a);
  bool called = false;
  const std::vector<DraftTree> trees = fanout.Propose({Ask(a, 8)}, &called);
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_TRUE(trees[0].empty());
  EXPECT_THAT(trie.closed, ElementsAre(100));
  EXPECT_EQ(trie.observed.size(), 2u);
  EXPECT_THAT(trie.proposed, IsEmpty());
  fanout.Close(b);
  EXPECT_THAT(trie.closed, ElementsAre(100, 101));
  EXPECT_THAT(ngram.closed, ElementsAre(200, 201));
}

TEST(DraftFanoutTest, CalledIsSetIffSomeSourceDidWork) {
  FakeSource trie("trie");
  FakeSource ngram("ngram");
  trie.set_next_handle(1);
  ngram.set_next_handle(1);
  DraftFanout fanout({&trie, &ngram}, kFanoutVocab);
  const std::vector<int32_t> prompt = {1};
  const int64_t handle = fanout.Open(Hierarchical(8), prompt);
  for (bool trie_called : {false, true}) {
    for (bool ngram_called : {false, true}) {
      trie.set_called(trie_called);
      ngram.set_called(ngram_called);
      bool called = !(trie_called || ngram_called);  // The wrong answer.
      fanout.Propose({Ask(handle, 4)}, &called);
      EXPECT_EQ(called, trie_called || ngram_called)
          << "trie " << trie_called << ", ngram " << ngram_called;
    }
  }
}

TEST(DraftFanoutTest, CostIsTheSumOfTheSources) {
  FakeSource trie("trie");
  FakeSource assistant("assistant");
  trie.set_cost({0.001, 0.0});
  assistant.set_cost({0.020, 0.003});
  DraftFanout fanout({&trie, &assistant}, kFanoutVocab);
  const DraftCost cost = fanout.cost();
  EXPECT_DOUBLE_EQ(cost.seconds_per_call, 0.021);
  EXPECT_DOUBLE_EQ(cost.seconds_per_token, 0.003);
}

TEST(DraftFanoutTest, StatsAddUpAndAreAvailableIffEverySourceIs) {
  FakeSource trie("trie");
  FakeSource ngram("ngram");
  DraftSourceStats a;
  a.available = true;
  a.failures = 3;
  a.reopened = 1;
  a.open_sessions = 4;
  DraftSourceStats b;
  b.available = true;
  b.failures = 5;
  b.reopened = 2;
  b.open_sessions = 6;
  trie.set_stats(a);
  ngram.set_stats(b);
  DraftFanout fanout({&trie, &ngram}, kFanoutVocab);
  DraftSourceStats total = fanout.Stats();
  EXPECT_TRUE(total.available);
  EXPECT_EQ(total.failures, 8);
  EXPECT_EQ(total.reopened, 3);
  EXPECT_EQ(total.open_sessions, 10);

  for (int down : {0, 1}) {
    DraftSourceStats unavailable = down == 0 ? a : b;
    unavailable.available = false;
    trie.set_stats(down == 0 ? unavailable : a);
    ngram.set_stats(down == 1 ? unavailable : b);
    EXPECT_FALSE(fanout.Stats().available) << "source " << down << " down";
  }
}

// A faulty source's tree is cut before its first bad node (an id outside
// the vocabulary, a parent that is not earlier), alone or merged, so it can
// never make the forward pass reject the whole batch.
TEST(DraftFanoutTest, InvalidNodesAreCutToTheValidPrefix) {
  constexpr int32_t kVocab = 50;
  FakeSource trie("trie");
  trie.set_next_handle(1);
  DraftTree bad_id;
  bad_id.tokens = {7, 8, 50, 9};  // 50 is outside [0, 50)
  bad_id.parents = {-1, 0, 1, 2};
  trie.set_tree(1, bad_id);
  DraftFanout alone({&trie}, kVocab);
  const std::vector<int32_t> prompt = {1};
  const int64_t handle = alone.Open(Hierarchical(8), prompt);
  bool called = false;
  std::vector<DraftTree> trees = alone.Propose({Ask(handle, 8)}, &called);
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_EQ(trees[0].tokens, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(trees[0].parents, (std::vector<int32_t>{-1, 0}));

  FakeSource first("trie"), second("ngram");
  first.set_next_handle(1);
  second.set_next_handle(1);
  DraftTree bad_parent;
  bad_parent.tokens = {3, 4, 5};
  bad_parent.parents = {-1, 2, 0};  // node 1's parent comes after it
  first.set_tree(1, bad_parent);
  DraftTree negative;
  negative.tokens = {6, -1};
  negative.parents = {-1, 0};
  second.set_tree(1, negative);
  DraftFanout merged({&first, &second}, kVocab);
  const int64_t h = merged.Open(Hierarchical(8), prompt);
  trees = merged.Propose({Ask(h, 8)}, &called);
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_EQ(trees[0].tokens, (std::vector<int32_t>{3, 6}));
  EXPECT_EQ(trees[0].parents, (std::vector<int32_t>{-1, -1}));
}

}  // namespace
}  // namespace lookahead::verifysvc

namespace lookahead::verifysvc {
namespace {

// Cascade: the second source gets a fresh request only where the first had
// nothing, or every kCascadeRefresh-th step; its budget stands either way
// (what it already has is used), and it learns how well the first covered
// the step (DraftAsk::covered_score).
TEST(DraftFanoutCascadeTest, LaterSourcesRefreshOnlyWhereEarlierOnesHadNothing) {
  FakeSource local("local");
  FakeSource remote("remote");
  DraftFanout fanout({&local, &remote}, /*vocab_size=*/50, /*cascade=*/true);
  const int64_t covered = fanout.Open(Hierarchical(8), {1, 2, 3});
  const int64_t bare = fanout.Open(Hierarchical(8), {4, 5, 6});
  local.set_tree(1, Chain({7, 8}, DraftSourceTag::kTrie));  // covered's
  for (int step = 0; step < 8; ++step) {
    bool called = false;
    fanout.Propose({Ask(covered, 4), Ask(bare, 4)}, &called);
    const std::vector<DraftAsk>& asks = remote.proposed.back().asks;
    ASSERT_EQ(asks.size(), 2u);
    EXPECT_EQ(asks[0].budget, 4);
    EXPECT_EQ(asks[0].refresh, step % 4 == 0) << "step " << step;
    EXPECT_TRUE(asks[1].refresh) << "step " << step;
    // An unscored tree covers its sequence fully; none, not at all.
    EXPECT_EQ(asks[0].covered_score, 1.0f);
    EXPECT_EQ(asks[1].covered_score, 0.0f);
  }
  // A scored tree: its best first node's score.
  DraftTree scored = Tree({{7, -1}, {9, -1}, {8, 0}}, DraftSourceTag::kTrie);
  scored.scores = {0.3f, 0.6f, 0.9f};  // a child's score is not the cover
  local.set_tree(1, scored);
  {
    bool called = false;
    fanout.Propose({Ask(covered, 4)}, &called);
    EXPECT_FLOAT_EQ(remote.proposed.back().asks.at(0).covered_score, 0.6f);
  }
  // Without the cascade every ask refreshes.
  DraftFanout both({&local, &remote}, /*vocab_size=*/50);
  local.set_next_handle(10);
  local.set_tree(10, scored);
  const int64_t handle = both.Open(Hierarchical(8), {1, 2, 3});
  bool called = false;
  both.Propose({Ask(handle, 4)}, &called);
  both.Propose({Ask(handle, 4)}, &called);
  EXPECT_TRUE(remote.proposed.back().asks.at(0).refresh);
  // ... and still learns how well the sources before it covered the step
  // (the assistant drafts only where they are weak).
  EXPECT_FLOAT_EQ(remote.proposed.back().asks.at(0).covered_score, 0.6f);
}

}  // namespace
}  // namespace lookahead::verifysvc
