// DraftIndex's exactly-once Append (StepInput::accepted_offset): a report
// applied again after its answer was lost, whole, merged with the next one
// or by racing copies, leaves the index exactly as one application does
// (trie counts, pools, what reaches the sink, the context, calibration); an
// offset past what the session holds fails and changes nothing; without an
// offset every token is applied as sent.
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "draftsvc/index/draft_index.h"
#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

using Path = std::vector<int32_t>;
// (table, path) -> count: what the store holds.
using Rows = std::map<std::pair<int, Path>, int64_t>;

constexpr int32_t kVocab = 1000;
constexpr uint32_t kAllSources = CandidateSourceBit(CandidateSource::kPrompt) |
                                 CandidateSourceBit(CandidateSource::kOutput) |
                                 CandidateSourceBit(CandidateSource::kNgram);

// The store's semantics over a map: every batch applied, acknowledged at
// once.
class StoreModelSink : public MutationSink {
 public:
  void Submit(TrieMutationBatch batch,
              std::function<void(absl::Status)> done) override {
    {
      absl::MutexLock lock(&mu_);
      ++batches_;
      for (const TrieMutation& m : batch.mutations) {
        const auto key = std::make_pair(static_cast<int>(m.table), m.path);
        switch (m.kind) {
          case TrieMutation::Kind::kAdd:
            rows_[key] += m.value;
            break;
          case TrieMutation::Kind::kSetCount:
            rows_[key] = m.value;
            break;
          case TrieMutation::Kind::kDeleteSubtree:
            ADD_FAILURE() << "no prune expected at this size";
            break;
        }
      }
    }
    done(absl::OkStatus());
  }
  Rows rows() {
    absl::MutexLock lock(&mu_);
    return rows_;
  }
  int batches() {
    absl::MutexLock lock(&mu_);
    return batches_;
  }

 private:
  absl::Mutex mu_;
  Rows rows_ ABSL_GUARDED_BY(mu_);
  int batches_ ABSL_GUARDED_BY(mu_) = 0;
};

// Everything an Append can change, read without changing anything: the
// global trie, the stored rows (trie and namespace pool, with counts), the
// pool's size, the calibration per source, and the session's next tries-only
// draft (which follows its context).
struct Snapshot {
  std::map<Path, int64_t> trie;
  Rows stored;
  int64_t ngram_entries = 0;
  std::vector<std::tuple<int64_t, int64_t, int64_t, std::vector<float>>>
      sources;
  std::vector<std::tuple<int32_t, int32_t, int, float>> draft;

  bool operator==(const Snapshot& o) const {
    return std::tie(trie, stored, ngram_entries, sources, draft) ==
           std::tie(o.trie, o.stored, o.ngram_entries, o.sources, o.draft);
  }
};

std::vector<std::tuple<int32_t, int32_t, int, float>> Shape(
    const MixedDraft& tree) {
  std::vector<std::tuple<int32_t, int32_t, int, float>> out;
  for (const DraftNode& n : tree.nodes) {
    out.emplace_back(n.token, n.parent, static_cast<int>(n.source), n.score);
  }
  return out;
}

Snapshot Take(DraftIndex& index, StoreModelSink& sink) {
  Snapshot s;
  EXPECT_TRUE(index
                  .ForEachNode("ns",
                               [&](absl::Span<const int32_t> p, int64_t c) {
                                 s.trie[Path(p.begin(), p.end())] = c;
                               })
                  .ok());
  s.stored = sink.rows();
  const std::vector<NamespaceStats> stats = index.Stats("ns");
  EXPECT_EQ(stats.size(), 1u);
  if (stats.size() == 1) {
    s.ngram_entries = stats[0].ngram_entries;
    for (const SourceStatsRow& row : stats[0].sources) {
      s.sources.emplace_back(row.proposed, row.judged, row.accepted,
                             row.depth_acceptance);
    }
  }
  absl::StatusOr<MixedDraft> tree =
      index.Retrieve("s", 16, 0, DraftMode::kHierarchical);
  EXPECT_TRUE(tree.ok()) << tree.status();
  if (tree.ok()) s.draft = Shape(*tree);
  return s;
}

// The session's mixed draft of every source (remembered for the next
// Append's calibration, counted as proposed).
MixedDraft Mixed(DraftIndex& index) {
  RetrieveRequest request;
  request.decoding_length = 16;
  request.sources = kAllSources;
  absl::StatusOr<MixedDraft> tree = index.Retrieve("s", request);
  EXPECT_TRUE(tree.ok()) << tree.status();
  return tree.value_or(MixedDraft{});
}

IndexOptions Options() {
  IndexOptions o;
  o.session_lease = absl::InfiniteDuration();
  return o;
}

PredictionInput Prediction(int32_t root_after, const Path& tokens,
                           const Path& parents, int32_t k, const Path& top) {
  PredictionInput p;
  p.root_after = root_after;
  p.tokens = tokens;
  p.parents = parents;
  p.k = k;
  p.top_tokens = top;
  return p;
}

