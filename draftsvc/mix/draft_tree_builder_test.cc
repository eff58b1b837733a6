#include "draftsvc/mix/draft_tree_builder.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

using Path = std::vector<int32_t>;

// Every window (shorter ones at the end included) of `tokens` into `trie`.
void InsertWindows(const Path& tokens, int window, TokenTrie* trie) {
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    trie->Insert(absl::MakeConstSpan(tokens).subspan(i, window));
  }
}

// Root-to-node token path of node i.
Path PathOf(const MixedDraft& tree, int i) {
  Path p;
  for (int v = i; v >= 0; v = tree.nodes[v].parent) {
    p.push_back(tree.nodes[v].token);
  }
  std::reverse(p.begin(), p.end());
  return p;
}

// Structural invariants of every draft tree; returns "" if all hold.
std::string CheckTree(const MixedDraft& tree, const DraftRequest& req) {
  if (static_cast<int>(tree.nodes.size()) > req.decoding_length) {
    return "over budget";
  }
  std::set<std::pair<int, int>> siblings;  // (parent, token)
  for (int i = 0; i < static_cast<int>(tree.nodes.size()); ++i) {
    const DraftNode& n = tree.nodes[i];
    if (n.parent >= i || n.parent < -1) return "not topological";
    const int want = n.parent < 0 ? 1 : tree.nodes[n.parent].depth + 1;
    if (n.depth != want) return "bad depth";
    if (n.depth > req.branch_length) return "too deep";
    if (req.mode == DraftMode::kHierarchical &&
        !siblings.insert({n.parent, n.token}).second) {
      return "duplicate sibling at node " + std::to_string(i);
    }
    if (req.mode == DraftMode::kParallel && n.parent >= 0) {
      if (!siblings.insert({n.parent, 0}).second) return "chain branches";
    }
  }
  return "";
}

// All relative paths (depth <= branch_length) below the match of any
// context suffix of length 1..max_match_length, in any source: the full
// candidate set of the multi-stage matching.
std::set<Path> AllCandidates(absl::Span<const TrieSource> sources,
                             const DraftRequest& req) {
  std::set<Path> out;
  const int kmax = std::min<int>(req.context.size(), req.max_match_length);
  for (int k = 1; k <= kmax; ++k) {
    for (const TrieSource& s : sources) {
      const TokenTrie::NodeId m =
          s.trie->Find(req.context.subspan(req.context.size() - k));
      if (m == TokenTrie::kNoNode) continue;
      std::vector<std::pair<TokenTrie::NodeId, Path>> stack = {{m, {}}};
      while (!stack.empty()) {
        auto [v, p] = stack.back();
        stack.pop_back();
        if (!p.empty()) out.insert(p);
        if (static_cast<int>(p.size()) == req.branch_length) continue;
        for (uint32_t j = 0; j < s.trie->NumChildren(v); ++j) {
          const TokenTrie::NodeId c = s.trie->ChildAt(v, j);
          Path q = p;
          q.push_back(s.trie->token(c));
          stack.push_back({c, q});
        }
      }
    }
  }
  return out;
}

TEST(DraftTreeBuilderTest, PromptChainFollowsItsPrefix) {
  TokenTrie prompt;
  const Path tokens = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  InsertWindows(tokens, 9, &prompt);
  const TrieSource sources[] = {{&prompt, CandidateSource::kPrompt, 4.0f}};
  const Path context = {99, 12, 13};  // Ends with "12 13".
  DraftRequest req;
  req.context = context;
  req.max_match_length = 8;
  req.decoding_length = 16;
  req.branch_length = 8;
  const MixedDraft tree = BuildTrieDraft(sources, req);
  ASSERT_EQ(CheckTree(tree, req), "");
  // Match "12 13" (window 11..) leaves 7 more tokens; "13" alone, 8.
  ASSERT_GE(tree.nodes.size(), 7u);
  const Path chain = {14, 15, 16, 17, 18, 19, 20};
  for (size_t i = 0; i < chain.size(); ++i) {
    EXPECT_EQ(tree.nodes[i].token, chain[i]);
    EXPECT_EQ(tree.nodes[i].parent, static_cast<int>(i) - 1);
    EXPECT_EQ(tree.nodes[i].source, CandidateSource::kPrompt);
    EXPECT_FLOAT_EQ(tree.nodes[i].score, 4.0f);
  }
  // The chain is all there is: nothing else continues "13".
  EXPECT_EQ(tree.nodes.size(), chain.size());
}

