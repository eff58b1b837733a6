// DraftIndex with the n-gram pools and the mixed, calibrated draft tree:
// recycled predictions and Jacobi n-grams become drafts, prompt-derived
// ones stay in their session, bad input stores nothing, identical paths
// from two sources merge, budgets hold, calibration follows acceptance, and
// the pool's mutations reach the sink in order and under on_durable.
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "draftsvc/index/draft_index.h"
#include "draftsvc/index/session_source.h"
#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

using Path = std::vector<int32_t>;
constexpr int32_t kVocab = 1000;
constexpr uint32_t kNgramOnly = CandidateSourceBit(CandidateSource::kNgram);
constexpr uint32_t kTriesOnly = CandidateSourceBit(CandidateSource::kPrompt) |
                                CandidateSourceBit(CandidateSource::kOutput);

// Records every batch; acknowledges at once or holds the callbacks.
class RecordingSink : public MutationSink {
 public:
  void Submit(TrieMutationBatch batch,
              std::function<void(absl::Status)> done) override {
    {
      absl::MutexLock lock(&mu_);
      for (TrieMutation& m : batch.mutations) {
        if (m.table == TrieMutation::Table::kNgramPool) {
          pool_rows_.push_back({batch.name_space, std::move(m.path)});
        } else {
          ++trie_mutations_;
          if (!pool_rows_.empty() && first_trie_after_pool_ < 0) {
            first_trie_after_pool_ = trie_mutations_;
          }
        }
      }
      if (hold_) {
        held_.push_back(std::move(done));
        return;
      }
    }
    done(absl::OkStatus());
  }
  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }
  void Release() {
    std::vector<std::function<void(absl::Status)>> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
      hold_ = false;
    }
    for (auto& done : held) done(absl::OkStatus());
  }
  // (namespace, [key_length, key..., continuation...]) of every pool row.
  std::vector<std::pair<std::string, Path>> pool_rows() {
    absl::MutexLock lock(&mu_);
    return pool_rows_;
  }
  int trie_mutations() {
    absl::MutexLock lock(&mu_);
    return trie_mutations_;
  }

 private:
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::function<void(absl::Status)>> held_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, Path>> pool_rows_ ABSL_GUARDED_BY(mu_);
  int trie_mutations_ ABSL_GUARDED_BY(mu_) = 0;
  int first_trie_after_pool_ ABSL_GUARDED_BY(mu_) = -1;
};

IndexOptions Options() {
  IndexOptions o;
  o.session_lease = absl::InfiniteDuration();
  return o;
}

RetrieveRequest Request(int32_t budget, uint32_t sources,
                        int32_t branch_length = 0) {
  RetrieveRequest r;
  r.decoding_length = budget;
  r.branch_length = branch_length;
  r.sources = sources;
  return r;
}

// The tree's token paths (root child first), e.g. {{20}, {20, 21}}.
std::set<Path> Paths(const MixedDraft& tree) {
  std::set<Path> out;
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    Path p;
    for (int32_t v = static_cast<int32_t>(i); v >= 0;
         v = tree.nodes[v].parent) {
      p.insert(p.begin(), tree.nodes[v].token);
    }
    out.insert(p);
  }
  return out;
}

void ExpectValid(const MixedDraft& tree, int32_t budget, int32_t depth) {
  EXPECT_LE(tree.nodes.size(), static_cast<size_t>(budget));
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    const DraftNode& n = tree.nodes[i];
    ASSERT_LT(n.parent, static_cast<int32_t>(i));
    ASSERT_EQ(n.depth, n.parent < 0 ? 1 : tree.nodes[n.parent].depth + 1);
    EXPECT_LE(n.depth, depth);
    EXPECT_GT(n.score, 0.0f);
    EXPECT_LE(n.score, 1.0f);
    EXPECT_NE(n.source_set & CandidateSourceBit(n.source), 0u);
  }
}

PredictionInput Prediction(int32_t root_after, const Path& tokens,
                           const Path& parents, int32_t k, const Path& top) {
  // Spans into static storage owned by the test's vectors: callers keep
  // them alive.
  PredictionInput p;
  p.root_after = root_after;
  p.tokens = tokens;
  p.parents = parents;
  p.k = k;
  p.top_tokens = top;
  return p;
}

