// DraftsvcSource in asynchronous mode against a scripted DraftService on a
// real loopback gRPC server: a step never waits for draftsvc (a held Step
// leaves Propose returning at once, its tokens buffered and reported after
// it, in order, each once, at the right offset); answers are walked along
// the tokens emitted since they were asked; a failed Step is sent again at
// the same offset. Also WalkDraft itself.

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/model/draft_tree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/draft.grpc.pb.h"
#include "verifysvc/draftsvc_client/draftsvc_client.h"
#include "verifysvc/draftsvc_client/draftsvc_source.h"

namespace lookahead::verifysvc {
namespace {

namespace v1 = ::lookahead::v1;
using ::testing::ElementsAre;
using ::testing::FloatEq;
using ::testing::IsEmpty;
using ::testing::Pointwise;

constexpr int32_t kVocab = 100;

// Answers each Step entry that asks for a draft with the chain that
// continues the session's context by counting: after token t come
// t + 1, t + 2, ... (mod kVocab), decoding_length of them, each scored
// 0.9^depth. Steps wait while held; a Step answers UNAVAILABLE (after
// recording it) while `fail_next` is set, once.
class CountingDraftService final : public v1::DraftService::Service {
 public:
  grpc::Status OpenSession(grpc::ServerContext*,
                           const v1::OpenSessionRequest* request,
                           v1::OpenSessionResponse*) override {
    absl::MutexLock lock(&mu_);
    last_[request->session_id()] = request->prompt_tokens(
        request->prompt_tokens_size() - 1);
    return grpc::Status::OK;
  }
  grpc::Status Step(grpc::ServerContext*, const v1::StepRequest* request,
                    v1::StepResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++arrived_;
    mu_.Await(absl::Condition(+[](bool* held) { return !*held; }, &held_));
    for (const v1::SessionStep& step : request->steps()) steps_.push_back(step);
    if (fail_next_) {
      fail_next_ = false;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "scripted failure");
    }
    for (const v1::SessionStep& step : request->steps()) {
      int32_t& last = last_[step.session_id()];
      if (step.accepted_tokens_size() > 0) {
        last = step.accepted_tokens(step.accepted_tokens_size() - 1);
      }
      v1::SessionDraft* draft = response->add_drafts();
      float score = 1.0f;
      for (int i = 0; i < step.decoding_length(); ++i) {
        score *= 0.9f;
        draft->mutable_tree()->add_tokens((last + 1 + i) % kVocab);
        draft->mutable_tree()->add_parents(i - 1);
        draft->mutable_tree()->add_depths(i + 1);
        draft->mutable_tree()->add_scores(score);
      }
    }
    return grpc::Status::OK;
  }
  grpc::Status CloseSession(grpc::ServerContext*,
                            const v1::CloseSessionRequest*,
                            v1::CloseSessionResponse*) override {
    return grpc::Status::OK;
  }

  void Hold(bool held) {
    absl::MutexLock lock(&mu_);
    held_ = held;
  }
  void FailNext() {
    absl::MutexLock lock(&mu_);
    fail_next_ = true;
  }
  // Steps that reached the server (held ones included).
  int arrived() const {
    absl::MutexLock lock(&mu_);
    return arrived_;
  }
  std::vector<v1::SessionStep> steps() const {
    absl::MutexLock lock(&mu_);
    return steps_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, int32_t> last_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SessionStep> steps_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_next_ ABSL_GUARDED_BY(mu_) = false;
};

class DraftsvcAsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    DraftClientOptions client;
    client.step_deadline = absl::Seconds(30);  // never the test's limit
    client.session_deadline = absl::Seconds(30);
    DraftSessionsOptions sessions;
    sessions.replica_id = "async";
    sessions.synchronous = false;
    sessions.min_backoff = absl::ZeroDuration();
    sessions.max_backoff = absl::ZeroDuration();
    source_ = DraftsvcSource::Connect(absl::StrCat("127.0.0.1:", port), kVocab,
                                      client, sessions);
  }
  void TearDown() override {
    service_.Hold(false);
    source_.reset();
    server_->Shutdown();
    server_->Wait();
  }