TEST(DraftTreeBuilderTest, UnknownContextGivesEmptyTree) {
  TokenTrie trie;
  InsertWindows({1, 2, 3}, 3, &trie);
  const TrieSource sources[] = {{&trie, CandidateSource::kOutput, 1.0f}};
  const Path context = {5};
  DraftRequest req;
  req.context = context;
  req.decoding_length = 8;
  EXPECT_TRUE(BuildTrieDraft(sources, req).nodes.empty());
  const Path hit = {1};
  req.context = hit;
  EXPECT_EQ(BuildTrieDraft(sources, req).nodes.size(), 2u);
  req.mode = DraftMode::kOff;
  EXPECT_TRUE(BuildTrieDraft(sources, req).nodes.empty());
  req.mode = DraftMode::kHierarchical;
  req.decoding_length = 0;
  EXPECT_TRUE(BuildTrieDraft(sources, req).nodes.empty());
}

TEST(DraftTreeBuilderTest, BestFirstByScoreWithPromptBoost) {
  TokenTrie output, prompt;
  // After token 1: output says 2 (x3) or 3 (x2); the prompt says 4 once.
  for (int i = 0; i < 3; ++i) output.Insert(Path{1, 2});
  for (int i = 0; i < 2; ++i) output.Insert(Path{1, 3});
  prompt.Insert(Path{1, 4});
  const Path context = {1};
  DraftRequest req;
  req.context = context;
  req.decoding_length = 2;
  {
    const TrieSource sources[] = {{&prompt, CandidateSource::kPrompt, 4.0f},
                                  {&output, CandidateSource::kOutput, 1.0f}};
    const MixedDraft tree = BuildTrieDraft(sources, req);
    ASSERT_EQ(tree.nodes.size(), 2u);
    EXPECT_EQ(tree.nodes[0].token, 4);  // 1 x 4.0 beats 3.
    EXPECT_EQ(tree.nodes[0].source, CandidateSource::kPrompt);
    EXPECT_EQ(tree.nodes[1].token, 2);
    EXPECT_EQ(tree.nodes[1].source, CandidateSource::kOutput);
  }
  {
    const TrieSource sources[] = {{&prompt, CandidateSource::kPrompt, 1.5f},
                                  {&output, CandidateSource::kOutput, 1.0f}};
    const MixedDraft tree = BuildTrieDraft(sources, req);
    ASSERT_EQ(tree.nodes.size(), 2u);
    EXPECT_EQ(tree.nodes[0].token, 2);
    EXPECT_EQ(tree.nodes[1].token, 3);
  }
}

TEST(DraftTreeBuilderTest, SharedPrefixesAreMergedAcrossSources) {
  TokenTrie a, b;
  a.Insert(Path{1, 2, 3});
  b.Insert(Path{1, 2, 4});
  const TrieSource sources[] = {{&a, CandidateSource::kPrompt, 1.0f},
                                {&b, CandidateSource::kOutput, 1.0f}};
  const Path context = {1};
  DraftRequest req;
  req.context = context;
  req.decoding_length = 10;
  const MixedDraft tree = BuildTrieDraft(sources, req);
  ASSERT_EQ(CheckTree(tree, req), "");
  ASSERT_EQ(tree.nodes.size(), 3u);  // 2, then 3 and 4 under it.
  EXPECT_EQ(tree.nodes[0].token, 2);
  EXPECT_EQ(tree.nodes[1].parent, 0);
  EXPECT_EQ(tree.nodes[2].parent, 0);
  req.mode = DraftMode::kParallel;
  const MixedDraft par = BuildTrieDraft(sources, req);
  ASSERT_EQ(CheckTree(par, req), "");
  ASSERT_EQ(par.nodes.size(), 4u);  // Two chains 2-3 and 2-4.
  EXPECT_EQ(par.nodes[0].token, 2);
  EXPECT_EQ(par.nodes[2].token, 2);
  EXPECT_EQ(par.nodes[2].parent, -1);
}