TEST(DraftIndexNgramTest, RecycledPredictionsBecomeDraftsInTheNamespace) {
  DraftIndex index(Options(), nullptr);
  ASSERT_TRUE(index.OpenSession("a", "ns", kVocab, {1, 2, 3}, 0).ok());
  ASSERT_TRUE(index.Append("a", Path{10, 11, 12, 13, 14}, nullptr).ok());
  // The verifier's tree below 14: node 20 (then accepted), with top-2
  // predictions at the root (20, 30) and at node 20 (21, 31).
  const Path tokens = {20}, parents = {-1}, top = {20, 30, 21, 31};
  StepInput input;
  const Path accepted = {20, 21};
  input.accepted = accepted;
  input.predictions.push_back(Prediction(0, tokens, parents, 2, top));
  ASSERT_TRUE(index.Append("a", input, nullptr).ok());
  EXPECT_GT(index.Stats("ns")[0].ngram_entries, 0);

  // Another session of the namespace reaching "13 14" gets 20, then 21 by
  // chaining the 1-token continuations, and 30 as the runner-up.
  ASSERT_TRUE(index.OpenSession("b", "ns", kVocab, {5, 6}, 0).ok());
  ASSERT_TRUE(index.Append("b", Path{13, 14}, nullptr).ok());
  absl::StatusOr<MixedDraft> tree = index.Retrieve("b", Request(8, kNgramOnly));
  ASSERT_TRUE(tree.ok()) << tree.status();
  ExpectValid(*tree, 8, 8);
  const std::set<Path> paths = Paths(*tree);
  EXPECT_TRUE(paths.count({20})) << tree->nodes.size();
  EXPECT_TRUE(paths.count({20, 21}));
  EXPECT_TRUE(paths.count({30}));
  ASSERT_FALSE(tree->nodes.empty());
  EXPECT_EQ(tree->nodes[0].token, 20);  // Best-ranked prediction first.
  EXPECT_EQ(tree->nodes[0].source, CandidateSource::kNgram);
  EXPECT_EQ(tree->nodes[0].source_set,
            CandidateSourceBit(CandidateSource::kNgram));

  // Another namespace never sees them.
  ASSERT_TRUE(index.OpenSession("c", "other", kVocab, {13, 14}, 0).ok());
  tree = index.Retrieve("c", Request(8, kNgramOnly));
  ASSERT_TRUE(tree.ok());
  EXPECT_TRUE(tree->nodes.empty());
}

TEST(DraftIndexNgramTest, PromptDerivedPredictionsStayInTheirSession) {
  RecordingSink sink;
  DraftIndex index(Options(), &sink);
  ASSERT_TRUE(index.OpenSession("a", "ns", kVocab, {1, 2, 3, 4}, 0).ok());
  // A tree below the last prompt token: every key holds a prompt position
  // or the unconfirmed draft token 7.
  {
    const Path tokens = {7}, parents = {-1}, top = {5, 6};
    StepInput input;
    input.predictions.push_back(Prediction(0, tokens, parents, 1, top));
    ASSERT_TRUE(index.Append("a", input, nullptr).ok());
  }
  EXPECT_EQ(index.Stats("ns")[0].ngram_entries, 0);
  EXPECT_TRUE(sink.pool_rows().empty());
  // The session itself drafts from them.
  absl::StatusOr<MixedDraft> tree = index.Retrieve("a", Request(4, kNgramOnly));
  ASSERT_TRUE(tree.ok());
  EXPECT_TRUE(Paths(*tree).count({5}));
  // Another session with the same context sees nothing.
  ASSERT_TRUE(index.OpenSession("b", "ns", kVocab, {9, 1, 2, 3, 4}, 0).ok());
  tree = index.Retrieve("b", Request(4, kNgramOnly));
  ASSERT_TRUE(tree.ok());
  EXPECT_TRUE(tree->nodes.empty());

  // Output context: the root row's keys that stay within the output are
  // shared, the longer one reaching into the prompt is not, and rows below
  // an unconfirmed draft node (60, rejected: 50 was accepted) are private.
  ASSERT_TRUE(index.Append("a", Path{40, 41, 42}, nullptr).ok());
  {
    const Path tokens = {60, 61}, parents = {-1, 0}, top = {50, 62, 63};
    StepInput input;
    const Path accepted = {50};
    input.accepted = accepted;
    input.predictions.push_back(Prediction(0, tokens, parents, 1, top));
    ASSERT_TRUE(index.Append("a", input, nullptr).ok());
  }
  // Keys [42], [41 42], [40 41 42] -> 50; not [4 40 41 42], nor any key
  // ending in 60 or 61.
  EXPECT_EQ(index.Stats("ns")[0].ngram_entries, 3);
  const std::vector<std::pair<std::string, Path>> rows = sink.pool_rows();
  std::set<Path> keys;
  for (const auto& [ns, row] : rows) {
    EXPECT_EQ(ns, "ns");
    ASSERT_GE(row.size(), 3u);
    keys.insert(Path(row.begin() + 1, row.begin() + 1 + row[0]));
    for (int32_t t : row) {
      EXPECT_NE(t, 60);
      EXPECT_NE(t, 62);
      EXPECT_NE(t, 63);
    }
  }
  EXPECT_EQ(keys, (std::set<Path>{{42}, {41, 42}, {40, 41, 42}}));
  ASSERT_TRUE(index.Append("b", Path{41, 42}, nullptr).ok());
  tree = index.Retrieve("b", Request(4, kNgramOnly));
  ASSERT_TRUE(tree.ok());
  EXPECT_EQ(Paths(*tree), (std::set<Path>{{50}}));
}

