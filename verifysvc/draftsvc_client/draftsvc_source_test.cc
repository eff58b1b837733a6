// DraftsvcSource against a scripted DraftService on a real loopback gRPC
// server: recycled predictions go out as PredictionTrees whose root_after
// points at their root among the reported tokens (across steps, capped);
// the request's sources and sampling reach draftsvc; a FAILED_PRECONDITION
// for requested sources, at the open or at a Step, becomes the sequence's
// Failure (WaitOpened waits for the open's answer, up to its deadline);
// opens pass queued closes; wire trees map their sources to engine tags.

#include "verifysvc/draftsvc_client/draftsvc_source.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
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

namespace lookahead::verifysvc {
namespace {

namespace v1 = ::lookahead::v1;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int32_t kVocab = 100;

// Records every request (and the order of opens and closes); answers each
// Step entry with a one-node tree from the n-gram pool, or with
// `refuse_code`/`refuse_message` for entries that name sources while it is
// set. Opens are refused with `refuse_open_code` while that is set, and
// wait while held.
class ScriptedDraftService final : public v1::DraftService::Service {
 public:
  grpc::Status OpenSession(grpc::ServerContext*,
                           const v1::OpenSessionRequest* request,
                           v1::OpenSessionResponse*) override {
    absl::MutexLock lock(&mu_);
    opens_.push_back(*request);
    events_.push_back(absl::StrCat("open ", request->session_id()));
    mu_.Await(absl::Condition(
        +[](bool* held) { return !*held; }, &hold_opens_));
    if (refuse_open_code_ != 0) {
      return grpc::Status(static_cast<grpc::StatusCode>(refuse_open_code_),
                          refuse_message_);
    }
    return grpc::Status::OK;
  }
  grpc::Status Step(grpc::ServerContext*, const v1::StepRequest* request,
                    v1::StepResponse* response) override {
    absl::MutexLock lock(&mu_);
    for (const v1::SessionStep& step : request->steps()) {
      steps_.push_back(step);
      v1::SessionDraft* draft = response->add_drafts();
      if (refuse_code_ != 0 && step.sources_size() > 0) {
        draft->set_code(refuse_code_);
        draft->set_message(refuse_message_);
        continue;
      }
      if (step.decoding_length() == 0) continue;
      v1::DraftTree* tree = draft->mutable_tree();
      tree->add_tokens(42);
      tree->add_parents(-1);
      tree->add_depths(1);
      tree->add_sources(v1::DRAFT_SOURCE_NGRAM);
      tree->add_source_sets((1u << v1::DRAFT_SOURCE_NGRAM) |
                            (1u << v1::DRAFT_SOURCE_OUTPUT));
    }
    return grpc::Status::OK;
  }
  grpc::Status CloseSession(grpc::ServerContext*,
                            const v1::CloseSessionRequest* request,
                            v1::CloseSessionResponse*) override {
    absl::MutexLock lock(&mu_);
    events_.push_back(absl::StrCat("close ", request->session_id()));
    return grpc::Status::OK;
  }

  void Refuse(int code, std::string message) {
    absl::MutexLock lock(&mu_);
    refuse_code_ = code;
    refuse_message_ = std::move(message);
  }
  void RefuseOpens(int code, std::string message) {
    absl::MutexLock lock(&mu_);
    refuse_open_code_ = code;
    refuse_message_ = std::move(message);
  }
  void HoldOpens(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_opens_ = hold;
  }
  // "open <session id>" and "close <session id>", in arrival order.
  std::vector<std::string> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  std::vector<v1::OpenSessionRequest> opens() const {
    absl::MutexLock lock(&mu_);
    return opens_;
  }
  std::vector<v1::SessionStep> steps() const {
    absl::MutexLock lock(&mu_);
    return steps_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<v1::OpenSessionRequest> opens_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SessionStep> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  int refuse_code_ ABSL_GUARDED_BY(mu_) = 0;
  int refuse_open_code_ ABSL_GUARDED_BY(mu_) = 0;
  std::string refuse_message_ ABSL_GUARDED_BY(mu_);
  bool hold_opens_ ABSL_GUARDED_BY(mu_) = false;
};

class DraftsvcSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    DraftClientOptions client;
    client.step_deadline = absl::Seconds(10);  // never the test's limit
    client.session_deadline = absl::Seconds(10);
    DraftSessionsOptions sessions;
    sessions.replica_id = "test";
    source_ = DraftsvcSource::Connect(absl::StrCat("127.0.0.1:", port), kVocab,
                                      client, sessions);
  }
  void TearDown() override {
    source_.reset();
    server_->Shutdown();
    server_->Wait();
  }