// One index with one session "s" in namespace "ns" that reported
// kFirst (10 tokens, offset 0) and then got a mixed draft, so that the
// next report judges it.
class OffsetTest : public ::testing::Test {
 protected:
  struct Replica {
    StoreModelSink sink;
    DraftIndex index{Options(), &sink};
  };

  void Prepare(Replica& r) const {
    ASSERT_TRUE(r.index.OpenSession("s", "ns", kVocab, kPrompt, 3).ok());
    StepInput first;
    first.accepted = kFirst;
    first.accepted_offset = 0;
    AppendResult result;
    ASSERT_TRUE(r.index.Append("s", first, nullptr, &result).ok());
    EXPECT_EQ(result.skipped_tokens, 0);
    Mixed(r.index);
  }

  // The report after kFirst: kSecond at offset 10, the tree it verified
  // (root_after 0, so it also says which draft nodes were verified), an
  // empty tree below its last token (root_after 5) and an n-gram.
  StepInput Second() const {
    StepInput in;
    in.accepted = kSecond;
    in.accepted_offset = 10;
    in.predictions.push_back(
        Prediction(0, kTreeTokens, kTreeParents, 2, kTreeTop));
    in.predictions.push_back(Prediction(5, kNone, kNone, 1, kTailTop));
    in.ngrams.push_back(kNgram);
    return in;
  }

  // Appends `in`; returns the tokens skipped, -1 on error.
  static int64_t Apply(Replica& r, const StepInput& in) {
    AppendResult result;
    bool durable = false;
    const absl::Status s = r.index.Append(
        "s", in, [&](absl::Status d) { durable = d.ok(); }, &result);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(durable);  // The model sink acknowledges at once.
    return s.ok() ? result.skipped_tokens : -1;
  }

  const Path kPrompt = {1, 2, 3, 4, 5, 6};
  const Path kFirst = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  const Path kSecond = {20, 21, 22, 23, 24};
  const Path kTreeTokens = {20, 30};
  const Path kTreeParents = {-1, 0};
  const Path kTreeTop = {20, 40, 21, 41, 50, 51};
  const Path kNone = {};
  const Path kTailTop = {25};
  const Path kNgram = {60, 61, 62};
};

TEST_F(OffsetTest, TheSameReportTwiceIsAppliedOnce) {
  Replica twice, once;
  Prepare(twice);
  Prepare(once);
  const StepInput second = Second();

  EXPECT_EQ(Apply(twice, second), 0);
  const int batches = twice.sink.batches();
  // Its answer was lost: the same report again. Nothing is applied (no
  // windows, no pool entries, nothing to the sink), every token skipped.
  EXPECT_EQ(Apply(twice, second), 5);
  EXPECT_EQ(twice.sink.batches(), batches);
  EXPECT_EQ(Apply(once, second), 0);
  EXPECT_EQ(Shape(Mixed(twice.index)), Shape(Mixed(once.index)));
  EXPECT_EQ(Take(twice.index, twice.sink), Take(once.index, once.sink));
  ASSERT_FALSE(once.sink.rows().empty());
  // Both judge the draft they answered with by the next report alike.
  StepInput third;
  const Path next = {25, 26};
  third.accepted = next;
  third.accepted_offset = 15;
  EXPECT_EQ(Apply(twice, third), 0);
  EXPECT_EQ(Apply(once, third), 0);
  EXPECT_EQ(Take(twice.index, twice.sink), Take(once.index, once.sink));

  // The check bites: without the offset the report is applied twice.
  Replica unset;
  Prepare(unset);
  StepInput old = Second();
  old.accepted_offset.reset();
  EXPECT_EQ(Apply(unset, old), 0);
  EXPECT_EQ(Apply(unset, old), 0);
  third.accepted_offset.reset();
  EXPECT_EQ(Apply(unset, third), 0);
  EXPECT_FALSE(Take(unset.index, unset.sink) == Take(once.index, once.sink));
}

// A lost report merged into the next one: only the tokens past what the
// session holds are applied; the trees rooted in the held tokens and the
// n-grams came with the lost report and are not applied again; a tree
// rooted at the last held token is shifted onto the new tokens.
TEST_F(OffsetTest, AMergedRetryAppliesOnlyTheNewPart) {
  Replica merged, separate;
  Prepare(merged);
  Prepare(separate);
  const StepInput second = Second();
  EXPECT_EQ(Apply(merged, second), 0);
  EXPECT_EQ(Apply(separate, second), 0);

  const Path both = {20, 21, 22, 23, 24, 25, 26, 27};
  const Path new_tree = {25}, new_parents = {-1}, new_top = {25, 26};
  const Path new_ngram = {70, 71};
  StepInput retry;
  retry.accepted = both;
  retry.accepted_offset = 10;
  retry.predictions.push_back(
      Prediction(0, kTreeTokens, kTreeParents, 2, kTreeTop));
  retry.predictions.push_back(Prediction(5, new_tree, new_parents, 1, new_top));
  retry.ngrams.push_back(kNgram);
  retry.ngrams.push_back(new_ngram);
  EXPECT_EQ(Apply(merged, retry), 5);

  const Path rest = {25, 26, 27};
  StepInput only_new;
  only_new.accepted = rest;
  only_new.accepted_offset = 15;
  only_new.predictions.push_back(
      Prediction(0, new_tree, new_parents, 1, new_top));
  EXPECT_EQ(Apply(separate, only_new), 0);

  EXPECT_EQ(Take(merged.index, merged.sink),
            Take(separate.index, separate.sink));
  EXPECT_EQ(Shape(Mixed(merged.index)), Shape(Mixed(separate.index)));
}