TEST(DraftIndexNgramTest, JacobiNgramsAreSharedWithinTheNamespaceOnly) {
  RecordingSink sink;
  DraftIndex index(Options(), &sink);
  ASSERT_TRUE(index.OpenSession("a", "ns", kVocab, {1}, 0).ok());
  const Path ngram = {70, 71, 72, 73};
  StepInput input;
  input.ngrams.push_back(ngram);
  ASSERT_TRUE(index.Append("a", input, nullptr).ok());
  // Keys [70], [70 71], [70 71 72] with the rest as continuation.
  EXPECT_EQ(index.Stats("ns")[0].ngram_entries, 3);
  EXPECT_EQ(sink.pool_rows().size(), 3u);
  ASSERT_TRUE(index.OpenSession("b", "ns", kVocab, {5, 70}, 0).ok());
  absl::StatusOr<MixedDraft> tree = index.Retrieve("b", Request(8, kNgramOnly));
  ASSERT_TRUE(tree.ok());
  EXPECT_TRUE(Paths(*tree).count({71, 72, 73}));
  ASSERT_TRUE(index.OpenSession("c", "other", kVocab, {5, 70}, 0).ok());
  tree = index.Retrieve("c", Request(8, kNgramOnly));
  ASSERT_TRUE(tree.ok());
  EXPECT_TRUE(tree->nodes.empty());
}