TEST(DraftTreeBuilderTest, BacksOffToShorterSuffixesAndKeepsLongMatch) {
  TokenTrie trie;
  // Long context "5 6 7" continues with 8 once; "7" alone continues with
  // 9 many times.
  trie.Insert(Path{5, 6, 7, 8});
  for (int i = 0; i < 10; ++i) trie.Insert(Path{7, 9});
  const TrieSource sources[] = {{&trie, CandidateSource::kOutput, 1.0f}};
  const Path context = {5, 6, 7};
  DraftRequest req;
  req.context = context;
  req.decoding_length = 1;
  req.max_match_length = 3;
  MixedDraft tree = BuildTrieDraft(sources, req);
  ASSERT_EQ(tree.nodes.size(), 1u);
  EXPECT_EQ(tree.nodes[0].token, 8);  // Longest match first, despite counts.
  req.decoding_length = 2;
  tree = BuildTrieDraft(sources, req);
  ASSERT_EQ(tree.nodes.size(), 2u);
  EXPECT_EQ(tree.nodes[0].token, 8);
  EXPECT_EQ(tree.nodes[1].token, 9);
  // Nothing else continues any suffix: the tree stays at two nodes.
  req.decoding_length = 10;
  tree = BuildTrieDraft(sources, req);
  EXPECT_EQ(tree.nodes.size(), 2u);
  EXPECT_EQ(CheckTree(tree, req), "");
}

TEST(DraftTreeBuilderTest, NodesCarryTheLengthOfTheirMatch) {
  TokenTrie trie;
  trie.Insert(Path{5, 6, 7, 8, 10});
  trie.Insert(Path{7, 9});
  const TrieSource sources[] = {{&trie, CandidateSource::kPrompt, 1.0f}};
  const Path context = {5, 6, 7};
  DraftRequest req;
  req.context = context;
  req.decoding_length = 8;
  req.max_match_length = 3;
  const MixedDraft tree = BuildTrieDraft(sources, req);
  ASSERT_EQ(tree.nodes.size(), 3u);
  const int prompt = static_cast<int>(CandidateSource::kPrompt);
  // 8 and its child 10 continue "5 6 7"; 9 only "7".
  EXPECT_EQ(PathOf(tree, 1), (Path{8, 10}));
  EXPECT_EQ(tree.nodes[0].matches[prompt], 3);
  EXPECT_EQ(tree.nodes[1].matches[prompt], 3);
  EXPECT_EQ(tree.nodes[2].token, 9);
  EXPECT_EQ(tree.nodes[2].matches[prompt], 1);
  EXPECT_EQ(tree.nodes[2].matches[static_cast<int>(CandidateSource::kOutput)],
            0);
}