  int64_t Open(std::vector<int32_t> prompt) {
    DraftPolicy policy;
    policy.mode = DraftMode::kTrieHierarchical;
    policy.decoding_length = 8;
    policy.branch_length = 8;
    policy.name_space = "default";
    return source_->Open(policy, prompt);
  }

  std::vector<engine::DraftTree> Propose(int64_t handle, int budget) {
    bool called = true;
    std::vector<engine::DraftTree> trees =
        source_->Propose({DraftAsk{handle, budget}}, &called);
    EXPECT_FALSE(called) << "an asynchronous Propose waits for nothing";
    return trees;
  }

  // Proposes until a Step reached the server and was answered (the session
  // opens on a worker).
  void ProposeUntilAnswered(int64_t handle, int budget) {
    for (int attempt = 0; attempt < 5000; ++attempt) {
      Propose(handle, budget);
      if (!service_.steps().empty()) break;
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_FALSE(service_.steps().empty()) << "the session never opened";
    WaitIdle();
  }

  // Waits until no Step is in flight (its answer is in).
  void WaitIdle() {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (source_->StepInFlight() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_FALSE(source_->StepInFlight());
  }

  CountingDraftService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<DraftsvcSource> source_;
};

TEST(WalkDraftTest, ReturnsTheSubtreeBelowThePathWithConditionedScores) {
  // 10 -> 11 -> 12, 10 -> 13, 20.
  engine::DraftTree tree;
  tree.tokens = {10, 20, 11, 13, 12};
  tree.parents = {-1, -1, 0, 0, 2};
  tree.scores = {0.8f, 0.5f, 0.4f, 0.2f, 0.1f};
  tree.sources = std::vector<engine::DraftSourceTag>(
      5, engine::DraftSourceTag::kTrie);

  engine::DraftTree same = WalkDraft(tree, {});
  EXPECT_EQ(same.tokens, tree.tokens);

  engine::DraftTree below = WalkDraft(tree, {10});
  EXPECT_THAT(below.tokens, ElementsAre(11, 13, 12));
  EXPECT_THAT(below.parents, ElementsAre(-1, -1, 0));
  EXPECT_THAT(below.scores,
              Pointwise(FloatEq(), {0.5f, 0.25f, 0.125f}));
  EXPECT_EQ(below.sources.size(), 3u);

  engine::DraftTree deeper = WalkDraft(tree, {10, 11});
  EXPECT_THAT(deeper.tokens, ElementsAre(12));
  EXPECT_THAT(deeper.parents, ElementsAre(-1));

  EXPECT_THAT(WalkDraft(tree, {10, 11, 12}).tokens, IsEmpty());
  EXPECT_THAT(WalkDraft(tree, {10, 99}).tokens, IsEmpty());
  EXPECT_THAT(WalkDraft(tree, {99}).tokens, IsEmpty());
}

TEST_F(DraftsvcAsyncTest, AnAnswerIsWalkedAlongTheTokensEmittedSinceItWasAsked) {
  const int64_t handle = Open({1, 2, 3});
  ASSERT_NE(handle, 0);
  // The first answer follows token 3: 4, 5, ..., 11 (2 x the budget).
  ProposeUntilAnswered(handle, 4);
  // The pass accepted 4 and 5 (and 6 as its bonus): the tree below them,
  // cut to the budget.
  source_->Observe(handle, {4, 5, 6});
  std::vector<engine::DraftTree> trees = Propose(handle, 4);
  EXPECT_THAT(trees.at(0).tokens, ElementsAre(7, 8, 9, 10));
  EXPECT_THAT(trees.at(0).parents, ElementsAre(-1, 0, 1, 2));
  // Scores given the walked path (0.9^4 / 0.9^3 = 0.9).
  ASSERT_EQ(trees.at(0).scores.size(), 4u);
  EXPECT_FLOAT_EQ(trees.at(0).scores[0], 0.9f);
  // A path that leaves the tree gives nothing from the stale answer.
  WaitIdle();
  source_->Observe(handle, {50});
  trees = Propose(handle, 4);
  // The answer asked after 6 was 7..14; 50 leaves it.
  EXPECT_THAT(trees.at(0).tokens, IsEmpty());
  source_->Close(handle);
}

TEST_F(DraftsvcAsyncTest, AHeldDraftsvcHoldsNoStepAndLosesNoToken) {
  const int64_t handle = Open({1, 2, 3});
  ProposeUntilAnswered(handle, 4);
  const int base = service_.arrived();
  const int64_t offset = service_.steps().back().accepted_offset() +
                         service_.steps().back().accepted_tokens_size();
  service_.Hold(true);
  // This Step reaches the server and is held there.
  source_->Observe(handle, {4});
  Propose(handle, 4);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (service_.arrived() < base + 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(service_.arrived(), base + 1);
  // Steps go on while it is held (a blocking Propose would stay here for
  // the client's 30 s deadline; the server is still holding when these
  // return, which the count below shows).
  // Meanwhile the last answer (4..11 after 3) is walked while the path
  // stays in it, and gives nothing after.
  std::vector<int32_t> later;
  for (int32_t t = 5; t < 25; ++t) {
    source_->Observe(handle, {t});
    later.push_back(t);
    const std::vector<engine::DraftTree> trees = Propose(handle, 4);
    if (t < 11) {
      EXPECT_EQ(trees.at(0).tokens.at(0), t + 1);
    } else {
      EXPECT_THAT(trees.at(0).tokens, IsEmpty());
    }
  }
  EXPECT_EQ(service_.arrived(), base + 1) << "one Step in flight at a time";
  EXPECT_EQ(service_.steps().size(), static_cast<size_t>(base))
      << "the held Step is still held";
  service_.Hold(false);
  WaitIdle();
  // The buffered tokens go out with the next Step, after the held one.
  Propose(handle, 4);
  WaitIdle();
  std::vector<v1::SessionStep> steps = service_.steps();
  for (const v1::SessionStep& step : steps) {
    ASSERT_TRUE(step.has_accepted_offset());
  }
  steps.erase(steps.begin(), steps.begin() + base);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_THAT(steps[0].accepted_tokens(), ElementsAre(4));
  EXPECT_THAT(std::vector<int32_t>(steps[1].accepted_tokens().begin(),
                                   steps[1].accepted_tokens().end()),
              later);
  // Offsets count what draftsvc acknowledged before each report.
  EXPECT_EQ(steps[0].accepted_offset(), offset);
  EXPECT_EQ(steps[1].accepted_offset(), offset + 1);
  source_->Close(handle);
}

TEST_F(DraftsvcAsyncTest, AFailedStepIsSentAgainAtTheSameOffset) {
  const int64_t handle = Open({1, 2, 3});
  ProposeUntilAnswered(handle, 4);
  const int base = service_.arrived();
  const int64_t offset = service_.steps().back().accepted_offset() +
                         service_.steps().back().accepted_tokens_size();
  source_->Observe(handle, {4, 5});
  Propose(handle, 4);
  WaitIdle();
  service_.FailNext();
  source_->Observe(handle, {6, 7});
  Propose(handle, 4);  // reaches draftsvc; its answer is lost
  WaitIdle();
  source_->Observe(handle, {8});
  Propose(handle, 4);  // reports 6, 7 again with 8, at the same offset
  WaitIdle();
  std::vector<v1::SessionStep> steps = service_.steps();
  steps.erase(steps.begin(), steps.begin() + base);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[1].accepted_offset(), offset + 2);
  EXPECT_THAT(steps[1].accepted_tokens(), ElementsAre(6, 7));
  EXPECT_EQ(steps[2].accepted_offset(), offset + 2);
  EXPECT_THAT(steps[2].accepted_tokens(), ElementsAre(6, 7, 8));
  // Every round trip, the failed one included, is there for the metrics,
  // once.
  EXPECT_GE(source_->TakeCallSeconds().size(), 3u);
  EXPECT_THAT(source_->TakeCallSeconds(), IsEmpty());
  EXPECT_GE(source_->Stats().failures, 1);
  source_->Close(handle);
}

}  // namespace
}  // namespace lookahead::verifysvc