TEST(DraftIndexNgramTest, BadPredictionsAndNgramsStoreNothing) {
  IndexOptions options = Options();
  options.max_prediction_trees = 2;
  options.max_prediction_k = 4;
  options.max_step_ngrams = 2;
  options.ngram_max_tokens = 5;
  options.max_decoding_length = 4;
  options.default_branch_length = 2;
  DraftIndex index(options, nullptr);
  ASSERT_TRUE(index.OpenSession("a", "", kVocab, {1, 2}, 0).ok());
  const Path accepted = {3, 4, 5, 6, 7};
  const Path one = {9}, root = {-1}, top1 = {1, 2};
  const Path five = {1, 2, 3, 4, 5}, five_parents = {-1, 0, 1, 2, 3};
  const Path bad_parent = {0}, bad_token = {1000}, top_bad = {1, -1};
  const Path short_ngram = {1}, long_ngram = {1, 2, 3, 4, 5, 6};
  const Path bad_ngram = {1, 2, 1000};
  struct Case {
    std::string name;
    std::function<void(StepInput&)> build;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"too many trees",
       [&](StepInput& in) {
         for (int i = 0; i < 3; ++i) {
           in.predictions.push_back(Prediction(0, one, root, 1, top1));
         }
       },
       "predictions has 3 trees; at most 2"},
      {"tree too large",
       [&](StepInput& in) {
         in.predictions.push_back(
             Prediction(0, five, five_parents, 1, Path(6, 1)));
       },
       "predictions[0].tokens has 5 nodes; at most 4"},
      {"parents size",
       [&](StepInput& in) {
         in.predictions.push_back(Prediction(0, one, Path{}, 1, top1));
       },
       "predictions[0].parents has 0 entries but tokens has 1"},
      {"root_after",
       [&](StepInput& in) {
         in.predictions.push_back(Prediction(0, one, root, 1, top1));
         in.predictions.push_back(Prediction(6, one, root, 1, top1));
       },
       "predictions[1].root_after is 6, outside [0, accepted_tokens size=5]"},
      {"k",
       [&](StepInput& in) {
         in.predictions.push_back(Prediction(0, one, root, 5, Path(10, 1)));
       },
       "predictions[0].k is 5, outside [1, max_prediction_k=4]"},
      {"k zero",
       [&](StepInput& in) {
         in.predictions.push_back(Prediction(0, one, root, 0, Path{}));
       },
       "predictions[0].k is 0"},
      {"top_tokens size",
       [&](StepInput& in) {
         in.predictions.push_back(Prediction(0, one, root, 2, top1));
       },
       "predictions[0].top_tokens has 2 ids; need k x (nodes + 1) = 2 x 2"},
      {"parent range",
       [&](StepInput& in) {
         in.predictions.push_back(Prediction(0, one, bad_parent, 1, top1));
       },
       "predictions[0].parents[0] is 0, outside [-1, 0)"},
      {"token id",
       [&](StepInput& in) {
         in.predictions.push_back(Prediction(0, bad_token, root, 1, top1));
       },
       "predictions[0].tokens[0] is 1000, outside [0, vocab_size=1000)"},
      {"top token id",
       [&](StepInput& in) {
         in.predictions.push_back(Prediction(0, one, root, 1, top_bad));
       },
       "predictions[0].top_tokens[1] is -1"},
      {"too many ngrams",
       [&](StepInput& in) {
         for (int i = 0; i < 3; ++i) in.ngrams.push_back(five);
       },
       "ngrams has 3 n-grams; at most 2"},
      {"short ngram", [&](StepInput& in) { in.ngrams.push_back(short_ngram); },
       "ngrams[0].tokens has 1 ids, outside [2, ngram_max_tokens=5]"},
      {"long ngram",
       [&](StepInput& in) {
         in.ngrams.push_back(five);
         in.ngrams.push_back(long_ngram);
       },
       "ngrams[1].tokens has 6 ids"},
      {"ngram id", [&](StepInput& in) { in.ngrams.push_back(bad_ngram); },
       "ngrams[0].tokens[2] is 1000"},
  };
  for (const Case& c : cases) {
    StepInput input;
    input.accepted = accepted;
    c.build(input);
    const absl::Status s = index.Append("a", input, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name << s;
    EXPECT_NE(s.message().find(c.needle), absl::string_view::npos)
        << c.name << ": \"" << s.message() << "\" lacks \"" << c.needle << "\"";
  }
  // Nothing of any entry was stored: no windows, no pool rows, and the
  // context is still the prompt's.
  const NamespaceStats stats = index.Stats("default")[0];
  EXPECT_EQ(stats.output_nodes, 0);
  EXPECT_EQ(stats.ngram_entries, 0);
  ASSERT_TRUE(index.Append("a", Path{3}, nullptr).ok());
  EXPECT_EQ(index.Stats("default")[0].output_nodes, 0);  // [2 3] not [7 3].
}

TEST(DraftIndexNgramTest, OnePathFromTwoSourcesIsOneNodeWithBothBits) {
  DraftIndex index(Options(), nullptr);
  // Session a puts 100 101 102 into the output trie (windows of 3) and the
  // same n-gram into the pool.
  ASSERT_TRUE(index.OpenSession("a", "", kVocab, {1}, 2).ok());
  const Path ngram = {100, 101, 102};
  StepInput input;
  input.accepted = ngram;
  input.ngrams.push_back(ngram);
  ASSERT_TRUE(index.Append("a", input, nullptr).ok());
  ASSERT_TRUE(index.OpenSession("b", "", kVocab, {900, 100}, 2).ok());
  absl::StatusOr<MixedDraft> tree =
      index.Retrieve("b", Request(8, kTriesOnly | kNgramOnly));
  ASSERT_TRUE(tree.ok());
  ExpectValid(*tree, 8, 2);
  ASSERT_EQ(tree->nodes.size(), 2u);
  const uint32_t both = CandidateSourceBit(CandidateSource::kOutput) |
                        CandidateSourceBit(CandidateSource::kNgram);
  EXPECT_EQ(tree->nodes[0].token, 101);
  EXPECT_EQ(tree->nodes[0].source_set, both);
  EXPECT_EQ(tree->nodes[0].source, CandidateSource::kOutput);
  EXPECT_EQ(tree->nodes[1].token, 102);
  EXPECT_EQ(tree->nodes[1].source_set, both);
  // Merged: more likely than either source alone.
  const CalibrationTable prior = CalibrationTable::Prior();
  EXPECT_GT(tree->nodes[0].score, prior.rate(CandidateSource::kOutput, 1, 0));
  // The tries alone: output bit only.
  tree = index.Retrieve("b", Request(8, kTriesOnly));
  ASSERT_TRUE(tree.ok());
  ASSERT_FALSE(tree->nodes.empty());
  EXPECT_EQ(tree->nodes[0].source_set,
            CandidateSourceBit(CandidateSource::kOutput));
}