// Random tries and contexts: invariants always hold; a tree below budget
// holds every candidate; a budget filled by the first stage is best-first.
TEST(DraftTreeBuilderTest, RandomTreesAgainstCandidateOracle) {
  std::mt19937 rng(42);
  for (int round = 0; round < 300; ++round) {
    const int vocab = 3 + round % 10;
    const int window = 2 + round % 7;
    TokenTrie prompt, output;
    std::uniform_int_distribution<int> tok(0, vocab - 1);
    Path p(20 + rng() % 60), o(20 + rng() % 300);
    for (int& t : p) t = tok(rng);
    for (int& t : o) t = tok(rng);
    InsertWindows(p, window, &prompt);
    InsertWindows(o, window, &output);
    const TrieSource sources[] = {{&prompt, CandidateSource::kPrompt, 3.0f},
                                  {&output, CandidateSource::kOutput, 1.0f}};
    Path context(1 + rng() % 6);
    for (int& t : context) t = tok(rng);
    DraftRequest req;
    req.context = context;
    req.max_match_length = 1 + rng() % 6;
    req.decoding_length = 1 + rng() % 40;
    req.branch_length = 1 + rng() % 8;
    const std::set<Path> candidates = AllCandidates(sources, req);
    for (DraftMode mode : {DraftMode::kHierarchical, DraftMode::kParallel}) {
      req.mode = mode;
      const MixedDraft tree = BuildTrieDraft(sources, req);
      ASSERT_EQ(CheckTree(tree, req), "") << "round " << round;
      std::set<Path> got;
      for (int i = 0; i < static_cast<int>(tree.nodes.size()); ++i) {
        const Path path = PathOf(tree, i);
        ASSERT_TRUE(candidates.count(path)) << "round " << round;
        got.insert(path);
      }
      if (mode == DraftMode::kHierarchical) {
        EXPECT_EQ(got.size(), tree.nodes.size());
        if (static_cast<int>(tree.nodes.size()) < req.decoding_length) {
          EXPECT_EQ(got, candidates) << "round " << round;
        } else {
          EXPECT_EQ(static_cast<int>(tree.nodes.size()), req.decoding_length);
        }
      }
    }
    // Best-first within the first stage: if the longest match alone has at
    // least decoding_length candidates, no unselected candidate whose parent
    // is selected scores above the lowest selected score.
    req.mode = DraftMode::kHierarchical;
    const int k = std::min<int>(context.size(), req.max_match_length);
    DraftRequest first = req;
    first.max_match_length = k;
    first.context = absl::MakeConstSpan(context).subspan(context.size() - k);
    // Candidates of stage k only = candidates with context cut to k tokens
    // and max match k, minus those of shorter suffixes: recompute directly.
    std::map<Path, float> stage_scores;
    for (const TrieSource& s : sources) {
      const TokenTrie::NodeId m = s.trie->Find(first.context);
      if (m == TokenTrie::kNoNode) continue;
      std::vector<std::pair<TokenTrie::NodeId, Path>> stack = {{m, {}}};
      while (!stack.empty()) {
        auto [v, path] = stack.back();
        stack.pop_back();
        if (!path.empty()) {
          float& best = stage_scores[path];
          best = std::max(best, s.trie->count(v) * s.boost);
        }
        if (static_cast<int>(path.size()) == req.branch_length) continue;
        for (uint32_t j = 0; j < s.trie->NumChildren(v); ++j) {
          Path q = path;
          q.push_back(s.trie->token(s.trie->ChildAt(v, j)));
          stack.push_back({s.trie->ChildAt(v, j), q});
        }
      }
    }
    if (static_cast<int>(stage_scores.size()) < req.decoding_length) continue;
    const MixedDraft tree = BuildTrieDraft(sources, req);
    std::set<Path> selected;
    float min_selected = 1e30f;
    for (int i = 0; i < static_cast<int>(tree.nodes.size()); ++i) {
      const Path path = PathOf(tree, i);
      ASSERT_TRUE(stage_scores.count(path)) << "round " << round;
      EXPECT_FLOAT_EQ(tree.nodes[i].score, stage_scores[path]);
      selected.insert(path);
      min_selected = std::min(min_selected, tree.nodes[i].score);
    }
    for (const auto& [path, score] : stage_scores) {
      if (selected.count(path)) continue;
      const Path parent(path.begin(), path.end() - 1);
      if (!parent.empty() && !selected.count(parent)) continue;
      EXPECT_LE(score, min_selected) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace lookahead::draftsvc
