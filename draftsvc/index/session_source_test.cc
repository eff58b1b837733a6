// DraftIndex drives its SessionSource (session_source.h): Open after
// OpenSession with the prompt and sampling, Advance with only the tokens an
// Append applied (a retried report's overlap never), Retired when the
// session ends, and Draft from Retrieve when the request names its kind and
// gives a deadline, its candidates mixed into the tree. The source here is
// a recording fake: what is under test is the index.
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "draftsvc/index/draft_index.h"
#include "draftsvc/index/session_source.h"
#include "draftsvc/mix/draft_mix.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int32_t kVocab = 1000;

class RecordingSource : public SessionSource {
 public:
  CandidateSource kind() const override { return CandidateSource::kAssistant; }
  absl::Status CheckVocabulary(int32_t vocab_size) const override {
    return vocab_size == kVocab
               ? absl::OkStatus()
               : absl::FailedPreconditionError("another vocabulary");
  }
  double RecentSecondsPerToken() override { return 0.25; }
  absl::Duration step_deadline() const override { return absl::Seconds(1); }
  void Open(absl::string_view id, int64_t serial, int32_t vocab_size,
            absl::Span<const int32_t> prompt,
            const SessionSampling& sampling) override {
    absl::MutexLock lock(&mu_);
    events.push_back(absl::StrCat("open ", id, " ", prompt.size(), " t=",
                                  sampling.temperature));
  }
  void Advance(absl::string_view id,
               absl::Span<const int32_t> accepted) override {
    absl::MutexLock lock(&mu_);
    advanced.insert(advanced.end(), accepted.begin(), accepted.end());
  }
  void Retired(absl::string_view id, int64_t serial) override {
    absl::MutexLock lock(&mu_);
    events.push_back(absl::StrCat("retired ", id));
  }
  absl::Status Check(absl::string_view id) const override {
    return absl::OkStatus();
  }
  CandidateTree Draft(absl::string_view id, int budget,
                      absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    events.push_back(absl::StrCat("draft ", id, " ", budget));
    return RankedCandidates(CandidateSource::kAssistant, {777, 778}, {-1, 0},
                            {0.9f, 0.8f});
  }
  double TakeSeconds(absl::string_view id) override { return 0.5; }

  absl::Mutex mu_;
  std::vector<std::string> events;
  std::vector<int32_t> advanced;
};

TEST(SessionSourceTest, TheIndexDrivesItsSessionSource) {
  RecordingSource source;
  IndexOptions options;
  DraftIndex index(options, nullptr);
  index.SetSessionSource(&source);
  ASSERT_TRUE(index.has_session_source());
  EXPECT_TRUE(index.CheckSourceVocabulary(kVocab).ok());
  EXPECT_FALSE(index.CheckSourceVocabulary(7).ok());
  EXPECT_EQ(index.SourceSecondsPerToken(), 0.25);
  EXPECT_EQ(index.SourceStepDeadline(), absl::Seconds(1));
  EXPECT_EQ(index.TakeSourceSeconds("s"), 0.5);

  SessionSampling sampling;
  sampling.temperature = 0.5f;
  ASSERT_TRUE(
      index.OpenSession("s", "ns", kVocab, {1, 2, 3}, 3, 0, sampling).ok());
  const std::vector<int32_t> first = {4, 5};
  const std::vector<int32_t> retried = {4, 5, 6};
  StepInput step;
  step.accepted = first;
  step.accepted_offset = 0;
  ASSERT_TRUE(index.Append("s", step, nullptr).ok());
  // A retry of the same report plus one token: only the new token goes on.
  step.accepted = retried;
  ASSERT_TRUE(index.Append("s", step, nullptr).ok());
  EXPECT_THAT(source.advanced, ElementsAre(4, 5, 6));

  // Asked by kind with a deadline, its candidates are in the tree.
  RetrieveRequest retrieve;
  retrieve.decoding_length = 4;
  retrieve.sources = CandidateSourceBit(CandidateSource::kAssistant);
  retrieve.source_deadline = absl::Now() + absl::Seconds(1);
  double seconds = -1;
  retrieve.source_draft_seconds = &seconds;
  absl::StatusOr<MixedDraft> tree = index.Retrieve("s", retrieve);
  ASSERT_TRUE(tree.ok()) << tree.status();
  ASSERT_EQ(tree->nodes.size(), 2u);
  EXPECT_EQ(tree->nodes[0].token, 777);
  EXPECT_GE(seconds, 0);
  // Without its kind, or without a deadline, it is not asked.
  retrieve.sources = CandidateSourceBit(CandidateSource::kPrompt);
  EXPECT_TRUE(index.Retrieve("s", retrieve).ok());
  retrieve.sources = CandidateSourceBit(CandidateSource::kAssistant);
  retrieve.source_deadline = absl::InfinitePast();
  tree = index.Retrieve("s", retrieve);
  ASSERT_TRUE(tree.ok());
  EXPECT_THAT(tree->nodes, IsEmpty());

  index.WarmSessionSource("s");
  ASSERT_TRUE(index.CloseSession("s", nullptr).ok());
  EXPECT_THAT(source.events, ElementsAre("open s 3 t=0.5", "draft s 4",
                                         "draft s 0", "retired s"));
}

}  // namespace
}  // namespace lookahead::draftsvc