  static DraftPolicy Policy(engine::DraftSourceSet sources = 0) {
    DraftPolicy policy;
    policy.mode = DraftMode::kTrieHierarchical;
    policy.decoding_length = 8;
    policy.branch_length = 4;
    policy.name_space = "default";
    policy.sources = sources;
    return policy;
  }

  // Asks for drafts until the session is open and a Step reached the
  // server (opening runs on a worker); returns the tree of that Step.
  engine::DraftTree ProposeOnceOpen(int64_t handle) {
    for (int attempt = 0; attempt < 5000; ++attempt) {
      const size_t before = service_.steps().size();
      bool called = false;
      std::vector<engine::DraftTree> trees =
          source_->Propose({DraftAsk{handle, 4}}, &called);
      if (service_.steps().size() > before) return trees.at(0);
      absl::SleepFor(absl::Milliseconds(1));
    }
    ADD_FAILURE() << "the session never opened";
    return {};
  }

  engine::DraftTree Propose(int64_t handle) {
    bool called = false;
    std::vector<engine::DraftTree> trees =
        source_->Propose({DraftAsk{handle, 4}}, &called);
    EXPECT_TRUE(called);
    return trees.at(0);
  }

  static VerifiedPredictions Predictions(std::vector<int32_t> tokens,
                                         std::vector<int32_t> parents,
                                         int32_t first) {
    VerifiedPredictions p;
    p.tokens = std::move(tokens);
    p.parents = std::move(parents);
    p.k = 2;
    for (size_t row = 0; row <= p.tokens.size(); ++row) {
      p.top_tokens.push_back(first + 2 * static_cast<int32_t>(row));
      p.top_tokens.push_back(first + 2 * static_cast<int32_t>(row) + 1);
    }
    return p;
  }