// A session source (session_source.h) that always proposes 3 then 4, as
// an assistant might.
class ScriptedSessionSource : public SessionSource {
 public:
  CandidateSource kind() const override { return CandidateSource::kAssistant; }
  absl::Status CheckVocabulary(int32_t) const override {
    return absl::OkStatus();
  }
  double RecentSecondsPerToken() override { return 0; }
  absl::Duration step_deadline() const override { return absl::Seconds(1); }
  void Open(absl::string_view, int64_t, int32_t, absl::Span<const int32_t>,
            const SessionSampling&) override {}
  void Advance(absl::string_view, absl::Span<const int32_t>) override {}
  void Retired(absl::string_view, int64_t) override {}
  absl::Status Check(absl::string_view) const override {
    return absl::OkStatus();
  }
  CandidateTree Draft(absl::string_view, int, absl::Time) override {
    return RankedCandidates(CandidateSource::kAssistant, {3, 4}, {-1, 0},
                            {0.9f, 0.8f});
  }
  double TakeSeconds(absl::string_view) override { return 0; }
};

TEST(DraftIndexNgramTest, SessionSourceCandidatesAreMixedAndCalibrated) {
  DraftIndex index(Options(), nullptr);
  ScriptedSessionSource source;
  index.SetSessionSource(&source);
  ASSERT_TRUE(index.OpenSession("a", "", kVocab, {1, 2, 3, 1, 2}, 4).ok());
  RetrieveRequest request =
      Request(8, kTriesOnly | CandidateSourceBit(CandidateSource::kAssistant));
  request.source_deadline = absl::Now() + absl::Seconds(1);
  absl::StatusOr<MixedDraft> tree = index.Retrieve("a", request);
  ASSERT_TRUE(tree.ok());
  ExpectValid(*tree, 8, 4);
  ASSERT_FALSE(tree->nodes.empty());
  EXPECT_EQ(tree->nodes[0].token, 3);
  EXPECT_EQ(tree->nodes[0].source_set,
            CandidateSourceBit(CandidateSource::kPrompt) |
                CandidateSourceBit(CandidateSource::kAssistant));
  EXPECT_TRUE(Paths(*tree).count({3, 4}));
  // The verifier accepts 3 4: the assistant's nodes count as accepted.
  ASSERT_TRUE(index.Append("a", Path{3, 4, 9}, nullptr).ok());
  const std::vector<NamespaceStats> stats = index.Stats("default");
  const SourceStatsRow& assistant =
      stats[0].sources[static_cast<int>(CandidateSource::kAssistant)];
  EXPECT_EQ(assistant.source, CandidateSource::kAssistant);
  EXPECT_EQ(assistant.proposed, 2);
  EXPECT_EQ(assistant.judged, 2);
  EXPECT_EQ(assistant.accepted, 2);
}