TEST_F(OffsetTest, AnOffsetPastWhatIsHeldFailsAndChangesNothing) {
  Replica gap, clean;
  Prepare(gap);
  Prepare(clean);
  const Snapshot before = Take(gap.index, gap.sink);
  StepInput ahead = Second();
  ahead.accepted_offset = 12;  // Tokens 10 and 11 never arrived.
  bool ran = false;
  absl::Status s =
      gap.index.Append("s", ahead, [&](absl::Status) { ran = true; });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  for (const char* needle :
       {"accepted_offset is 12", "holds 10 accepted tokens", "\"s\"",
        "reopen the session"}) {
    EXPECT_NE(s.message().find(needle), absl::string_view::npos)
        << s.message() << " lacks " << needle;
  }
  EXPECT_FALSE(ran);
  EXPECT_EQ(Take(gap.index, gap.sink), before);

  StepInput negative = Second();
  negative.accepted_offset = -1;
  s = gap.index.Append("s", negative, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("accepted_offset is -1"), absl::string_view::npos)
      << s.message();
  EXPECT_EQ(Take(gap.index, gap.sink), before);

  // The session is as it was: the right offset then applies, and judges
  // the draft sent before, as on an index that never saw the bad reports.
  EXPECT_EQ(Apply(gap, Second()), 0);
  EXPECT_EQ(Apply(clean, Second()), 0);
  EXPECT_EQ(Take(gap.index, gap.sink), Take(clean.index, clean.sink));
}

TEST_F(OffsetTest, WithoutAnOffsetEveryTokenIsAppliedAsSent) {
  Replica unset, legacy;
  Prepare(unset);
  Prepare(legacy);
  StepInput old = Second();
  old.accepted_offset.reset();
  old.predictions.clear();
  old.ngrams.clear();
  EXPECT_EQ(Apply(unset, old), 0);
  EXPECT_EQ(Apply(unset, old), 0);
  // The token-only Append that predates offsets, twice.
  ASSERT_TRUE(legacy.index.Append("s", kSecond, nullptr).ok());
  ASSERT_TRUE(legacy.index.Append("s", kSecond, nullptr).ok());
  EXPECT_EQ(Take(unset.index, unset.sink), Take(legacy.index, legacy.sink));
  // Twice means twice: the window "20 21 22 23" was counted two times.
  EXPECT_EQ(Take(unset.index, unset.sink).trie.at(Path{20, 21, 22, 23}), 2);
}

TEST_F(OffsetTest, RacingCopiesOfOneReportApplyItOnce) {
  Replica raced, once;
  Prepare(raced);
  Prepare(once);
  const StepInput second = Second();
  constexpr int kCopies = 8;
  std::vector<int64_t> skipped(kCopies, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCopies; ++i) {
    threads.emplace_back([&, i] { skipped[i] = Apply(raced, second); });
  }
  for (std::thread& t : threads) t.join();
  int applied = 0;
  for (int64_t s : skipped) {
    EXPECT_TRUE(s == 0 || s == 5) << s;
    applied += s == 0;
  }
  EXPECT_EQ(applied, 1);
  EXPECT_EQ(Apply(once, second), 0);
  EXPECT_EQ(Take(raced.index, raced.sink), Take(once.index, once.sink));
}

TEST_F(OffsetTest, AReopenedSessionCountsFromZero) {
  Replica r;
  Prepare(r);
  ASSERT_TRUE(r.index.CloseSession("s").ok());
  ASSERT_TRUE(r.index.OpenSession("s", "ns", kVocab, kPrompt, 3).ok());
  StepInput stale = Second();  // Offset 10: the old session's count.
  absl::Status s = r.index.Append("s", stale, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("holds 0 accepted tokens"),
            absl::string_view::npos)
      << s.message();
  StepInput fresh;
  fresh.accepted = kFirst;
  fresh.accepted_offset = 0;
  EXPECT_EQ(Apply(r, fresh), 0);
  EXPECT_EQ(Apply(r, fresh), 10);
}

}  // namespace
}  // namespace lookahead::draftsvc