  ScriptedDraftService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<DraftsvcSource> source_;
};

TEST_F(DraftsvcSourceTest, PredictionsGoOutWithTheirRootsTokens) {
  const int64_t handle = source_->Open(Policy(), {1, 2, 3});
  ASSERT_NE(handle, 0);
  EXPECT_TRUE(source_->WantsPredictions(handle));  // default sources
  ProposeOnceOpen(handle);

  // Step 1 verified a tree below 3 (the prompt's last token) and emitted
  // 10, 11; step 2 a tree below 11 and emitted 12; no RPC in between.
  source_->ObserveVerified(handle, Predictions({10, 20}, {-1, -1}, 50));
  source_->Observe(handle, {10, 11});
  source_->ObserveVerified(handle, Predictions({12}, {-1}, 60));
  source_->Observe(handle, {12});
  const engine::DraftTree tree = Propose(handle);

  const std::vector<v1::SessionStep> steps = service_.steps();
  const v1::SessionStep& step = steps.back();
  EXPECT_THAT(step.accepted_tokens(), ElementsAre(10, 11, 12));
  EXPECT_THAT(step.sources(), IsEmpty());
  ASSERT_EQ(step.predictions_size(), 2);
  const v1::PredictionTree& first = step.predictions(0);
  EXPECT_EQ(first.root_after(), 0);  // below 3, before every token
  EXPECT_THAT(first.tokens(), ElementsAre(10, 20));
  EXPECT_THAT(first.parents(), ElementsAre(-1, -1));
  EXPECT_EQ(first.k(), 2);
  EXPECT_THAT(first.top_tokens(), ElementsAre(50, 51, 52, 53, 54, 55));
  const v1::PredictionTree& second = step.predictions(1);
  EXPECT_EQ(second.root_after(), 2);  // below 11
  EXPECT_THAT(second.tokens(), ElementsAre(12));
  EXPECT_THAT(second.top_tokens(), ElementsAre(60, 61, 62, 63));

  // The next Step carries only what came after.
  source_->ObserveVerified(handle, Predictions({}, {}, 70));
  source_->Observe(handle, {13});
  Propose(handle);
  const v1::SessionStep next = service_.steps().back();
  EXPECT_THAT(next.accepted_tokens(), ElementsAre(13));
  ASSERT_EQ(next.predictions_size(), 1);
  EXPECT_EQ(next.predictions(0).root_after(), 0);  // below 12
  EXPECT_THAT(next.predictions(0).top_tokens(), ElementsAre(70, 71));

  // The answer's sources map to engine tags.
  ASSERT_EQ(tree.size(), 1);
  EXPECT_THAT(tree.sources, ElementsAre(engine::DraftSourceTag::kNgram));
  EXPECT_THAT(tree.source_sets,
              ElementsAre(engine::SourceBit(engine::DraftSourceTag::kNgram) |
                          engine::SourceBit(engine::DraftSourceTag::kTrie)));
  source_->Close(handle);
}

TEST_F(DraftsvcSourceTest, BufferedPredictionsAreCappedOldestFirst) {
  const int64_t handle = source_->Open(Policy(), {1, 2, 3});
  ProposeOnceOpen(handle);
  const int n = DraftsvcSource::kMaxPredictionTrees + 3;
  for (int i = 0; i < n; ++i) {
    source_->ObserveVerified(handle, Predictions({}, {}, i));
    source_->Observe(handle, {i});
  }
  Propose(handle);
  const v1::SessionStep step = service_.steps().back();
  EXPECT_EQ(step.accepted_tokens_size(), n);
  ASSERT_EQ(step.predictions_size(), DraftsvcSource::kMaxPredictionTrees);
  for (int j = 0; j < step.predictions_size(); ++j) {
    const int i = 3 + j;  // the three oldest were dropped
    EXPECT_EQ(step.predictions(j).root_after(), i);
    EXPECT_EQ(step.predictions(j).top_tokens(0), i);
  }
  source_->Close(handle);
}

TEST_F(DraftsvcSourceTest, JacobiNgramsGoOutWithTheNextStep) {
  const int64_t handle = source_->Open(Policy(), {1, 2, 3});
  ProposeOnceOpen(handle);
  // Too short and too long ones are left out (draftsvc would refuse the
  // whole entry); past kMaxStepNgrams the oldest go.
  source_->ObserveNgrams(handle,
                         {{4, 5}, {6}, std::vector<int32_t>(9, 7), {8, 9, 10}});
  source_->Observe(handle, {4});
  Propose(handle);
  v1::SessionStep step = service_.steps().back();
  ASSERT_EQ(step.ngrams_size(), 2);
  EXPECT_THAT(step.ngrams(0).tokens(), ElementsAre(4, 5));
  EXPECT_THAT(step.ngrams(1).tokens(), ElementsAre(8, 9, 10));

  const int n = DraftsvcSource::kMaxStepNgrams + 5;
  for (int i = 0; i < n; ++i) source_->ObserveNgrams(handle, {{i, i + 1}});
  Propose(handle);
  step = service_.steps().back();
  ASSERT_EQ(step.ngrams_size(), DraftsvcSource::kMaxStepNgrams);
  EXPECT_THAT(step.ngrams(0).tokens(), ElementsAre(5, 6));
  Propose(handle);
  EXPECT_THAT(service_.steps().back().ngrams(), IsEmpty());  // sent once

  // A sequence that may not use the pool does not feed it.
  const int64_t trie_only = source_->Open(
      Policy(engine::SourceBit(engine::DraftSourceTag::kTrie)), {1, 2});
  ProposeOnceOpen(trie_only);
  source_->ObserveNgrams(trie_only, {{1, 2}});
  Propose(trie_only);
  EXPECT_THAT(service_.steps().back().ngrams(), IsEmpty());
  source_->Close(handle);
  source_->Close(trie_only);
}

TEST_F(DraftsvcSourceTest, SourcesAndSamplingReachDraftsvc) {
  DraftPolicy policy =
      Policy(engine::SourceBit(engine::DraftSourceTag::kTrie) |
             engine::SourceBit(engine::DraftSourceTag::kAssistant));
  policy.sampling = {0.5f, 0.9f, 7, 1234};
  const int64_t handle = source_->Open(policy, {1, 2});
  EXPECT_FALSE(source_->WantsPredictions(handle));  // no n-gram pool
  ProposeOnceOpen(handle);
  source_->ObserveVerified(handle, Predictions({}, {}, 0));  // ignored
  source_->Observe(handle, {5});
  Propose(handle);

  const std::vector<v1::OpenSessionRequest> opens = service_.opens();
  ASSERT_EQ(opens.size(), 1u);
  EXPECT_FLOAT_EQ(opens[0].sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(opens[0].sampling().top_p(), 0.9f);
  EXPECT_EQ(opens[0].sampling().top_k(), 7);
  EXPECT_EQ(opens[0].sampling().seed(), 1234u);
  EXPECT_THAT(opens[0].sources(),
              ElementsAre(v1::DRAFT_SOURCE_PROMPT, v1::DRAFT_SOURCE_OUTPUT,
                          v1::DRAFT_SOURCE_ASSISTANT));
  const v1::SessionStep step = service_.steps().back();
  EXPECT_THAT(step.sources(),
              ElementsAre(v1::DRAFT_SOURCE_PROMPT, v1::DRAFT_SOURCE_OUTPUT,
                          v1::DRAFT_SOURCE_ASSISTANT));
  EXPECT_THAT(step.predictions(), IsEmpty());
  source_->Close(handle);
}

TEST_F(DraftsvcSourceTest, UnservedSourceBecomesTheSequencesFailure) {
  const std::string message =
      "source DRAFT_SOURCE_ASSISTANT is not served (start draftsvc with "
      "--assistant_model)";
  service_.Refuse(static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION),
                  message);
  const int64_t defaults = source_->Open(Policy(), {1, 2});
  const int64_t handle = source_->Open(
      Policy(engine::SourceBit(engine::DraftSourceTag::kAssistant)), {1, 2});
  ProposeOnceOpen(handle);
  EXPECT_TRUE(source_->Failure(defaults).ok());  // asked for no source
  const absl::Status failure = source_->Failure(handle);
  EXPECT_EQ(failure.code(), absl::StatusCode::kFailedPrecondition) << failure;
  EXPECT_EQ(failure.message(), absl::StrCat("draftsvc: ", message));

  // Its tokens still reach the tries, without asking for drafts again.
  source_->Observe(handle, {7, 8});
  const size_t before = service_.steps().size();
  bool called = false;
  source_->Propose({DraftAsk{handle, 4}}, &called);
  const std::vector<v1::SessionStep> steps = service_.steps();
  ASSERT_GT(steps.size(), before);
  EXPECT_THAT(steps.back().accepted_tokens(), ElementsAre(7, 8));
  EXPECT_EQ(steps.back().decoding_length(), 0);
  EXPECT_THAT(steps.back().sources(), IsEmpty());
  source_->Close(handle);
  source_->Close(defaults);
}

TEST_F(DraftsvcSourceTest, OpenRefusalOfNamedSourcesIsTheFailureAtOnce) {
  const std::string message =
      "sources[0] is DRAFT_SOURCE_ASSISTANT, which this server does not run "
      "(start it with --assistant_model or --self_draft)";
  service_.RefuseOpens(static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION),
                       message);
  const int64_t defaults = source_->Open(Policy(), {1, 2});
  const int64_t handle = source_->Open(
      Policy(engine::SourceBit(engine::DraftSourceTag::kAssistant)), {1, 2});
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  source_->WaitOpened(defaults, deadline);
  source_->WaitOpened(handle, deadline);
  EXPECT_LT(absl::Now(), deadline);  // the answers, not the deadline

