#include "draftsvc/index/draft_index.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

using Path = std::vector<int32_t>;
using Oracle = std::map<Path, int64_t>;

// A MutationSink that applies every batch to a per-namespace std::map (the
// store's semantics) and either acknowledges at once or holds the callbacks.
class OracleSink : public MutationSink {
 public:
  void Submit(TrieMutationBatch batch,
              std::function<void(absl::Status)> done) override {
    {
      absl::MutexLock lock(&mu_);
      ++batches_;
      Oracle& o = tries_[batch.name_space];
      vocab_[batch.name_space] = batch.vocab_size;
      for (const TrieMutation& m : batch.mutations) {
        switch (m.kind) {
          case TrieMutation::Kind::kAdd:
            o[m.path] += m.value;
            break;
          case TrieMutation::Kind::kSetCount:
            if (!o.count(m.path)) bad_ = "kSetCount on a missing node";
            o[m.path] = m.value;
            break;
          case TrieMutation::Kind::kDeleteSubtree: {
            if (!o.count(m.path)) bad_ = "delete of a missing node";
            auto it = o.lower_bound(m.path);
            while (
                it != o.end() && it->first.size() >= m.path.size() &&
                std::equal(m.path.begin(), m.path.end(), it->first.begin())) {
              it = o.erase(it);
            }
            break;
          }
        }
      }
      if (hold_) {
        held_.push_back(std::move(done));
        return;
      }
    }
    done(result_);
  }

  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }
  void FailWith(absl::Status s) { result_ = std::move(s); }
  // Acknowledges every held batch.
  void Release() {
    std::vector<std::function<void(absl::Status)>> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
      hold_ = false;
    }
    for (auto& done : held) done(absl::OkStatus());
  }
  Oracle Trie(const std::string& ns) {
    absl::MutexLock lock(&mu_);
    return tries_[ns];
  }
  std::map<std::string, int32_t> Vocabs() {
    absl::MutexLock lock(&mu_);
    return vocab_;
  }
  int batches() {
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  std::string bad() {
    absl::MutexLock lock(&mu_);
    return bad_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, Oracle> tries_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int32_t> vocab_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(absl::Status)>> held_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  int batches_ ABSL_GUARDED_BY(mu_) = 0;
  std::string bad_ ABSL_GUARDED_BY(mu_);
  absl::Status result_;  // Set before use.
};

Oracle Dump(const DraftIndex& index, const std::string& ns) {
  Oracle out;
  const absl::Status s =
      index.ForEachNode(ns, [&](absl::Span<const int32_t> p, int64_t c) {
        out[Path(p.begin(), p.end())] = c;
      });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// Rebuilds a fresh index from the sink's oracle, as the store does at start.
void ExpectReplayMatches(OracleSink& sink, const DraftIndex& index,
                         const IndexOptions& options) {
  DraftIndex fresh(options, nullptr);
  for (const auto& [ns, vocab] : sink.Vocabs()) {
    ASSERT_TRUE(fresh.RestoreNamespace(ns, vocab).ok());
    for (const auto& [path, count] : sink.Trie(ns)) {
      const absl::Status s = fresh.RestoreNode(ns, path, count);
      ASSERT_TRUE(s.ok()) << s;
    }
    EXPECT_EQ(Dump(fresh, ns), Dump(index, ns)) << "namespace " << ns;
  }
  EXPECT_EQ(sink.bad(), "");
}

std::set<int32_t> Tokens(const MixedDraft& tree) {
  std::set<int32_t> out;
  for (const DraftNode& n : tree.nodes) out.insert(n.token);
  return out;
}

void ExpectCode(const absl::Status& s, absl::StatusCode code,
                const std::string& needle) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(s.message().find(needle), absl::string_view::npos)
      << "message \"" << s.message() << "\" lacks \"" << needle << "\"";
}

constexpr int32_t kVocab = 1000;

TEST(DraftIndexTest, PromptChainIsRetrievedFromItsPrefix) {
  DraftIndex index(IndexOptions{}, nullptr);
  const Path prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  auto open = index.OpenSession("s", "", kVocab, prompt, 0);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(open->name_space, "default");
  EXPECT_GT(open->prompt_nodes, 0);
  bool durable = false;
  ASSERT_TRUE(
      index.Append("s", Path{3, 4}, [&](absl::Status s) { durable = s.ok(); })
          .ok());
  EXPECT_TRUE(durable);  // No sink: acknowledged at once.
  auto tree = index.Retrieve("s", 16, 0, DraftMode::kHierarchical);
  ASSERT_TRUE(tree.ok()) << tree.status();
  // Context "... 3 4" -> the prompt continues 5 6 7 ...
  ASSERT_GE(tree->nodes.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(tree->nodes[i].token, 5 + i);
    EXPECT_EQ(tree->nodes[i].depth, i + 1);
    EXPECT_EQ(tree->nodes[i].source, CandidateSource::kPrompt);
    EXPECT_FLOAT_EQ(tree->nodes[i].score, IndexOptions{}.prompt_boost);
  }
  // Depth is limited by branch_length.
  tree = index.Retrieve("s", 16, 3, DraftMode::kParallel);
  ASSERT_TRUE(tree.ok());
  for (const DraftNode& n : tree->nodes) EXPECT_LE(n.depth, 3);
  tree = index.Retrieve("s", 16, 0, DraftMode::kOff);
  ASSERT_TRUE(tree.ok());
  EXPECT_TRUE(tree->nodes.empty());
}

TEST(DraftIndexTest, OutputWindowsGoToTheGlobalTrieProgressively) {
  OracleSink sink;
  IndexOptions options;
  DraftIndex index(options, &sink);
  ASSERT_TRUE(index.OpenSession("a", "ns", kVocab, Path{500, 501}, 3).ok());
  // Window length 4: nothing until the 4th output token.
  ASSERT_TRUE(index.Append("a", Path{1, 2, 3}, nullptr).ok());
  EXPECT_TRUE(Dump(index, "ns").empty());
  EXPECT_EQ(sink.batches(), 0);
  ASSERT_TRUE(index.Append("a", Path{4}, nullptr).ok());
  Oracle want = {{{1}, 1}, {{1, 2}, 1}, {{1, 2, 3}, 1}, {{1, 2, 3, 4}, 1}};
  EXPECT_EQ(Dump(index, "ns"), want);
  ASSERT_TRUE(index.Append("a", Path{5}, nullptr).ok());
  want.insert({{{2}, 1}, {{2, 3}, 1}, {{2, 3, 4}, 1}, {{2, 3, 4, 5}, 1}});
  EXPECT_EQ(Dump(index, "ns"), want);
  // Close inserts the trailing windows 3 4 5 and 4 5 - never prompt tokens.
  ASSERT_TRUE(index.CloseSession("a").ok());
  want.insert({{{3}, 1}, {{3, 4}, 1}, {{3, 4, 5}, 1}, {{4}, 1}, {{4, 5}, 1}});
  EXPECT_EQ(Dump(index, "ns"), want);
  ExpectReplayMatches(sink, index, options);
}

// A session reopened with the output an earlier one reported at the end of
// its prompt (a draftsvc restart) windows the next tokens as if it had
// never stopped: the seam loses no window, and the prompt part none of the
// earlier output is inserted again.
TEST(DraftIndexTest, AReopenedSessionsWindowsReachBackIntoResumedOutput) {
  OracleSink sink;
  IndexOptions options;
  DraftIndex index(options, &sink);
  ASSERT_TRUE(index.OpenSession("a", "ns", kVocab, Path{500, 501, 1, 2, 3}, 3,
                                /*resumed_output=*/3)
                  .ok());
  EXPECT_TRUE(Dump(index, "ns").empty());
  ASSERT_TRUE(index.Append("a", Path{4}, nullptr).ok());
  const Oracle want = {
      {{1}, 1}, {{1, 2}, 1}, {{1, 2, 3}, 1}, {{1, 2, 3, 4}, 1}};
  EXPECT_EQ(Dump(index, "ns"), want);
  // Without it, the seam's window is lost.
  ASSERT_TRUE(index.OpenSession("b", "other", kVocab, Path{500, 501, 1, 2, 3},
                                3)
                  .ok());
  ASSERT_TRUE(index.Append("b", Path{4}, nullptr).ok());
  EXPECT_TRUE(Dump(index, "other").empty());
  // More than the prompt is refused.
  EXPECT_EQ(index.OpenSession("c", "ns", kVocab, Path{1, 2}, 3, 3)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DraftIndexTest, SessionsAndNamespacesAreIsolated) {
  DraftIndex index(IndexOptions{}, nullptr);
  // A's prompt has the secret continuation 7 -> 600 601 602.
  ASSERT_TRUE(
      index.OpenSession("a", "x", kVocab, Path{600, 601, 602, 7, 600, 601}, 0)
          .ok());
  ASSERT_TRUE(index.OpenSession("b", "x", kVocab, Path{9, 9, 7}, 0).ok());
  ASSERT_TRUE(index.OpenSession("c", "y", kVocab, Path{1, 2, 3}, 0).ok());
  auto a_tree = index.Retrieve("a", 32, 0, DraftMode::kHierarchical);
  ASSERT_TRUE(a_tree.ok());
  EXPECT_TRUE(Tokens(*a_tree).count(602));  // A sees its own prompt.
  auto b_tree = index.Retrieve("b", 32, 0, DraftMode::kHierarchical);
  ASSERT_TRUE(b_tree.ok());
  EXPECT_TRUE(b_tree->nodes.empty());  // B never sees A's prompt.

  // A's outputs reach B (same namespace) but not C (namespace y).
  Path out = {1, 2, 3, 40, 41, 42, 43, 44, 45, 46, 47, 48};
  ASSERT_TRUE(index.Append("a", out, nullptr).ok());
  ASSERT_TRUE(index.CloseSession("a").ok());
  ASSERT_TRUE(index.Append("b", Path{40, 41}, nullptr).ok());
  b_tree = index.Retrieve("b", 32, 0, DraftMode::kHierarchical);
  ASSERT_TRUE(b_tree.ok());
  EXPECT_TRUE(Tokens(*b_tree).count(42));
  EXPECT_EQ(b_tree->nodes[0].source, CandidateSource::kOutput);
  for (int32_t t : Tokens(*b_tree)) EXPECT_LT(t, 600);
  // C's context "1 2 3" is a prefix of A's output, but in another namespace.
  auto c_tree = index.Retrieve("c", 32, 0, DraftMode::kHierarchical);
  ASSERT_TRUE(c_tree.ok());
  EXPECT_TRUE(c_tree->nodes.empty());
  EXPECT_TRUE(Dump(index, "y").empty());
  // The global trie of x never holds A's prompt tokens.
  for (const auto& [path, count] : Dump(index, "x")) {
    for (int32_t t : path) EXPECT_LT(t, 600);
  }
}

TEST(DraftIndexTest, CapacityPruneKeepsFrequentAndReplaysIdentically) {
  OracleSink sink;
  IndexOptions options;
  options.capacity_nodes = 2000;
  options.low_water = 0.5;
  DraftIndex index(options, &sink);
  std::mt19937 rng(1);
  ASSERT_TRUE(index.OpenSession("s", "p", kVocab, Path{1}, 4).ok());
  const Path hot = {900, 901, 902, 903, 904};
  for (int step = 0; step < 400; ++step) {
    Path tokens(8);
    for (int32_t& t : tokens) t = rng() % 800;
    ASSERT_TRUE(index.Append("s", tokens, nullptr).ok());
    ASSERT_TRUE(index.Append("s", hot, nullptr).ok());
    const std::vector<NamespaceStats> stats = index.Stats("p");
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_LE(stats[0].output_nodes, options.capacity_nodes);
    if (step % 50 == 0) ExpectReplayMatches(sink, index, options);
  }
  const NamespaceStats stats = index.Stats("p")[0];
  EXPECT_GT(stats.prunes, 3);
  EXPECT_EQ(stats.open_sessions, 1);
  // The hot path survived every prune.
  const Oracle now = Dump(index, "p");
  EXPECT_TRUE(now.count(hot)) << "hot window pruned";
  ExpectReplayMatches(sink, index, options);

  // Explicit prune keeps the most frequent nodes.
  const Oracle before = Dump(index, "p");
  auto pruned = index.Prune("p", 100);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(pruned->remaining_nodes, 100);
  EXPECT_EQ(pruned->removed_nodes, static_cast<int64_t>(before.size()) - 100);
  const Oracle after = Dump(index, "p");
  EXPECT_EQ(after.size(), 100u);
  int64_t min_kept = INT64_MAX, max_dropped = 0;
  for (const auto& [path, count] : before) {
    if (after.count(path)) {
      min_kept = std::min(min_kept, count);
    } else {
      max_dropped = std::max(max_dropped, count);
    }
  }
  EXPECT_GE(min_kept, max_dropped);
  EXPECT_TRUE(after.count(Path{900, 901}));
  ExpectReplayMatches(sink, index, options);
  // Already below target: nothing happens.
  pruned = index.Prune("p", 1000);
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(pruned->removed_nodes, 0);
  EXPECT_EQ(Dump(index, "p"), after);
}

TEST(DraftIndexTest, OnDurableWaitsForTheSinkAndReportsErrors) {
  OracleSink sink;
  DraftIndex index(IndexOptions{}, &sink);
  ASSERT_TRUE(index.OpenSession("s", "", kVocab, Path{1}, 1).ok());
  sink.Hold();
  int calls = 0;
  absl::Status got = absl::UnknownError("not called");
  ASSERT_TRUE(index
                  .Append("s", Path{1, 2, 3},
                          [&](absl::Status s) {
                            ++calls;
                            got = s;
                          })
                  .ok());
  EXPECT_EQ(calls, 0);  // Not durable yet.
  sink.Release();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(got.ok());
  // Nothing to persist (window incomplete in a fresh session): OK at once.
  ASSERT_TRUE(index.OpenSession("t", "", kVocab, Path{1}, 8).ok());
  calls = 0;
  ASSERT_TRUE(index.Append("t", Path{4}, [&](absl::Status) { ++calls; }).ok());
  EXPECT_EQ(calls, 1);
  // A failed write reaches the caller.
  sink.FailWith(absl::DataLossError("disk on fire"));
  ASSERT_TRUE(
      index.Append("s", Path{4}, [&](absl::Status s) { got = s; }).ok());
  EXPECT_EQ(got.code(), absl::StatusCode::kDataLoss);
}

TEST(DraftIndexTest, RestoreRejectsBadInput) {
  DraftIndex index(IndexOptions{}, nullptr);
  ExpectCode(index.RestoreNode("nope", Path{1}, 1), absl::StatusCode::kNotFound,
             "RestoreNamespace");
  ASSERT_TRUE(index.RestoreNamespace("r", 10).ok());
  ASSERT_TRUE(index.RestoreNamespace("r", 10).ok());
  ExpectCode(index.RestoreNamespace("r", 11),
             absl::StatusCode::kFailedPrecondition, "vocab_size 10");
  ExpectCode(index.RestoreNode("r", Path{1, 2}, 1),
             absl::StatusCode::kFailedPrecondition, "parent");
  ExpectCode(index.RestoreNode("r", Path{10}, 1),
             absl::StatusCode::kInvalidArgument, "index 0 is 10");
  ASSERT_TRUE(index.RestoreNode("r", Path{1}, 5).ok());
  ASSERT_TRUE(index.RestoreNode("r", Path{1, 2}, 3).ok());
  EXPECT_EQ(Dump(index, "r"), (Oracle{{{1}, 5}, {{1, 2}, 3}}));
  // A session of the restored namespace retrieves restored data.
  ASSERT_TRUE(index.OpenSession("s", "r", 10, Path{1}, 0).ok());
  auto tree = index.Retrieve("s", 4, 0, DraftMode::kHierarchical);
  ASSERT_TRUE(tree.ok());
  ASSERT_EQ(tree->nodes.size(), 1u);
  EXPECT_EQ(tree->nodes[0].token, 2);
  EXPECT_FLOAT_EQ(tree->nodes[0].score, 3.0f);
}

TEST(DraftIndexTest, BadInputsGetCodeAndMessage) {
  IndexOptions options;
  options.max_sessions = 2;
  options.max_prompt_tokens = 10;
  options.max_step_tokens = 5;
  DraftIndex index(options, nullptr);
  const Path ok_prompt = {1, 2, 3};
  using C = absl::StatusCode;
  ExpectCode(index.OpenSession("", "", kVocab, ok_prompt, 0).status(),
             C::kInvalidArgument, "session_id is 0 bytes");
  ExpectCode(index.OpenSession(std::string(257, 'x'), "", kVocab, ok_prompt, 0)
                 .status(),
             C::kInvalidArgument, "257 bytes");
  ExpectCode(index.OpenSession("s", "bad ns", kVocab, ok_prompt, 0).status(),
             C::kInvalidArgument, "[A-Za-z0-9_.-]");
  ExpectCode(index.OpenSession("s", std::string(129, 'n'), kVocab, ok_prompt, 0)
                 .status(),
             C::kInvalidArgument, "129 bytes");
  ExpectCode(index.OpenSession("s", "", kVocab, Path{}, 0).status(),
             C::kInvalidArgument, "empty");
  ExpectCode(index.OpenSession("s", "", kVocab, Path(11, 1), 0).status(),
             C::kInvalidArgument, "11 tokens; at most 10");
  ExpectCode(index.OpenSession("s", "", kVocab, Path{1, 1000, 2}, 0).status(),
             C::kInvalidArgument,
             "index 1 is 1000, outside [0, vocab_size=1000)");
  ExpectCode(index.OpenSession("s", "", kVocab, Path{-3}, 0).status(),
             C::kInvalidArgument, "index 0 is -3");
  ExpectCode(index.OpenSession("s", "", 0, ok_prompt, 0).status(),
             C::kInvalidArgument, "vocab_size 0");
  ExpectCode(index.OpenSession("s", "", (1 << 22) + 1, ok_prompt, 0).status(),
             C::kInvalidArgument, "4194304");
  ExpectCode(index.OpenSession("s", "", kVocab, ok_prompt, -1).status(),
             C::kInvalidArgument, "branch_length -1 is outside [0, 32]");
  ExpectCode(index.OpenSession("s", "", kVocab, ok_prompt, 33).status(),
             C::kInvalidArgument, "branch_length 33");
  EXPECT_TRUE(index.Stats("").empty());  // Nothing created by failures.

  ASSERT_TRUE(index.OpenSession("s", "v", kVocab, ok_prompt, 0).ok());
  ExpectCode(index.OpenSession("s", "v", kVocab, ok_prompt, 0).status(),
             C::kAlreadyExists, "\"s\" is already open");
  ExpectCode(index.OpenSession("t", "v", 2000, ok_prompt, 0).status(),
             C::kFailedPrecondition, "has vocab_size 1000");
  ASSERT_TRUE(index.OpenSession("t", "v", kVocab, ok_prompt, 0).ok());
  ExpectCode(index.OpenSession("u", "v", kVocab, ok_prompt, 0).status(),
             C::kResourceExhausted, "max_sessions");

  ExpectCode(index.Append("zz", Path{1}, nullptr), C::kNotFound,
             "session \"zz\" is not open");
  ExpectCode(index.Append("s", Path(6, 1), nullptr), C::kInvalidArgument,
             "6 accepted tokens; at most 5");
  ExpectCode(index.Append("s", Path{1, 2, 1000}, nullptr), C::kInvalidArgument,
             "index 2 is 1000");
  ExpectCode(index.Retrieve("zz", 4, 0, DraftMode::kHierarchical).status(),
             C::kNotFound, "zz");
  ExpectCode(index.Retrieve("s", -1, 0, DraftMode::kHierarchical).status(),
             C::kInvalidArgument, "decoding_length -1 is outside [0, 256]");
  ExpectCode(index.Retrieve("s", 257, 0, DraftMode::kHierarchical).status(),
             C::kInvalidArgument, "decoding_length 257");
  ExpectCode(index.Retrieve("s", 4, -2, DraftMode::kHierarchical).status(),
             C::kInvalidArgument, "branch_length -2 is outside [0, 32]");
  ExpectCode(index.Retrieve("s", 4, 40, DraftMode::kHierarchical).status(),
             C::kInvalidArgument, "branch_length 40");
  ExpectCode(index.CloseSession("zz"), C::kNotFound, "zz");
  ExpectCode(index.Prune("nope", 0).status(), C::kNotFound, "nope");
  ExpectCode(index.Prune("v", -1).status(), C::kInvalidArgument, "-1");
  ExpectCode(index.Prune("a b", 0).status(), C::kInvalidArgument,
             "[A-Za-z0-9_.-]");
  ExpectCode(
      index.ForEachNode("nope", [](absl::Span<const int32_t>, int64_t) {}),
      C::kNotFound, "nope");

  // Failed calls changed nothing; a closed session is gone.
  EXPECT_TRUE(Dump(index, "v").empty());
  ASSERT_TRUE(index.CloseSession("s").ok());
  ExpectCode(index.Append("s", Path{1}, nullptr), C::kNotFound, "\"s\"");
  ExpectCode(index.CloseSession("s"), C::kNotFound, "\"s\"");
  ASSERT_TRUE(index.OpenSession("s", "v", kVocab, ok_prompt, 0).ok());
}

// A clock the test moves by hand.
class FakeClock {
 public:
  DraftIndex::Clock AsClock() {
    return [this] {
      absl::MutexLock lock(&mu_);
      return now_;
    };
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  absl::Time Now() {
    absl::MutexLock lock(&mu_);
    return now_;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1000000);
};

int64_t OpenSessions(const DraftIndex& index) {
  int64_t open = 0;
  for (const NamespaceStats& s : index.Stats("")) open += s.open_sessions;
  return open;
}

// An hour-long lease on a fake clock: the sweeper thread (every 10 s of real
// time) never runs during the test; expiry happens only where the test
// moves the clock.
IndexOptions HourLease() {
  IndexOptions options;
  options.default_branch_length = 3;
  options.session_lease = absl::Hours(1);
  return options;
}

TEST(DraftIndexLeaseTest, IdleSessionsExpireAsCloseSessionWouldClose) {
  FakeClock clock;
  OracleSink sink;
  DraftIndex index(HourLease(), &sink, clock.AsClock());
  ASSERT_TRUE(
      index.OpenSession("idle", "ns", kVocab, Path{1, 2, 3, 4}, 0).ok());
  ASSERT_TRUE(index.OpenSession("busy", "ns", kVocab, Path{5, 6, 7}, 0).ok());
  // Two output tokens: no full window (branch_length 3 + 1) yet.
  ASSERT_TRUE(index.Append("idle", Path{8, 9}, nullptr).ok());
  EXPECT_TRUE(Dump(index, "ns").empty());

  clock.Advance(absl::Minutes(59));
  ASSERT_TRUE(index.Append("busy", Path{}, nullptr).ok());  // Renews busy.
  EXPECT_EQ(index.ExpireIdleSessions(clock.Now()), 0);
  clock.Advance(absl::Minutes(1));  // idle: 60 min since its Append.
  EXPECT_EQ(index.ExpireIdleSessions(clock.Now()), 1);
  EXPECT_EQ(index.ExpiredSessions(), 1);

  // What CloseSession leaves: the trailing window [8 9], persisted too.
  EXPECT_EQ(Dump(index, "ns"), (Oracle{{{8}, 1}, {{8, 9}, 1}}));
  EXPECT_EQ(sink.Trie("ns"), Dump(index, "ns"));
  ExpectCode(index.Append("idle", Path{1}, nullptr),
             absl::StatusCode::kNotFound, "\"idle\" is not open");
  ExpectCode(index.CloseSession("idle"), absl::StatusCode::kNotFound,
             "expired after 1h idle");
  const std::vector<NamespaceStats> stats = index.Stats("ns");
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].open_sessions, 1);
  EXPECT_EQ(stats[0].prompt_nodes, 5);  // busy's [5 6 7] and [6 7].
  EXPECT_TRUE(index.Retrieve("busy", 4, 0, DraftMode::kHierarchical).ok());

  // The id is free again.
  EXPECT_TRUE(index.OpenSession("idle", "ns", kVocab, Path{1}, 0).ok());
}

TEST(DraftIndexLeaseTest, AnExpiredSessionIsExpiredByTheNextCallThatFindsIt) {
  FakeClock clock;
  OracleSink sink;
  DraftIndex index(HourLease(), &sink, clock.AsClock());
  ASSERT_TRUE(index.OpenSession("s", "ns", kVocab, Path{1, 2}, 0).ok());
  ASSERT_TRUE(index.Append("s", Path{3, 4, 5}, nullptr).ok());
  clock.Advance(absl::Hours(1));
  // No sweep ran: the Step finds the lease over and expires it itself.
  ExpectCode(index.Retrieve("s", 4, 0, DraftMode::kHierarchical).status(),
             absl::StatusCode::kNotFound, "\"s\" expired after 1h idle");
  EXPECT_EQ(index.ExpiredSessions(), 1);
  EXPECT_EQ(OpenSessions(index), 0);
  EXPECT_EQ(index.Stats("ns")[0].prompt_nodes, 0);
  EXPECT_EQ(Dump(index, "ns").count(Path{3, 4, 5}), 1u);  // Its tail went in.
  ExpectCode(index.Append("s", Path{6}, nullptr), absl::StatusCode::kNotFound,
             "not open");

  // Reopening an id whose lease ran out needs no sweep either.
  ASSERT_TRUE(index.OpenSession("t", "ns", kVocab, Path{1}, 0).ok());
  clock.Advance(absl::Hours(2));
  EXPECT_TRUE(index.OpenSession("t", "ns", kVocab, Path{1}, 0).ok());
  EXPECT_EQ(index.ExpiredSessions(), 2);
}

TEST(DraftIndexLeaseTest, CapsNameTheirFlagAndExpiredSessionsFreeSlots) {
  FakeClock clock;
  IndexOptions options = HourLease();
  options.max_sessions = 3;
  options.max_sessions_per_namespace = 2;
  DraftIndex index(options, nullptr, clock.AsClock());
  const Path prompt = {1, 2, 3};
  ASSERT_TRUE(index.OpenSession("a1", "a", kVocab, prompt, 0).ok());
  ASSERT_TRUE(index.OpenSession("a2", "a", kVocab, prompt, 0).ok());
  ExpectCode(index.OpenSession("a3", "a", kVocab, prompt, 0).status(),
             absl::StatusCode::kResourceExhausted,
             "namespace \"a\" already has 2 sessions open, its cap "
             "(max_sessions_per_namespace, flag --max_sessions_per_namespace)");
  ASSERT_TRUE(index.OpenSession("b1", "b", kVocab, prompt, 0).ok());
  ExpectCode(index.OpenSession("b2", "b", kVocab, prompt, 0).status(),
             absl::StatusCode::kResourceExhausted,
             "already has 3 sessions open, its cap (max_sessions, flag "
             "--max_sessions)");
  // A close frees a slot in both caps.
  ASSERT_TRUE(index.CloseSession("a1").ok());
  ASSERT_TRUE(index.OpenSession("a3", "a", kVocab, prompt, 0).ok());
  // At the cap, sessions past their lease make room without a sweep.
  clock.Advance(absl::Minutes(30));
  ASSERT_TRUE(index.Append("b1", Path{}, nullptr).ok());
  clock.Advance(absl::Minutes(30));
  ASSERT_TRUE(index.OpenSession("a4", "a", kVocab, prompt, 0).ok());
  EXPECT_EQ(index.ExpiredSessions(), 2);  // a2 and a3; b1 was renewed.
  EXPECT_EQ(OpenSessions(index), 2);
}

TEST(DraftIndexLeaseTest, TheSweeperExpiresWithoutAnyCalls) {
  IndexOptions options;
  options.session_lease = absl::Milliseconds(50);
  DraftIndex index(options, nullptr);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(
        index.OpenSession(absl::StrCat("s", i), "ns", kVocab, Path{1, 2, 3}, 0)
            .ok());
  }
  // Generous for a loaded machine; it takes ~60 ms.
  const absl::Time end = absl::Now() + absl::Seconds(30);
  while (OpenSessions(index) > 0 && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(OpenSessions(index), 0);
  EXPECT_EQ(index.ExpiredSessions(), 8);
  index.StopExpiry();
  index.StopExpiry();  // Idempotent.
}

TEST(DraftIndexLeaseTest, HugeAndBinaryIdsGetShortQuotedErrors) {
  DraftIndex index(IndexOptions{}, nullptr);
  const std::string huge(1 << 20, 'x');
  using C = absl::StatusCode;
  for (const absl::Status& s :
       {index.Append(huge, Path{1}, nullptr),
        index.Retrieve(huge, 4, 0, DraftMode::kHierarchical).status(),
        index.CloseSession(huge),
        index.OpenSession(huge, "", kVocab, Path{1}, 0).status()}) {
    ExpectCode(s, C::kInvalidArgument,
               "session_id is 1048576 bytes; need 1..256");
    EXPECT_LT(s.message().size(), 100u);
  }
  std::string binary(200, '\0');
  for (size_t i = 0; i < binary.size(); ++i) {
    binary[i] = static_cast<char>(255 - i);
  }
  for (const absl::Status& s :
       {index.Append(binary, Path{1}, nullptr), index.CloseSession(binary)}) {
    ExpectCode(s, C::kNotFound, "...\" (200 bytes)");
    EXPECT_LT(s.message().size(), 400u);
    for (char c : s.message()) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(c);
  }
}

TEST(DraftIndexLeaseTest, OptionsAreValidated) {
  IndexOptions options;
  options.session_lease = absl::ZeroDuration();
  EXPECT_EQ(DraftIndex::ValidateOptions(options).code(),
            absl::StatusCode::kInvalidArgument);
  options.session_lease = absl::InfiniteDuration();
  EXPECT_TRUE(DraftIndex::ValidateOptions(options).ok());
  options.max_sessions_per_namespace = 0;
  ExpectCode(DraftIndex::ValidateOptions(options),
             absl::StatusCode::kInvalidArgument, "max_sessions_per_namespace");
  // An infinite lease starts no sweeper and never expires anything.
  IndexOptions never;
  never.session_lease = absl::InfiniteDuration();
  FakeClock clock;
  DraftIndex index(never, nullptr, clock.AsClock());
  ASSERT_TRUE(index.OpenSession("s", "", kVocab, Path{1}, 0).ok());
  clock.Advance(absl::Hours(24 * 365));
  EXPECT_EQ(index.ExpireIdleSessions(clock.Now()), 0);
  EXPECT_TRUE(index.Append("s", Path{2}, nullptr).ok());
}

TEST(DraftIndexTest, StatsAndBytesPerNode) {
  DraftIndex index(IndexOptions{}, nullptr);
  EXPECT_EQ(index.BytesPerNode(), 0.0);
  ASSERT_TRUE(index.OpenSession("a", "m", kVocab, Path{1, 2, 3, 4}, 2).ok());
  ASSERT_TRUE(index.OpenSession("b", "n", kVocab, Path{1, 2}, 2).ok());
  ASSERT_TRUE(index.Append("a", Path{5, 6, 7, 8}, nullptr).ok());
  std::vector<NamespaceStats> stats = index.Stats("");
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].name_space, "m");
  EXPECT_EQ(stats[0].vocab_size, kVocab);
  EXPECT_EQ(stats[0].open_sessions, 1);
  // Prompt 1 2 3 4, windows of 3: 1-2-3, 2-3-4, 3-4 -> 8 nodes.
  EXPECT_EQ(stats[0].prompt_nodes, 8);
  EXPECT_EQ(stats[0].output_nodes, 6);  // 5-6-7, 6-7-8.
  EXPECT_EQ(stats[0].capacity, IndexOptions{}.capacity_nodes);
  EXPECT_GT(stats[0].memory_bytes, 0);
  EXPECT_EQ(index.Stats("n").size(), 1u);
  EXPECT_TRUE(index.Stats("zzz").empty());
  EXPECT_GT(index.BytesPerNode(), 0.0);
  ASSERT_TRUE(index.CloseSession("a").ok());
  stats = index.Stats("m");
  EXPECT_EQ(stats[0].open_sessions, 0);
  EXPECT_EQ(stats[0].prompt_nodes, 0);
}