TEST(DraftIndexNgramTest, BudgetDepthAndModeAreRespected) {
  DraftIndex index(Options(), nullptr);
  ASSERT_TRUE(index.OpenSession("a", "", kVocab, {1, 2, 3, 4, 5}, 4).ok());
  // Many continuations of "5" in every source.
  std::vector<Path> ngrams;
  for (int32_t t = 0; t < 20; ++t) ngrams.push_back({5, 200 + t, 300 + t});
  for (int round = 0; round < 3; ++round) {
    StepInput input;
    const Path accepted = {5, 10 + round, 11, 12, 13};
    input.accepted = accepted;
    for (size_t i = 0; i < 10; ++i) {
      input.ngrams.push_back(ngrams[(round * 7 + i) % ngrams.size()]);
    }
    ASSERT_TRUE(index.Append("a", input, nullptr).ok());
  }
  ASSERT_TRUE(index.Append("a", Path{5}, nullptr).ok());
  for (int32_t budget : {1, 2, 5, 16, 64}) {
    for (int32_t depth : {1, 2, 4}) {
      for (DraftMode mode : {DraftMode::kHierarchical, DraftMode::kParallel}) {
        RetrieveRequest r = Request(budget, kTriesOnly | kNgramOnly, depth);
        r.mode = mode;
        absl::StatusOr<MixedDraft> tree = index.Retrieve("a", r);
        ASSERT_TRUE(tree.ok());
        ExpectValid(*tree, budget, depth);
        EXPECT_FALSE(tree->nodes.empty());
        if (mode == DraftMode::kHierarchical) {
          EXPECT_EQ(Paths(*tree).size(), tree->nodes.size());  // No dups.
        }
      }
    }
  }
  RetrieveRequest off = Request(8, kNgramOnly);
  off.mode = DraftMode::kOff;
  EXPECT_TRUE(index.Retrieve("a", off)->nodes.empty());
  EXPECT_EQ(index.Retrieve("a", Request(-1, kNgramOnly)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DraftIndexNgramTest, CalibrationFollowsWhatTheVerifierAccepts) {
  DraftIndex index(Options(), nullptr);
  ASSERT_TRUE(index.OpenSession("w", "", kVocab, {900}, 2).ok());
  ASSERT_TRUE(index.Append("w", Path{1, 2, 3, 1, 2, 3, 1}, nullptr).ok());
  auto output_rate = [&] {
    const std::vector<NamespaceStats> stats = index.Stats("default");
    for (const SourceStatsRow& row : stats[0].sources) {
      if (row.source == CandidateSource::kOutput) return row;
    }
    return SourceStatsRow();
  };
  const float prior =
      CalibrationTable::Prior().rate(CandidateSource::kOutput, 1, 0);
  EXPECT_FLOAT_EQ(output_rate().depth_acceptance[0], prior);
  // Context "... 1": the output trie drafts 2 3; the verifier accepts it.
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(index.Retrieve("w", Request(4, kTriesOnly)).ok());
    ASSERT_TRUE(index.Append("w", Path{2, 3, 1}, nullptr).ok());
  }
  SourceStatsRow row = output_rate();
  EXPECT_GT(row.depth_acceptance[0], 0.8f);
  EXPECT_GT(row.proposed, 0);
  EXPECT_EQ(row.judged, row.proposed);  // 2 then 3: both judged.
  EXPECT_EQ(row.accepted, row.judged);
  // Now it rejects the first token every time (a new token follows "1"
  // each time, so "2" stays the trie's first choice): depth 1 drops, depth
  // 2 is no longer judged (its parent was rejected).
  const float depth2 = row.depth_acceptance[1];
  // 40 hits then 200 misses: the decayed counts say ~44/248 with the prior.
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(index.Retrieve("w", Request(4, kTriesOnly)).ok());
    ASSERT_TRUE(index.Append("w", Path{500 + i, 1}, nullptr).ok());
  }
  row = output_rate();
  EXPECT_LT(row.depth_acceptance[0], 0.3f);
  EXPECT_FLOAT_EQ(row.depth_acceptance[1], depth2);
  EXPECT_LT(row.accepted, row.judged);
  EXPECT_LT(row.judged, row.proposed);  // Nodes below a rejected one.
  // An Append without tokens judges nothing.
  const int64_t judged = row.judged;
  ASSERT_TRUE(index.Retrieve("w", Request(4, kTriesOnly)).ok());
  ASSERT_TRUE(index.Append("w", Path{}, nullptr).ok());
  EXPECT_EQ(output_rate().judged, judged);
}

TEST(DraftIndexNgramTest, ScoresLearnWhichMatchLengthsHold) {
  DraftIndex index(Options(), nullptr);
  // The prompt quotes "10 11 12 13 14"; "12" is also followed by 30.
  ASSERT_TRUE(
      index.OpenSession("m", "", kVocab, {10, 11, 12, 13, 14, 20, 12, 30}, 4)
          .ok());
  auto first_score = [&](const Path& context_tail) {
    EXPECT_TRUE(index.Append("m", context_tail, nullptr).ok());
    absl::StatusOr<MixedDraft> tree =
        index.Retrieve("m", Request(4, kTriesOnly));
    EXPECT_TRUE(tree.ok() && !tree->nodes.empty());
    return tree.ok() && !tree->nodes.empty() ? tree->nodes[0].score : -1.0f;
  };
  // Behind the 3-token match "10 11 12" the quote goes on; behind "x 12",
  // x new each time (a 1-token match in both tries), the output goes
  // elsewhere. The same sources, depths and ranks either way: only the
  // match length tells the two apart.
  float long_match = 0, short_match = 0;
  for (int i = 0; i < 60; ++i) {
    long_match = first_score({500 + i, 10, 11, 12});
    short_match = first_score({13, 14, 200 + i, 12});
  }
  EXPECT_GT(long_match, 0.9f);
  EXPECT_LT(short_match, 0.25f);
}