  // Refused with the sources it named: the sequence's failure, before any
  // Step. Refused without any (e.g. another vocabulary in its namespace):
  // only no drafts, as before.
  const absl::Status failure = source_->Failure(handle);
  EXPECT_EQ(failure.code(), absl::StatusCode::kFailedPrecondition) << failure;
  EXPECT_EQ(failure.message(), absl::StrCat("draftsvc: ", message));
  EXPECT_TRUE(source_->Failure(defaults).ok());
  const std::vector<v1::OpenSessionRequest> opens = service_.opens();
  ASSERT_EQ(opens.size(), 2u);
  EXPECT_THAT(opens[0].sources(), IsEmpty());
  EXPECT_THAT(opens[1].sources(), ElementsAre(v1::DRAFT_SOURCE_ASSISTANT));
  // Neither session exists on draftsvc: no Step goes out for them.
  source_->Observe(handle, {7});
  bool called = false;
  source_->Propose({DraftAsk{handle, 4}, DraftAsk{defaults, 4}}, &called);
  EXPECT_THAT(service_.steps(), IsEmpty());
  source_->Close(handle);
  source_->Close(defaults);
}

TEST_F(DraftsvcSourceTest, WaitOpenedEndsAtItsDeadline) {
  service_.HoldOpens(true);
  const int64_t handle = source_->Open(
      Policy(engine::SourceBit(engine::DraftSourceTag::kAssistant)), {1, 2});
  const absl::Time start = absl::Now();
  source_->WaitOpened(handle, start + absl::Milliseconds(50));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(50));
  EXPECT_LT(waited, absl::Seconds(5));
  EXPECT_TRUE(source_->Failure(handle).ok());  // no answer yet
  // The answer comes later: WaitOpened returns with it.
  service_.RefuseOpens(static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION),
                       "not run here");
  service_.HoldOpens(false);
  source_->WaitOpened(handle, absl::Now() + absl::Seconds(10));
  EXPECT_EQ(source_->Failure(handle).code(),
            absl::StatusCode::kFailedPrecondition);
  source_->Close(handle);
}