// Threads open, append to, retrieve from and close sessions in two
// namespaces; every tree is well-formed and the sink's view equals memory.
TEST(DraftIndexTest, ConcurrentSessionsSmoke) {
  OracleSink sink;
  IndexOptions options;
  options.capacity_nodes = 3000;  // Prunes happen under contention too.
  DraftIndex index(options, &sink);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      const std::string ns = t % 2 ? "odd" : "even";
      for (int s = 0; s < 15; ++s) {
        const std::string id =
            "t" + std::to_string(t) + "s" + std::to_string(s);
        Path prompt(5 + rng() % 50);
        for (int32_t& tok : prompt) tok = rng() % 50;
        if (!index.OpenSession(id, ns, kVocab, prompt, 1 + rng() % 8).ok()) {
          ++failures;
          continue;
        }
        for (int step = 0; step < 30; ++step) {
          Path accepted(rng() % 4);
          for (int32_t& tok : accepted) tok = rng() % 50;
          if (!index.Append(id, accepted, nullptr).ok()) ++failures;
          const DraftMode mode =
              step % 3 ? DraftMode::kHierarchical : DraftMode::kParallel;
          auto tree = index.Retrieve(id, 1 + rng() % 64, 0, mode);
          if (!tree.ok()) {
            ++failures;
            continue;
          }
          std::set<std::pair<int, int>> siblings;
          for (int i = 0; i < static_cast<int>(tree->nodes.size()); ++i) {
            const DraftNode& n = tree->nodes[i];
            if (n.parent >= i) ++failures;
            if (mode == DraftMode::kHierarchical &&
                !siblings.insert({n.parent, n.token}).second) {
              ++failures;
            }
          }
        }
        if (!index.CloseSession(id).ok()) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ExpectReplayMatches(sink, index, options);
  for (const NamespaceStats& s : index.Stats("")) {
    EXPECT_EQ(s.open_sessions, 0);
    EXPECT_LE(s.output_nodes, options.capacity_nodes);
  }
}

TEST(DraftIndexTest, CreateValidatesOptions) {
  EXPECT_TRUE(DraftIndex::Create(IndexOptions{}, nullptr).ok());
  IndexOptions o;
  o.low_water = 1.5;
  ExpectCode(DraftIndex::Create(o, nullptr).status(),
             absl::StatusCode::kInvalidArgument, "low_water 1.5");
  o = IndexOptions{};
  o.default_branch_length = 40;
  ExpectCode(DraftIndex::Create(o, nullptr).status(),
             absl::StatusCode::kInvalidArgument, "default_branch_length 40");
  o = IndexOptions{};
  o.capacity_nodes = 0;
  ExpectCode(DraftIndex::Create(o, nullptr).status(),
             absl::StatusCode::kInvalidArgument, "capacity_nodes 0");
}

// Random sessions append random outputs; the global trie must equal a map
// holding every output window of every session (shorter trailing windows
// of closed sessions included) and nothing else.
TEST(DraftIndexTest, RandomizedWindowsAgainstOracle) {
  for (int seed = 0; seed < 5; ++seed) {
    std::mt19937 rng(seed);
    DraftIndex index(IndexOptions{}, nullptr);
    Oracle oracle;
    struct Live {
      std::string id;
      int bl;
      Path output;
    };
    std::vector<Live> live;
    auto add_windows = [&](const Path& out, int bl, size_t from_end,
                           bool final) {
      // Full windows ending at positions >= from_end; at close, the short
      // windows starting in the last bl positions.
      const size_t w = bl + 1;
      for (size_t end = std::max(from_end, w); end <= out.size(); ++end) {
        for (size_t d = 1; d <= w; ++d) {
          oracle[Path(out.begin() + end - w, out.begin() + end - w + d)] += 1;
        }
      }
      if (final) {
        const size_t start =
            out.size() >= static_cast<size_t>(bl) ? out.size() - bl : 0;
        for (size_t s = start; s + 2 <= out.size(); ++s) {
          for (size_t d = 1; s + d <= out.size(); ++d) {
            oracle[Path(out.begin() + s, out.begin() + s + d)] += 1;
          }
        }
      }
    };
    for (int op = 0; op < 300; ++op) {
      const int r = rng() % 10;
      if (live.empty() || r == 0) {
        Live l{"s" + std::to_string(op), 1 + static_cast<int>(rng() % 6), {}};
        Path prompt(1 + rng() % 5, 500);  // Prompt ids never leak.
        ASSERT_TRUE(index.OpenSession(l.id, "r", kVocab, prompt, l.bl).ok());
        live.push_back(l);
      } else if (r == 1) {
        const size_t i = rng() % live.size();
        ASSERT_TRUE(index.CloseSession(live[i].id).ok());
        add_windows(live[i].output, live[i].bl, SIZE_MAX, true);
        live.erase(live.begin() + i);
      } else {
        Live& l = live[rng() % live.size()];
        Path step(rng() % 6);
        for (int32_t& t : step) t = rng() % 5;
        ASSERT_TRUE(index.Append(l.id, step, nullptr).ok());
        const size_t before = l.output.size();
        l.output.insert(l.output.end(), step.begin(), step.end());
        add_windows(l.output, l.bl, before + 1, false);
      }
      if (op % 50 == 49) {
        ASSERT_EQ(Dump(index, "r"), oracle) << "seed " << seed << " op " << op;
      }
    }
  }
}

}  // namespace
}  // namespace lookahead::draftsvc