TEST(DraftIndexNgramTest, OnlyNodesTheVerifierVerifiedAreJudged) {
  DraftIndex index(Options(), nullptr);
  ASSERT_TRUE(index.OpenSession("w", "", kVocab, {900}, 2).ok());
  ASSERT_TRUE(index.Append("w", Path{1, 2, 3, 1, 4, 5, 1}, nullptr).ok());
  auto output = [&] {
    const std::vector<NamespaceStats> stats = index.Stats("default");
    return stats[0].sources[static_cast<int>(CandidateSource::kOutput)];
  };
  // The draft after "1": 2 and 4 (depth 1), 3 and 5 (depth 2).
  absl::StatusOr<MixedDraft> tree = index.Retrieve("w", Request(4, kTriesOnly));
  ASSERT_TRUE(tree.ok());
  ASSERT_EQ(tree->nodes.size(), 4u);
  // The verifier verified only node 2 (its PredictionTree below the same
  // root) and accepted it, then drew 9: only 2 is judged.
  const Path tokens = {2}, parents = {-1}, top = {2, 9};
  StepInput input;
  const Path accepted = {2, 9};
  input.accepted = accepted;
  input.predictions.push_back(Prediction(0, tokens, parents, 1, top));
  ASSERT_TRUE(index.Append("w", input, nullptr).ok());
  EXPECT_EQ(output().proposed, 4);
  EXPECT_EQ(output().judged, 1);
  EXPECT_EQ(output().accepted, 1);
  // Without a PredictionTree every node whose parent was accepted counts:
  // 2 and 4 at depth 1, 3 below the accepted 2.
  ASSERT_TRUE(index.Append("w", Path{1}, nullptr).ok());
  ASSERT_EQ(index.Retrieve("w", Request(4, kTriesOnly))->nodes.size(), 4u);
  ASSERT_TRUE(index.Append("w", Path{2, 9}, nullptr).ok());
  EXPECT_EQ(output().proposed, 4 + 4);
  EXPECT_EQ(output().judged, 1 + 3);
  EXPECT_EQ(output().accepted, 1 + 1);
}

TEST(DraftIndexNgramTest, PoolMutationsFollowTheTrieAndAreAwaited) {
  RecordingSink sink;
  DraftIndex index(Options(), &sink);
  ASSERT_TRUE(index.OpenSession("a", "", kVocab, {1}, 2).ok());
  sink.Hold();
  // Only n-grams (no trie window yet): on_durable waits for their batch.
  const Path ngram = {5, 6, 7};
  StepInput input;
  input.ngrams.push_back(ngram);
  bool durable = false;
  ASSERT_TRUE(
      index.Append("a", input, [&](absl::Status s) { durable = s.ok(); }).ok());
  EXPECT_FALSE(durable);
  EXPECT_EQ(sink.pool_rows().size(), 2u);
  sink.Release();
  EXPECT_TRUE(durable);
  // The private pool never reaches the sink; the namespace pool does.
  EXPECT_EQ(sink.trie_mutations(), 0);

  // The recorded rows rebuild the same pool.
  DraftIndex fresh(Options(), nullptr);
  ASSERT_TRUE(fresh.RestoreNamespace("default", kVocab).ok());
  for (const auto& [ns, row] : sink.pool_rows()) {
    const Path key(row.begin() + 1, row.begin() + 1 + row[0]);
    const Path continuation(row.begin() + 1 + row[0], row.end());
    ASSERT_TRUE(fresh.RestoreNgram(ns, key, continuation, 1).ok());
  }
  fresh.FinishRestore();
  EXPECT_EQ(fresh.Stats("default")[0].ngram_entries, 2);
  ASSERT_TRUE(fresh.OpenSession("b", "", kVocab, {5}, 2).ok());
  absl::StatusOr<MixedDraft> tree = fresh.Retrieve("b", Request(4, kNgramOnly));
  ASSERT_TRUE(tree.ok());
  EXPECT_TRUE(Paths(*tree).count({6, 7}));
  // Unknown namespace / bad ids.
  EXPECT_EQ(fresh.RestoreNgram("nope", {1}, {2}, 1).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fresh.RestoreNgram("default", {1}, {kVocab}, 1).code(),
            absl::StatusCode::kInvalidArgument);
}