TEST_F(DraftsvcSourceTest, OpensGoBeforeQueuedCloses) {
  const int64_t first = source_->Open(Policy(), {1, 2});
  ProposeOnceOpen(first);
  // The worker is busy with a held open while a close and another open
  // queue up behind it: the open goes first.
  service_.HoldOpens(true);
  const int64_t held = source_->Open(Policy(), {3, 4});
  for (int i = 0; i < 5000 && service_.opens().size() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(service_.opens().size(), 2u);
  source_->Close(first);
  const int64_t next = source_->Open(Policy(), {5, 6});
  service_.HoldOpens(false);
  source_->WaitOpened(next, absl::Now() + absl::Seconds(10));
  source_->Close(held);
  source_->Close(next);
  source_.reset();  // Finishes the queued closes.
  EXPECT_THAT(service_.events(),
              ElementsAre("open test/1", "open test/2", "open test/3",
                          "close test/1", "close test/2", "close test/3"));
}

TEST(DraftTreeFromProtoTest, SourcesMapToEngineTags) {
  v1::DraftTree wire;
  for (int i = 0; i < 3; ++i) {
    wire.add_tokens(i);
    wire.add_parents(i - 1);
    wire.add_depths(i + 1);
  }
  wire.add_sources(v1::DRAFT_SOURCE_PROMPT);
  wire.add_sources(v1::DRAFT_SOURCE_ASSISTANT);
  wire.add_sources(v1::DRAFT_SOURCE_UNSPECIFIED);
  auto tree = DraftTreeFromProto(wire, kVocab);
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_THAT(tree->sources, ElementsAre(engine::DraftSourceTag::kTrie,
                                         engine::DraftSourceTag::kAssistant,
                                         engine::DraftSourceTag::kUnknown));
  EXPECT_THAT(tree->source_sets, IsEmpty());
  EXPECT_EQ(tree->SourcesOf(1),
            engine::SourceBit(engine::DraftSourceTag::kAssistant));

  wire.add_source_sets(1u << v1::DRAFT_SOURCE_OUTPUT);
  auto short_sets = DraftTreeFromProto(wire, kVocab);
  EXPECT_EQ(short_sets.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(short_sets.status().message()),
              ::testing::HasSubstr("3 sources, 1 source sets"));
}

}  // namespace
}  // namespace lookahead::verifysvc