// Sessions of one namespace stepping at once (pool adds, calibration,
// mixed retrieval, closes): every answer stays a valid tree and the counts
// add up.
TEST(DraftIndexNgramTest, ConcurrentStepsSmoke) {
  RecordingSink sink;
  IndexOptions options = Options();
  options.ngram.capacity_entries = 500;  // Prunes under load too.
  DraftIndex index(options, &sink);
  constexpr int kThreads = 4;
  constexpr int kSteps = 150;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string id = absl::StrCat("s", t);
      ASSERT_TRUE(index.OpenSession(id, "ns", kVocab, {1, 2, 3}, 4).ok());
      for (int i = 0; i < kSteps; ++i) {
        absl::StatusOr<MixedDraft> tree =
            index.Retrieve(id, Request(16, kTriesOnly | kNgramOnly));
        ASSERT_TRUE(tree.ok()) << tree.status();
        ExpectValid(*tree, 16, 4);
        const Path accepted = {(i * 7 + t) % 50, (i * 3) % 50, i % 50};
        const Path tokens = {accepted[0], 99}, parents = {-1, -1};
        Path top(2 * 3);
        for (size_t r = 0; r < top.size(); ++r) top[r] = (i + r) % 60;
        const Path ngram = {i % 40, (i + 1) % 40, (i + t) % 40};
        StepInput input;
        input.accepted = accepted;
        input.predictions.push_back(Prediction(0, tokens, parents, 2, top));
        input.ngrams.push_back(ngram);
        ASSERT_TRUE(index.Append(id, input, nullptr).ok());
      }
      ASSERT_TRUE(index.CloseSession(id).ok());
    });
  }
  for (std::thread& thread : threads) thread.join();
  const NamespaceStats stats = index.Stats("ns")[0];
  EXPECT_GT(stats.ngram_entries, 0);
  EXPECT_LE(stats.ngram_entries, 500);
  EXPECT_GT(stats.ngram_prunes, 0);
  int64_t proposed = 0;
  for (const SourceStatsRow& row : stats.sources) {
    EXPECT_LE(row.accepted, row.judged);
    proposed += row.proposed;
  }
  EXPECT_GT(proposed, 0);
}

TEST(DraftIndexNgramTest, DisabledPoolsDropPredictionsButStillValidate) {
  IndexOptions options = Options();
  options.ngram_enabled = false;
  DraftIndex index(options, nullptr);
  ASSERT_TRUE(index.OpenSession("a", "", kVocab, {1}, 2).ok());
  const Path ngram = {5, 6, 7}, bad = {5, kVocab};
  StepInput input;
  input.ngrams.push_back(ngram);
  ASSERT_TRUE(index.Append("a", input, nullptr).ok());
  EXPECT_EQ(index.Stats("default")[0].ngram_entries, 0);
  input.ngrams.push_back(bad);
  EXPECT_EQ(index.Append("a", input, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<MixedDraft> tree = index.Retrieve("a", Request(4, kNgramOnly));
  ASSERT_TRUE(tree.ok());
  EXPECT_TRUE(tree->nodes.empty());
}

TEST(DraftIndexNgramTest, OptionsAreValidated) {
  IndexOptions o = Options();
  o.ngram.max_key_tokens = 9;
  EXPECT_NE(DraftIndex::ValidateOptions(o).message().find("max_key_tokens"),
            absl::string_view::npos);
  o = Options();
  o.max_prediction_k = 0;
  EXPECT_NE(DraftIndex::ValidateOptions(o).message().find("max_prediction_k"),
            absl::string_view::npos);
  o = Options();
  o.ngram_max_tokens = 1;
  EXPECT_NE(DraftIndex::ValidateOptions(o).message().find("ngram_max_tokens"),
            absl::string_view::npos);
  o = Options();
  o.session_ngram_capacity_entries = 0;
  EXPECT_NE(DraftIndex::ValidateOptions(o).message().find(
                "session_ngram_capacity_entries"),
            absl::string_view::npos);
  o = Options();
  o.calibration.decay = 0;
  EXPECT_NE(DraftIndex::ValidateOptions(o).message().find("decay"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace lookahead::draftsvc
