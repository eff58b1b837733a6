// DraftService over real gRPC on loopback, with a real RocksDB store in
// TEST_TMPDIR: happy paths, every kind of bad input (code + message), the
// sync-mode durability promise, disk-follows-memory under random traffic
// with pruning, restarts, and exactly-once Steps (accepted_offset: a Step
// retried after its answer was lost is applied once); the assistant source
// with a tiny random GGUF (engine/testing): its drafts, sessions, vocabulary
// and load errors.
#include "draftsvc/service/draft_service.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "draftsvc/sources/assistant/assistant_engine_impl.h"
#include "draftsvc/sources/assistant/assistant_model.h"
#include "draftsvc/testing/fault_file_system.h"
#include "engine/testing/engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/draft.grpc.pb.h"
#include "proto/draft.pb.h"

namespace lookahead::draftsvc {
namespace {

namespace v1 = ::lookahead::v1;
using ::testing::HasSubstr;
using NodeMap = std::map<std::pair<std::string, std::vector<int32_t>>, int64_t>;

constexpr int32_t kVocab = 1000;

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir =
      std::filesystem::path(base != nullptr ? base : "/tmp") /
      absl::StrCat("draft_service_test_", name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

class StoreCollector : public TrieScanVisitor {
 public:
  absl::Status OnNamespace(absl::string_view, int32_t) override {
    return absl::OkStatus();
  }
  absl::Status OnNode(absl::string_view ns, absl::Span<const int32_t> path,
                      int64_t count) override {
    nodes[{std::string(ns), std::vector<int32_t>(path.begin(), path.end())}] =
        count;
    return absl::OkStatus();
  }
  NodeMap nodes;
};

// A DraftServer behind a real gRPC server on 127.0.0.1, plus a client stub.
class ServiceHarness {
 public:
  static absl::StatusOr<std::unique_ptr<ServiceHarness>> Start(
      const DraftServerOptions& options) {
    auto draft = DraftServer::Open(options);
    if (!draft.ok()) return draft.status();
    auto h = std::unique_ptr<ServiceHarness>(new ServiceHarness());
    h->draft = std::move(*draft);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(h->draft->service());
    h->server = builder.BuildAndStart();
    if (h->server == nullptr || port == 0) {
      return absl::InternalError("cannot start the gRPC server");
    }
    h->stub = v1::DraftService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    return h;
  }
  ~ServiceHarness() {
    server->Shutdown();
    server->Wait();
    EXPECT_TRUE(draft->Close().ok());
  }

  grpc::Status Open(const std::string& id, const std::string& ns,
                    std::vector<int32_t> prompt, int32_t vocab = kVocab,
                    v1::OpenSessionResponse* response = nullptr) {
    v1::OpenSessionRequest request;
    request.set_session_id(id);
    request.set_namespace_(ns);
    request.set_vocab_size(vocab);
    for (int32_t t : prompt) request.add_prompt_tokens(t);
    v1::OpenSessionResponse ignored;
    grpc::ClientContext context;
    return stub->OpenSession(&context, request,
                             response != nullptr ? response : &ignored);
  }
  grpc::Status Step(const v1::StepRequest& request,
                    v1::StepResponse* response) {
    grpc::ClientContext context;
    return stub->Step(&context, request, response);
  }
  // One-entry Step; returns the entry.
  v1::SessionDraft StepOne(const std::string& id, std::vector<int32_t> tokens,
                           int32_t decoding_length, int32_t branch_length = 0,
                           int mode = v1::DRAFT_MODE_UNSPECIFIED) {
    v1::StepRequest request;
    v1::SessionStep* s = request.add_steps();
    s->set_session_id(id);
    for (int32_t t : tokens) s->add_accepted_tokens(t);
    s->set_decoding_length(decoding_length);
    s->set_branch_length(branch_length);
    s->set_mode(static_cast<v1::DraftMode>(mode));
    v1::StepResponse response;
    grpc::Status status = Step(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (response.drafts_size() != 1) return v1::SessionDraft();
    return response.drafts(0);
  }
  grpc::Status Close(const std::string& id) {
    v1::CloseSessionRequest request;
    request.set_session_id(id);
    v1::CloseSessionResponse response;
    grpc::ClientContext context;
    return stub->CloseSession(&context, request, &response);
  }
  grpc::Status Stats(const std::string& ns, v1::StatsResponse* response) {
    v1::StatsRequest request;
    request.set_namespace_(ns);
    grpc::ClientContext context;
    return stub->Stats(&context, request, response);
  }
  grpc::Status Prune(const std::string& ns, int64_t target,
                     v1::PruneResponse* response) {
    v1::PruneRequest request;
    request.set_namespace_(ns);
    request.set_target_nodes(target);
    grpc::ClientContext context;
    return stub->Prune(&context, request, response);
  }
  grpc::Status Flush() {
    v1::FlushRequest request;
    v1::FlushResponse response;
    grpc::ClientContext context;
    return stub->Flush(&context, request, &response);
  }
  NodeMap MemoryNodes(const std::string& ns) {
    NodeMap nodes;
    absl::Status s = draft->index().ForEachNode(
        ns, [&](absl::Span<const int32_t> path, int64_t count) {
          nodes[{ns, std::vector<int32_t>(path.begin(), path.end())}] = count;
        });
    EXPECT_TRUE(s.ok()) << s;
    return nodes;
  }
  NodeMap DiskNodes() {
    StoreCollector c;
    absl::Status s = draft->store().Scan(c);
    EXPECT_TRUE(s.ok()) << s;
    return c.nodes;
  }

  std::unique_ptr<DraftServer> draft;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::DraftService::Stub> stub;

 private:
  ServiceHarness() = default;
};

// Checks the DraftTree invariants of draft.proto.
void ExpectWellFormed(const v1::DraftTree& tree, int budget) {
  const int n = tree.tokens_size();
  EXPECT_LE(n, budget);
  ASSERT_EQ(tree.parents_size(), n);
  ASSERT_EQ(tree.depths_size(), n);
  ASSERT_EQ(tree.sources_size(), n);
  ASSERT_EQ(tree.scores_size(), n);
  for (int i = 0; i < n; ++i) {
    const int p = tree.parents(i);
    ASSERT_LT(p, i);
    ASSERT_GE(p, -1);
    EXPECT_EQ(tree.depths(i), p < 0 ? 1 : tree.depths(p) + 1);
    EXPECT_GE(tree.tokens(i), 0);
    EXPECT_LT(tree.tokens(i), kVocab);
  }
}

class DraftServiceTest : public ::testing::Test {
 protected:
  DraftServerOptions Options(const std::string& name, bool sync) {
    DraftServerOptions o;
    o.db_path = dir_.empty() ? (dir_ = TempDir(name)) : dir_;
    o.store.sync = sync;
    o.index.capacity_nodes = int64_t{1} << 30;
    o.index.default_branch_length = 4;
    o.index.max_branch_length = 8;
    o.index.max_step_tokens = 16;
    o.index.max_prompt_tokens = 64;
    o.index.max_decoding_length = 32;
    o.max_step_sessions = 8;
    return o;
  }
  std::unique_ptr<ServiceHarness> StartOrDie(const DraftServerOptions& o) {
    auto h = ServiceHarness::Start(o);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? std::move(*h) : nullptr;
  }
  std::string dir_;
};

TEST_F(DraftServiceTest, DraftsComeFromPromptAndOutputAndSurviveRestart) {
  DraftServerOptions options = Options("happy", /*sync=*/true);
  const std::vector<int32_t> pattern = {11, 12, 13, 14, 15, 16};
  int64_t output_nodes = 0;
  {
    auto h = StartOrDie(options);
    ASSERT_NE(h, nullptr);
    v1::OpenSessionResponse opened;
    ASSERT_TRUE(h->Open("s1", "", {7, 8, 9, 10, 7, 8}, kVocab, &opened).ok());
    EXPECT_EQ(opened.namespace_(), "default");
    EXPECT_GT(opened.prompt_nodes(), 0);
    EXPECT_EQ(opened.assistant_seconds_per_token(), 0);  // none runs
    // The prompt alone predicts 9 after "7 8".
    v1::SessionDraft d = h->StepOne("s1", {}, 8);
    EXPECT_EQ(d.code(), 0) << d.message();
    ExpectWellFormed(d.tree(), 8);
    ASSERT_GT(d.tree().tokens_size(), 0);
    EXPECT_EQ(d.tree().tokens(0), 9);
    EXPECT_EQ(d.tree().sources(0), v1::DRAFT_SOURCE_PROMPT);
    // Outputs repeating a pattern go to the global trie.
    for (int rep = 0; rep < 3; ++rep) {
      d = h->StepOne("s1", pattern, 8);
      EXPECT_EQ(d.code(), 0) << d.message();
      ExpectWellFormed(d.tree(), 8);
    }
    // Sync mode: acknowledged means already on disk.
    EXPECT_EQ(h->draft->store().PendingBatches(), 0);
    EXPECT_EQ(*h->draft->store().GetCount("default", {11, 12}), 3);
    ASSERT_TRUE(h->Close("s1").ok());
    v1::StatsResponse stats;
    ASSERT_TRUE(h->Stats("", &stats).ok());
    ASSERT_EQ(stats.namespaces_size(), 1);
    output_nodes = stats.namespaces(0).output_nodes();
    EXPECT_GT(output_nodes, 0);
    EXPECT_EQ(stats.namespaces(0).vocab_size(), kVocab);
    EXPECT_GT(stats.bytes_per_node(), 0);
    EXPECT_GT(stats.disk_bytes(), 0);
    EXPECT_EQ(h->DiskNodes(), h->MemoryNodes("default"));
  }
  auto h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->draft->rebuild_stats().nodes, output_nodes);
  v1::StatsResponse stats;
  ASSERT_TRUE(h->Stats("default", &stats).ok());
  ASSERT_EQ(stats.namespaces_size(), 1);
  EXPECT_EQ(stats.namespaces(0).output_nodes(), output_nodes);
  EXPECT_GE(stats.rebuild_seconds(), 0);
  // A new session whose context ends in "12 13" gets the pattern's
  // continuation from the rebuilt global trie.
  ASSERT_TRUE(h->Open("s2", "default", {12, 13}).ok());
  v1::SessionDraft d =
      h->StepOne("s2", {}, 8, 0, v1::DRAFT_MODE_TRIE_HIERARCHICAL);
  ASSERT_EQ(d.code(), 0) << d.message();
  ExpectWellFormed(d.tree(), 8);
  ASSERT_GT(d.tree().tokens_size(), 0);
  EXPECT_EQ(d.tree().tokens(0), 14);
  EXPECT_EQ(d.tree().sources(0), v1::DRAFT_SOURCE_OUTPUT);
  // OFF gives an empty tree; decoding_length 0 too.
  EXPECT_EQ(h->StepOne("s2", {}, 8, 0, v1::DRAFT_MODE_OFF).tree().tokens_size(),
            0);
  EXPECT_EQ(h->StepOne("s2", {}, 0).tree().tokens_size(), 0);
  // Parallel mode: chains hang off the root; still well formed.
  d = h->StepOne("s2", {}, 8, 0, v1::DRAFT_MODE_TRIE_PARALLEL);
  ASSERT_EQ(d.code(), 0) << d.message();
  ExpectWellFormed(d.tree(), 8);
}

TEST_F(DraftServiceTest, BadRequestsFailWithCodeAndMessageAndLoseNothing) {
  DraftServerOptions options = Options("bad_input", /*sync=*/false);
  NodeMap before;
  {
    auto h = StartOrDie(options);
    ASSERT_NE(h, nullptr);
    ASSERT_TRUE(h->Open("good", "ns", {1, 2, 3}).ok());
    ASSERT_EQ(h->StepOne("good", {5, 6, 7, 8, 9, 5, 6, 7}, 4).code(), 0);
    ASSERT_TRUE(h->Flush().ok());
    before = h->DiskNodes();
    ASSERT_FALSE(before.empty());

    // --- OpenSession.
    grpc::Status s = h->Open("x", "ns", {});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("prompt"));
    s = h->Open("x", "ns", std::vector<int32_t>(65, 1));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("64"));
    s = h->Open("x", "ns", {1, kVocab});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat(kVocab)));
    s = h->Open("x", "ns", {1, -3});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("-3"));
    s = h->Open("x", "bad/ns", {1});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("outside [A-Za-z0-9_.-]"));
    s = h->Open("", "ns", {1});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("session"));
    s = h->Open("x", "ns", {1}, /*vocab=*/kVocab + 1);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat(kVocab)));
    s = h->Open("good", "ns", {1});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    EXPECT_THAT(s.error_message(), HasSubstr("good"));

    // --- Step: request-level errors fail the RPC.
    v1::StepRequest request;
    v1::StepResponse response;
    s = h->Step(request, &response);  // Empty batch: fine, empty answer.
    EXPECT_TRUE(s.ok());
    EXPECT_EQ(response.drafts_size(), 0);
    request.add_steps()->set_session_id("good");
    request.add_steps()->set_session_id("other");
    request.add_steps()->set_session_id("good");
    s = h->Step(request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(),
                HasSubstr("\"good\" appears twice in one Step (entries 0 "
                          "and 2)"));
    request.Clear();
    for (int i = 0; i < 9; ++i) {
      request.add_steps()->set_session_id(absl::StrCat("s", i));
    }
    s = h->Step(request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("9 entries; at most 8"));

    // --- Step: per-session errors go into the entries; others succeed.
    request.Clear();
    auto add = [&](const std::string& id, std::vector<int32_t> tokens,
                   int decoding, int branch = 0, int mode = 0) {
      v1::SessionStep* e = request.add_steps();
      e->set_session_id(id);
      for (int32_t t : tokens) e->add_accepted_tokens(t);
      e->set_decoding_length(decoding);
      e->set_branch_length(branch);
      e->set_mode(static_cast<v1::DraftMode>(mode));
    };
    ASSERT_TRUE(h->Open("b1", "ns", {1, 2}).ok());
    ASSERT_TRUE(h->Open("b2", "ns", {1, 2}).ok());
    ASSERT_TRUE(h->Open("b3", "ns", {1, 2}).ok());
    ASSERT_TRUE(h->Open("b4", "ns", {1, 2}).ok());
    ASSERT_TRUE(h->Open("b5", "ns", {1, 2}).ok());
    add("nobody", {1}, 4);                      // 0
    add("b1", std::vector<int32_t>(17, 1), 4);  // 1
    add("b2", {3, kVocab}, 4);                  // 2
    add("b3", {3}, -1);                         // 3
    add("b4", {3}, 33);                         // 4
    add("b5", {3}, 4, -2);                      // 5
    add("good", {}, 4, 0, 99);                  // 6
    add("b1", {}, 4);                           // duplicate -> whole RPC
    s = h->Step(request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    request.mutable_steps()->RemoveLast();
    add("x-ok", {}, 4);
    ASSERT_TRUE(h->Open("x-ok", "ns", {5, 6}).ok());
    s = h->Step(request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(response.drafts_size(), 8);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(response.drafts(i).session_id(), request.steps(i).session_id());
    }
    EXPECT_EQ(response.drafts(0).code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(response.drafts(0).message(), HasSubstr("nobody"));
    EXPECT_EQ(response.drafts(1).code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(response.drafts(1).message(), HasSubstr("16"));
    EXPECT_EQ(response.drafts(2).code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(response.drafts(2).message(), HasSubstr(absl::StrCat(kVocab)));
    EXPECT_EQ(response.drafts(3).code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(response.drafts(3).message(),
                HasSubstr("decoding_length -1 outside [0, 32]"));
    EXPECT_EQ(response.drafts(4).code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(response.drafts(4).message(),
                HasSubstr("decoding_length 33 outside [0, 32]"));
    EXPECT_EQ(response.drafts(5).code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(response.drafts(5).message(),
                HasSubstr("branch_length -2 outside [0, 8]"));
    EXPECT_EQ(response.drafts(6).code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(response.drafts(6).message(),
                HasSubstr("unknown draft mode 99"));
    EXPECT_EQ(response.drafts(7).code(), 0) << response.drafts(7).message();
    EXPECT_GT(response.drafts(7).tree().tokens_size(), 0);
    for (int i = 0; i < 7; ++i) {
      EXPECT_EQ(response.drafts(i).tree().tokens_size(), 0) << i;
    }

    // --- CloseSession, Prune, Stats.
    s = h->Close("nobody");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("nobody"));
    v1::PruneResponse pruned;
    s = h->Prune("ns", -5, &pruned);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("-5"));
    s = h->Prune("nowhere", 0, &pruned);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("nowhere"));
    v1::StatsResponse stats;
    s = h->Stats("nowhere", &stats);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("unknown namespace \"nowhere\""));
    s = h->Stats("bad ns", &stats);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

    // Nothing already stored was lost or changed by the failed calls (the
    // rejected entries inserted nothing).
    ASSERT_TRUE(h->Flush().ok());
    EXPECT_EQ(h->DiskNodes(), before);
    EXPECT_EQ(h->MemoryNodes("ns"), before);
  }
  // ... and the data is still there after a restart.
  auto h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->MemoryNodes("ns"), before);
}

TEST_F(DraftServiceTest, LockedOrCorruptDbFailsToOpenWithoutCrashing) {
  DraftServerOptions options = Options("locked", /*sync=*/false);
  auto h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Open("s", "ns", {1, 2, 3}).ok());
  ASSERT_EQ(h->StepOne("s", {4, 5, 6}, 2).code(), 0);
  auto second = DraftServer::Open(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(options.db_path));
  EXPECT_THAT(second.status().message(),
              HasSubstr("is locked: another store in this process"));
  // The running server is unaffected.
  EXPECT_EQ(h->StepOne("s", {4, 5, 6}, 2).code(), 0);
  ASSERT_TRUE(h->Flush().ok());
  NodeMap before = h->DiskNodes();
  h.reset();

  // A file where the directory should be.
  DraftServerOptions file_options = options;
  file_options.db_path = TempDir("not_a_dir");
  { std::ofstream(file_options.db_path) << "x"; }
  auto bad = DraftServer::Open(file_options);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bad.status().message(), HasSubstr(file_options.db_path));

  // Corrupt CURRENT: clear error, and the files are left alone.
  const std::string current = options.db_path + "/CURRENT";
  std::string saved;
  {
    std::ifstream in(current);
    std::getline(in, saved);
  }
  { std::ofstream(current, std::ios::trunc) << "garbage"; }
  bad = DraftServer::Open(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bad.status().message(), HasSubstr("corrupt"));
  EXPECT_THAT(bad.status().message(), HasSubstr(options.db_path));
  { std::ofstream(current, std::ios::trunc) << saved << "\n"; }
  h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->DiskNodes(), before);
}

TEST_F(DraftServiceTest, BadIndexOptionsFailBeforeTheStoreIsTouched) {
  DraftServerOptions options = Options("bad_options", /*sync=*/false);
  options.index.low_water = 1.5;
  auto bad = DraftServer::Open(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("low_water 1.5"));
  options.index.low_water = 0.75;
  EXPECT_NE(StartOrDie(options), nullptr);
}

// Calls whose clients give up (deadlines far too short) are still finished
// exactly once: otherwise the harness's Shutdown() (no deadline) would wait
// forever for their reactors. Nothing they inserted is half-written.
TEST_F(DraftServiceTest, CancelledCallsAreFinishedAndShutdownCompletes) {
  DraftServerOptions options = Options("cancelled", /*sync=*/true);
  auto h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Open("s", "ns", {1, 2, 3}).ok());
  int deadline_exceeded = 0;
  for (int i = 0; i < 200; ++i) {
    v1::StepRequest request;
    v1::SessionStep* step = request.add_steps();
    step->set_session_id("s");
    for (int t = 0; t < 6; ++t) step->add_accepted_tokens((i + t) % 7);
    step->set_decoding_length(8);
    v1::StepResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::microseconds(i % 4 == 0 ? 1 : 300));
    grpc::Status s = h->stub->Step(&context, request, &response);
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      ++deadline_exceeded;
    } else {
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
  }
  EXPECT_GT(deadline_exceeded, 0);
  ASSERT_TRUE(h->Flush().ok());
  EXPECT_EQ(h->DiskNodes(), h->MemoryNodes("ns"));
  h.reset();  // Shutdown() returns only if every call was finished.
}

// Random traffic from several client threads with a small capacity, so that
// pruning (deletes + count decay) happens: after each round the store must
// equal the in-memory tries exactly, and a restart must rebuild them.
TEST_F(DraftServiceTest, DiskFollowsMemoryUnderRandomTrafficAndPruning) {
  for (bool sync : {false, true}) {
    SCOPED_TRACE(sync ? "sync" : "periodic");
    dir_.clear();
    DraftServerOptions options =
        Options(sync ? "random_sync" : "random_periodic", sync);
    options.index.capacity_nodes = 150;
    std::unique_ptr<ServiceHarness> h = StartOrDie(options);
    ASSERT_NE(h, nullptr);
    const std::vector<std::string> namespaces = {"alpha", "beta"};
    int64_t beta_prunes = 0;
    for (int round = 0; round < 4; ++round) {
      std::vector<std::thread> clients;
      for (int c = 0; c < 3; ++c) {
        clients.emplace_back([&, c] {
          std::mt19937 rng(round * 10 + c + (sync ? 100 : 0));
          const std::string id = absl::StrCat("r", round, "c", c);
          const std::string& ns = namespaces[c % 2];
          std::vector<int32_t> prompt(8);
          for (auto& t : prompt) t = rng() % 30;
          ASSERT_TRUE(h->Open(id, ns, prompt).ok());
          for (int step = 0; step < 40; ++step) {
            std::vector<int32_t> tokens(rng() % 6);
            for (auto& t : tokens) t = rng() % 30;
            v1::SessionDraft d = h->StepOne(id, tokens, 1 + rng() % 16);
            ASSERT_EQ(d.code(), 0) << d.message();
            ExpectWellFormed(d.tree(), 16);
          }
          ASSERT_TRUE(h->Close(id).ok());
        });
      }
      for (auto& t : clients) t.join();
      v1::PruneResponse pruned;
      ASSERT_TRUE(h->Prune("alpha", 100, &pruned).ok());
      ASSERT_TRUE(h->Flush().ok());
      NodeMap memory = h->MemoryNodes("alpha");
      NodeMap beta = h->MemoryNodes("beta");
      memory.insert(beta.begin(), beta.end());
      ASSERT_EQ(h->DiskNodes(), memory) << "round " << round;
      v1::StatsResponse stats;
      ASSERT_TRUE(h->Stats("", &stats).ok());
      EXPECT_EQ(stats.pending_batches(), 0);
      for (const v1::NamespaceStats& ns : stats.namespaces()) {
        if (ns.namespace_() == "beta") {
          beta_prunes += ns.prunes();  // Counted since the last restart.
          EXPECT_LE(ns.output_nodes(), 150);
        }
      }
      if (round % 2 == 1) {
        h.reset();
        h = StartOrDie(options);
        ASSERT_NE(h, nullptr);
        NodeMap rebuilt = h->MemoryNodes("alpha");
        NodeMap rebuilt_beta = h->MemoryNodes("beta");
        rebuilt.insert(rebuilt_beta.begin(), rebuilt_beta.end());
        ASSERT_EQ(rebuilt, memory);
      }
    }
    EXPECT_GT(beta_prunes, 0);  // Capacity was exceeded: automatic prunes.
  }
}

// Records the storage health it is told.
class RecordingHealth : public grpc::HealthCheckServiceInterface {
 public:
  void SetServingStatus(const std::string& service, bool serving) override {
    absl::MutexLock lock(&mu_);
    if (service == kStorageHealthService) calls_.push_back(serving);
  }
  void SetServingStatus(bool) override {}
  std::vector<bool> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  std::vector<bool> calls_ ABSL_GUARDED_BY(mu_);
};

// Issue 15 over real gRPC and RocksDB: Jacobi n-grams and recycled
// predictions become n-gram drafts (source and source-set bits), are
// durable in --sync mode even without a trie window, survive a restart,
// show in Stats, and bad ones fail their entry alone with nothing stored.
TEST_F(DraftServiceTest, NgramDraftsAreDurableSurviveRestartAndShowInStats) {
  DraftServerOptions options = Options("ngram", /*sync=*/true);
  {
    auto h = StartOrDie(options);
    ASSERT_NE(h, nullptr);
    ASSERT_TRUE(h->Open("a", "ns", {1, 2}).ok());
    v1::StepRequest request;
    v1::SessionStep* step = request.add_steps();
    step->set_session_id("a");
    for (int32_t t : {3, 4, 5}) step->add_accepted_tokens(t);
    v1::Ngram* ngram = step->add_ngrams();
    for (int32_t t : {70, 71, 72, 73}) ngram->add_tokens(t);
    // The verifier's tree below 4 (root_after 2): node 5, accepted; top-1
    // predictions 5 at the root, 80 at node 5.
    v1::PredictionTree* tree = step->add_predictions();
    tree->set_root_after(2);
    tree->add_tokens(5);
    tree->add_parents(-1);
    tree->set_k(1);
    tree->add_top_tokens(5);
    tree->add_top_tokens(80);
    v1::StepResponse response;
    ASSERT_TRUE(h->Step(request, &response).ok());
    ASSERT_EQ(response.drafts_size(), 1);
    EXPECT_EQ(response.drafts(0).code(), 0) << response.drafts(0).message();
    // Fsynced before the answer (the pool rows with the trie's).
    EXPECT_EQ(response.drafts(0).persistence(), v1::PERSISTENCE_DURABLE);

    v1::StatsResponse stats;
    ASSERT_TRUE(h->Stats("ns", &stats).ok());
    ASSERT_EQ(stats.namespaces_size(), 1);
    EXPECT_GT(stats.namespaces(0).ngram_entries(), 3);
    EXPECT_GT(stats.namespaces(0).ngram_keys(), 0);
    ASSERT_EQ(stats.namespaces(0).sources_size(), 4);
    EXPECT_EQ(stats.namespaces(0).sources(2).source(), v1::DRAFT_SOURCE_NGRAM);
    EXPECT_EQ(stats.namespaces(0).sources(2).depth_acceptance_size(), 16);
  }
  auto h = StartOrDie(options);  // Restart: the pool comes back from disk.
  ASSERT_NE(h, nullptr);
  v1::StatsResponse stats;
  ASSERT_TRUE(h->Stats("ns", &stats).ok());
  EXPECT_GT(stats.namespaces(0).ngram_entries(), 3);
  ASSERT_TRUE(h->Open("b", "ns", {9, 70}).ok());
  v1::StepRequest request;
  v1::SessionStep* step = request.add_steps();
  step->set_session_id("b");
  step->set_decoding_length(8);
  step->add_sources(v1::DRAFT_SOURCE_NGRAM);
  v1::StepResponse response;
  ASSERT_TRUE(h->Step(request, &response).ok());
  const v1::SessionDraft& d = response.drafts(0);
  EXPECT_EQ(d.code(), 0) << d.message();
  ExpectWellFormed(d.tree(), 8);
  ASSERT_EQ(d.tree().source_sets_size(), d.tree().tokens_size());
  ASSERT_GE(d.tree().tokens_size(), 3);
  EXPECT_EQ(d.tree().tokens(0), 71);
  EXPECT_EQ(d.tree().sources(0), v1::DRAFT_SOURCE_NGRAM);
  EXPECT_EQ(d.tree().source_sets(0), 1u << v1::DRAFT_SOURCE_NGRAM);
  EXPECT_GT(d.tree().scores(0), 0.0f);
  EXPECT_LE(d.tree().scores(0), 1.0f);
  // The recycled prediction: after "4 5" comes 80.
  ASSERT_TRUE(h->Open("c", "ns", {4, 5}).ok());
  v1::SessionDraft c = h->StepOne("c", {}, 4);
  EXPECT_EQ(c.code(), 0) << c.message();
  ASSERT_GT(c.tree().tokens_size(), 0);
  EXPECT_EQ(c.tree().tokens(0), 80);
}

TEST_F(DraftServiceTest, SourcesTheServerDoesNotRunFailNamingTheFlag) {
  DraftServerOptions options = Options("sources", /*sync=*/false);
  options.index.ngram_enabled = false;
  options.default_sources = CandidateSourceBit(CandidateSource::kPrompt) |
                            CandidateSourceBit(CandidateSource::kOutput);
  auto h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Open("a", "ns", {1, 2, 3, 1, 2}).ok());
  const std::vector<std::pair<v1::DraftSource, std::string>> cases = {
      {v1::DRAFT_SOURCE_ASSISTANT, "--assistant_model or --self_draft"},
      {v1::DRAFT_SOURCE_NGRAM, "--ngram_pool"},
  };
  for (const auto& [source, flag] : cases) {
    v1::StepRequest request;
    v1::SessionStep* step = request.add_steps();
    step->set_session_id("a");
    step->add_accepted_tokens(3);
    step->set_decoding_length(4);
    step->add_sources(v1::DRAFT_SOURCE_PROMPT);
    step->add_sources(source);
    v1::StepResponse response;
    ASSERT_TRUE(h->Step(request, &response).ok());
    EXPECT_EQ(response.drafts(0).code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(response.drafts(0).message(), HasSubstr(flag));
    EXPECT_THAT(response.drafts(0).message(),
                HasSubstr(v1::DraftSource_Name(source)));
    // Named at the open, the source fails the open, and nothing is kept:
    // the id is not open, and opens without the source succeed.
    v1::OpenSessionRequest open;
    open.set_session_id("b");
    open.set_namespace_("ns");
    open.set_vocab_size(kVocab);
    open.add_prompt_tokens(1);
    open.add_sources(v1::DRAFT_SOURCE_PROMPT);
    open.add_sources(source);
    v1::OpenSessionResponse opened;
    grpc::ClientContext context;
    const grpc::Status refused = h->stub->OpenSession(&context, open, &opened);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(refused.error_message(), HasSubstr(flag));
    EXPECT_THAT(refused.error_message(),
                HasSubstr(v1::DraftSource_Name(source)));
    EXPECT_EQ(h->StepOne("b", {}, 0).code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    v1::OpenSessionRequest open;
    open.set_session_id("b");
    open.set_namespace_("ns");
    open.set_vocab_size(kVocab);
    open.add_prompt_tokens(1);
    open.add_sources(static_cast<v1::DraftSource>(9));
    v1::OpenSessionResponse opened;
    grpc::ClientContext context;
    const grpc::Status unknown = h->stub->OpenSession(&context, open, &opened);
    EXPECT_EQ(unknown.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(unknown.error_message(), HasSubstr("sources[0] is 9"));
    open.set_sources(0, v1::DRAFT_SOURCE_OUTPUT);
    grpc::ClientContext again;
    EXPECT_TRUE(h->stub->OpenSession(&again, open, &opened).ok());
    ASSERT_TRUE(h->Close("b").ok());
  }
  v1::StepRequest request;
  v1::SessionStep* step = request.add_steps();
  step->set_session_id("a");
  step->add_sources(static_cast<v1::DraftSource>(9));
  v1::StepResponse response;
  ASSERT_TRUE(h->Step(request, &response).ok());
  EXPECT_EQ(response.drafts(0).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(response.drafts(0).message(), HasSubstr("sources[0] is 9"));
  // The tries still answer, and the 3 of the failed entries was not kept:
  // after "1 2" the prompt says 3.
  v1::SessionDraft d = h->StepOne("a", {}, 4);
  EXPECT_EQ(d.code(), 0) << d.message();
  ASSERT_GT(d.tree().tokens_size(), 0);
  EXPECT_EQ(d.tree().tokens(0), 3);
  // Bad default sources fail the start.
  options.default_sources |= CandidateSourceBit(CandidateSource::kNgram);
  EXPECT_EQ(DraftServer::Open(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DraftServiceTest, BadPredictionFailsItsEntryAloneAndStoresNothing) {
  DraftServerOptions options = Options("bad_prediction", /*sync=*/false);
  auto h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Open("a", "ns", {1, 2}).ok());
  ASSERT_TRUE(h->Open("b", "ns", {1, 2}).ok());
  v1::StepRequest request;
  v1::SessionStep* bad = request.add_steps();
  bad->set_session_id("a");
  for (int32_t t : {3, 4, 5, 6, 7, 8}) bad->add_accepted_tokens(t);
  v1::Ngram* ngram = bad->add_ngrams();
  for (int32_t t : {70, 71}) ngram->add_tokens(t);
  v1::PredictionTree* tree = bad->add_predictions();
  tree->add_tokens(5);
  tree->add_parents(-1);
  tree->set_k(1);
  tree->add_top_tokens(5);
  tree->add_top_tokens(kVocab);  // Out of range.
  v1::SessionStep* good = request.add_steps();
  good->set_session_id("b");
  v1::StepResponse response;
  ASSERT_TRUE(h->Step(request, &response).ok());
  EXPECT_EQ(response.drafts(0).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(response.drafts(0).message(),
              HasSubstr("predictions[0].top_tokens[1] is 1000, outside [0, "
                        "vocab_size=1000)"));
  EXPECT_EQ(response.drafts(1).code(), 0);
  v1::StatsResponse stats;
  ASSERT_TRUE(h->Stats("ns", &stats).ok());
  EXPECT_EQ(stats.namespaces(0).output_nodes(), 0);
  EXPECT_EQ(stats.namespaces(0).ngram_entries(), 0);
}

// Every trie node and n-gram pool entry on disk, per namespace.
class StoredRows : public TrieScanVisitor {
 public:
  // (0: trie node path, 1: [key, -1, continuation]) -> count.
  using Rows = std::map<std::pair<int, std::vector<int32_t>>, int64_t>;
  absl::Status OnNamespace(absl::string_view, int32_t) override {
    return absl::OkStatus();
  }
  absl::Status OnNode(absl::string_view ns, absl::Span<const int32_t> path,
                      int64_t count) override {
    rows[std::string(ns)][{0, {path.begin(), path.end()}}] = count;
    return absl::OkStatus();
  }
  absl::Status OnNgram(absl::string_view ns, absl::Span<const int32_t> key,
                       absl::Span<const int32_t> continuation,
                       int64_t count) override {
    std::vector<int32_t> entry(key.begin(), key.end());
    entry.push_back(-1);
    entry.insert(entry.end(), continuation.begin(), continuation.end());
    rows[std::string(ns)][{1, std::move(entry)}] = count;
    return absl::OkStatus();
  }
  std::map<std::string, Rows> rows;
};

// A Step entry of session `id` (its namespace has the same name) with
// `tokens` accepted after `offset` (< 0: unset, as clients that predate
// accepted_offset send it), asking for 8 draft nodes; `recycled` adds the
// tree the verifier verified below the previous last token (node 20, then
// accepted, with top-2 predictions) and a Jacobi n-gram.
v1::StepRequest OffsetEntry(const std::string& id,
                            const std::vector<int32_t>& tokens, int64_t offset,
                            bool recycled) {
  v1::StepRequest request;
  v1::SessionStep* step = request.add_steps();
  step->set_session_id(id);
  for (int32_t t : tokens) step->add_accepted_tokens(t);
  if (offset >= 0) step->set_accepted_offset(offset);
  step->set_decoding_length(8);
  if (recycled) {
    v1::PredictionTree* tree = step->add_predictions();
    tree->add_tokens(20);
    tree->add_parents(-1);
    tree->set_k(2);
    for (int32_t t : {20, 40, 21, 41}) tree->add_top_tokens(t);
    v1::Ngram* ngram = step->add_ngrams();
    for (int32_t t : {60, 61, 62}) ngram->add_tokens(t);
  }
  return request;
}

// A Step whose answer was lost, sent again as is (same accepted_offset), is
// applied once: namespace "twice" (got it twice) looks exactly like "once"
// (got it once, then asked for a draft with no tokens, as the retry does)
// in Stats, in memory, on disk and in its drafts; "unset" (the same reports
// without the offset) shows what the offset prevents. In --sync mode the
// retry's answer is DURABLE: it covers what the first one wrote.
TEST_F(DraftServiceTest, AStepRetriedAfterItsAnswerWasLostIsAppliedOnce) {
  auto h = StartOrDie(Options("retried_step", /*sync=*/true));
  ASSERT_NE(h, nullptr);
  const std::vector<int32_t> first = {10, 11, 12, 13, 14, 15};
  const std::vector<int32_t> second = {20, 21, 22, 23, 24};
  const std::vector<int32_t> third = {25, 26};
  const auto step = [&](const v1::StepRequest& request) {
    v1::StepResponse response;
    const grpc::Status status = h->Step(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.drafts_size(), request.steps_size());
    if (response.drafts_size() < 1) return v1::SessionDraft();
    EXPECT_EQ(response.drafts(0).code(), 0) << response.drafts(0).message();
    EXPECT_EQ(response.drafts(0).persistence(), v1::PERSISTENCE_DURABLE);
    return response.drafts(0);
  };
  for (const std::string id : {"twice", "once", "unset"}) {
    // The prompt's "23 24 25 26 27": a draft after the second report.
    ASSERT_TRUE(h->Open(id, id, {1, 2, 3, 4, 23, 24, 25, 26, 27}).ok());
    step(OffsetEntry(id, first, id == "unset" ? -1 : 0, false));
  }
  // "twice": the answer is lost (thrown away), the same Step again.
  const v1::StepRequest retried = OffsetEntry("twice", second, 6, true);
  step(retried);
  const v1::SessionDraft retry_answer = step(retried);
  // "once": reported once; then a draft for the same context.
  step(OffsetEntry("once", second, 6, true));
  const v1::SessionDraft once_answer = step(OffsetEntry("once", {}, 11, false));
  EXPECT_GT(retry_answer.tree().tokens_size(), 0);
  EXPECT_EQ(retry_answer.tree().DebugString(),
            once_answer.tree().DebugString());
  // "unset": applied twice, as clients that predate the field had it.
  step(OffsetEntry("unset", second, -1, true));
  step(OffsetEntry("unset", second, -1, true));
  // The next report: judged, windowed and drafted alike.
  EXPECT_EQ(step(OffsetEntry("twice", third, 11, false)).tree().DebugString(),
            step(OffsetEntry("once", third, 11, false)).tree().DebugString());
  step(OffsetEntry("unset", third, -1, false));

  // Stats: trie nodes, pool, per-source proposals, acceptance, calibration.
  const auto stats = [&](const std::string& ns) {
    v1::StatsResponse response;
    EXPECT_TRUE(h->Stats(ns, &response).ok());
    EXPECT_EQ(response.namespaces_size(), 1);
    v1::NamespaceStats out = response.namespaces(0);
    out.clear_namespace_();
    return out;
  };
  EXPECT_GT(stats("once").output_nodes(), 0);
  EXPECT_GT(stats("once").ngram_entries(), 0);
  EXPECT_EQ(stats("twice").DebugString(), stats("once").DebugString());
  EXPECT_GT(stats("unset").output_nodes(), stats("once").output_nodes());
  // Memory: the same nodes with the same counts; the window 20..24 once.
  const auto memory = [&](const std::string& ns) {
    std::map<std::vector<int32_t>, int64_t> nodes;
    for (const auto& [key, count] : h->MemoryNodes(ns)) {
      nodes[key.second] = count;
    }
    return nodes;
  };
  EXPECT_EQ(memory("twice"), memory("once"));
  EXPECT_EQ(memory("twice").at({20, 21, 22, 23, 24}), 1);
  EXPECT_EQ(memory("unset").at({20, 21, 22, 23, 24}), 2);
  // Disk: trie counts and pool counts.
  ASSERT_TRUE(h->Flush().ok());
  StoredRows stored;
  ASSERT_TRUE(h->draft->store().Scan(stored).ok());
  EXPECT_FALSE(stored.rows["once"].empty());
  EXPECT_EQ(stored.rows["twice"], stored.rows["once"]);
  EXPECT_NE(stored.rows["unset"], stored.rows["once"]);

  // An offset past what draftsvc holds fails its entry alone, names the
  // field and what to do, and changes nothing.
  v1::StepRequest gap = OffsetEntry("twice", {}, 13, false);
  *gap.add_steps() = OffsetEntry("once", {30}, 14, false).steps(0);
  v1::StepResponse response;
  ASSERT_TRUE(h->Step(gap, &response).ok());
  ASSERT_EQ(response.drafts_size(), 2);
  EXPECT_EQ(response.drafts(0).code(), 0) << response.drafts(0).message();
  EXPECT_EQ(response.drafts(1).code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(response.drafts(1).message(),
              ::testing::StartsWith("steps[1].accepted_offset is 14 but "
                                    "draftsvc holds 13 accepted tokens"));
  EXPECT_THAT(response.drafts(1).message(), HasSubstr("reopen the session"));
  EXPECT_EQ(response.drafts(1).tree().tokens_size(), 0);
  EXPECT_EQ(memory("once"), memory("twice"));
  EXPECT_EQ(stats("once").output_nodes(), stats("twice").output_nodes());
}

TEST_F(DraftServiceTest, SourceAndPoolMetricsAreExported) {
  DraftServerOptions options = Options("metrics", /*sync=*/false);
  metrics::Registry registry;
  options.metrics = &registry;
  auto h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Open("a", "ns", {1, 2, 3, 1, 2}).ok());
  v1::StepRequest request;
  v1::SessionStep* step = request.add_steps();
  step->set_session_id("a");
  step->set_decoding_length(4);
  v1::Ngram* ngram = step->add_ngrams();
  for (int32_t t : {70, 71, 72}) ngram->add_tokens(t);
  v1::StepResponse response;
  ASSERT_TRUE(h->Step(request, &response).ok());
  ASSERT_GT(response.drafts(0).tree().tokens_size(), 0);
  // The prompt drafted 3 1 2 after "1 2"; 3 and 1 are accepted, then 5.
  ASSERT_EQ(h->StepOne("a", {3, 1, 5}, 4).code(), 0);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("lookahead_draft_proposed_tokens_total{source="
                              "\"prompt\"} 3"));
  EXPECT_THAT(text, HasSubstr("lookahead_draft_accepted_tokens_total{source="
                              "\"prompt\"} 2"));
  EXPECT_THAT(text, HasSubstr("lookahead_draft_proposed_tokens_total{source="
                              "\"ngram\"} 0"));
  EXPECT_THAT(text, HasSubstr("lookahead_ngram_pool_entries 2"));
  EXPECT_THAT(text, HasSubstr("lookahead_ngram_pool_prunes_total 0"));
}

TEST(ParseDraftSourcesTest, NamesAndErrors) {
  EXPECT_EQ(*ParseDraftSources("trie,ngram"),
            CandidateSourceBit(CandidateSource::kPrompt) |
                CandidateSourceBit(CandidateSource::kOutput) |
                CandidateSourceBit(CandidateSource::kNgram));
  EXPECT_EQ(*ParseDraftSources(" output "),
            CandidateSourceBit(CandidateSource::kPrompt) |
                CandidateSourceBit(CandidateSource::kOutput));
  EXPECT_EQ(*ParseDraftSources("assistant"),
            CandidateSourceBit(CandidateSource::kAssistant));
  const absl::StatusOr<uint32_t> bad = ParseDraftSources("trie,bogus");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("bogus"));
  EXPECT_FALSE(ParseDraftSources("").ok());
}

// Destroying (or closing) the server detaches the health service before the
// store's last transition: here the closing store's final resume recovers,
// which must not reach a health service that may be gone (main destroys
// the grpc::Server first on its error paths).
TEST(DraftServerHealthTest, NoHealthUpdateOnceClosingStarts) {
  for (const bool close_first : {false, true}) {
    DraftServerOptions options;
    options.db_path = TempDir(absl::StrCat("health_", close_first));
    auto fs = std::make_shared<FaultFileSystem>();
    options.store.file_system = fs;
    options.store.resume_interval_ms = 3600 * 1000;  // Only the final one.
    auto draft = DraftServer::Open(options);
    ASSERT_TRUE(draft.ok()) << draft.status();
    RecordingHealth health;
    (*draft)->ReportHealthTo(&health);
    fs->Inject(StoreFault::kNoSpace);
    TrieMutationBatch batch;
    batch.name_space = "ns";
    batch.vocab_size = kVocab;
    batch.mutations.push_back({TrieMutation::Kind::kAdd, {1}, 1});
    absl::Notification written;
    (*draft)->store().Submit(std::move(batch), [&](absl::Status s) {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      written.Notify();
    });
    written.WaitForNotification();
    fs->Inject(StoreFault::kNone);
    if (close_first) {
      EXPECT_TRUE((*draft)->Close().ok());  // Recovered while closing.
    }
    draft->reset();
    EXPECT_EQ(health.calls(), (std::vector<bool>{true, false}))
        << "close_first=" << close_first;
  }
}

// ---- The assistant source (a tiny random GGUF with the namespace's vocab)
// ----

// Writes `bytes` to a file under TEST_TMPDIR; its path.
std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempDir(name) + ".gguf";
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// A tiny random Llama GGUF of `vocab` ids, written once per vocab.
const std::string& TinyAssistant(int vocab = kVocab) {
  static auto* paths = new std::map<int, std::string>();
  auto it = paths->find(vocab);
  if (it != paths->end()) return it->second;
  engine::TinyModelSpec spec;
  spec.vocab = vocab;
  spec.weight_scale = 0.5f;
  absl::StatusOr<std::string> bytes = engine::TinyModelGguf(spec);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return (*paths)[vocab] =
             WriteFile(absl::StrCat("tiny_", vocab), bytes.value_or(""));
}

class AssistantServiceTest : public DraftServiceTest {
 protected:
  DraftServerOptions AssistantOptions(const std::string& name) {
    DraftServerOptions o = Options(name, /*sync=*/false);
    o.assistant.model_path = TinyAssistant();
    o.assistant.factory = &CreateAssistantEngine;  // Linked in, no plugin.
    // No background drafts and a deadline no pass misses: every Step drafts
    // now, so the test does not depend on timing.
    o.assistant.drafter.predraft_threads = 0;
    o.assistant.step_deadline = absl::Seconds(60);
    return o;
  }
  static v1::SessionDraft StepSources(ServiceHarness& h, const std::string& id,
                                      std::vector<int32_t> tokens,
                                      std::vector<v1::DraftSource> sources,
                                      int32_t decoding_length = 6) {
    v1::StepRequest request;
    v1::SessionStep* step = request.add_steps();
    step->set_session_id(id);
    for (int32_t t : tokens) step->add_accepted_tokens(t);
    step->set_decoding_length(decoding_length);
    for (v1::DraftSource s : sources) step->add_sources(s);
    v1::StepResponse response;
    grpc::Status status = h.Step(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.drafts_size() == 1 ? response.drafts(0)
                                       : v1::SessionDraft();
  }
};

constexpr uint32_t kAssistantWireBit = uint32_t{1}
                                       << v1::DRAFT_SOURCE_ASSISTANT;

// A withheld assistant drafts nothing and runs no pass for the session;
// every entry reports the pass time spent for it since its last Step, once.
TEST_F(AssistantServiceTest, WithheldAssistantDoesNoWorkAndSecondsAreReported) {
  auto h = StartOrDie(AssistantOptions("assistant_withheld"));
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Open("w", "ns", {5, 17, 250, 999, 3, 42}).ok());
  const auto step = [&](int32_t token, bool withhold) {
    v1::StepRequest request;
    v1::SessionStep* entry = request.add_steps();
    entry->set_session_id("w");
    entry->add_accepted_tokens(token);
    entry->set_decoding_length(6);
    entry->add_sources(v1::DRAFT_SOURCE_ASSISTANT);
    if (withhold) entry->add_withheld_sources(v1::DRAFT_SOURCE_ASSISTANT);
    v1::StepResponse response;
    grpc::Status status = h->Step(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.drafts_size() == 1 ? response.drafts(0)
                                       : v1::SessionDraft();
  };
  // Drafted: its passes (prefill and chain) are reported by the next entry
  // (this one took them before drafting, when there were none yet).
  const v1::SessionDraft drafted = step(7, /*withhold=*/false);
  ASSERT_EQ(drafted.code(), 0) << drafted.message();
  EXPECT_GT(drafted.tree().tokens_size(), 0);
  const int64_t passes = h->draft->assistant_stats().forward_passes;
  ASSERT_GT(passes, 0);
  const v1::SessionDraft withheld = step(8, /*withhold=*/true);
  ASSERT_EQ(withheld.code(), 0) << withheld.message();
  EXPECT_EQ(withheld.tree().tokens_size(), 0);
  EXPECT_GT(withheld.assistant_seconds(), 0);
  EXPECT_EQ(h->draft->assistant_stats().forward_passes, passes);
  // Nothing ran since: nothing more to report.
  const v1::SessionDraft again = step(9, /*withhold=*/true);
  ASSERT_EQ(again.code(), 0) << again.message();
  EXPECT_EQ(again.assistant_seconds(), 0);
  EXPECT_EQ(h->draft->assistant_stats().forward_passes, passes);
  // Asked again, it catches up and drafts.
  const v1::SessionDraft back = step(10, /*withhold=*/false);
  ASSERT_EQ(back.code(), 0) << back.message();
  EXPECT_GT(back.tree().tokens_size(), 0);
  EXPECT_GT(h->draft->assistant_stats().forward_passes, passes);
}

TEST_F(AssistantServiceTest, AssistantDraftsTheModelsGreedyContinuation) {
  DraftServerOptions options = AssistantOptions("assistant_drafts");
  metrics::Registry registry;
  options.metrics = &registry;
  auto h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  ASSERT_NE(h->draft->assistant_engine(), nullptr);
  // The reference: the same file, loaded on its own, continues greedily.
  auto reference = AssistantModel::Load(TinyAssistant(), kVocab);
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<int32_t> context = {5, 17, 250, 999, 3, 42};
  ASSERT_TRUE(h->Open("a", "ns", context).ok());
  // Opened lazily: until an entry asks for the assistant, no model work.
  ASSERT_EQ(h->StepOne("a", {7}, 4).code(), 0);
  EXPECT_EQ(h->draft->assistant_stats().sessions, 0);
  context.push_back(7);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const std::vector<int32_t> accepted = {100 + round, 8};
    context.insert(context.end(), accepted.begin(), accepted.end());
    const v1::SessionDraft d =
        StepSources(*h, "a", accepted, {v1::DRAFT_SOURCE_ASSISTANT});
    ASSERT_EQ(d.code(), 0) << d.message();
    ExpectWellFormed(d.tree(), 6);
    ASSERT_GT(d.tree().tokens_size(), 0);
    for (int i = 0; i < d.tree().tokens_size(); ++i) {
      EXPECT_EQ(d.tree().source_sets(i), kAssistantWireBit) << i;
      EXPECT_EQ(d.tree().sources(i), v1::DRAFT_SOURCE_ASSISTANT) << i;
    }
    // The best child of each chain node is the model's greedy token.
    auto greedy = (*reference)->Continue(context, 3);
    ASSERT_TRUE(greedy.ok()) << greedy.status();
    int parent = -1;
    for (int depth = 0; depth < 3; ++depth) {
      int best = -1;
      for (int i = 0; i < d.tree().tokens_size(); ++i) {
        if (d.tree().parents(i) == parent &&
            (best < 0 || d.tree().scores(i) > d.tree().scores(best))) {
          best = i;
        }
      }
      ASSERT_GE(best, 0) << "depth " << depth;
      EXPECT_EQ(d.tree().tokens(best), (*greedy)[depth]) << "depth " << depth;
      parent = best;
    }
  }
  // Mixed with the tries: the assistant's nodes are still there.
  const v1::SessionDraft mixed = StepSources(
      *h, "a", {1}, {v1::DRAFT_SOURCE_PROMPT, v1::DRAFT_SOURCE_ASSISTANT});
  ASSERT_EQ(mixed.code(), 0) << mixed.message();
  bool assistant_node = false;
  for (uint32_t set : mixed.tree().source_sets()) {
    assistant_node = assistant_node || (set & kAssistantWireBit) != 0;
  }
  EXPECT_TRUE(assistant_node);
  // An entry that does not ask for the assistant gets none of its nodes.
  const v1::SessionDraft trie = StepSources(*h, "a", {2}, {});
  ASSERT_EQ(trie.code(), 0) << trie.message();
  for (uint32_t set : trie.tree().source_sets()) {
    EXPECT_EQ(set & kAssistantWireBit, 0u);
  }
  const AssistantDrafterStats stats = h->draft->assistant_stats();
  EXPECT_GT(stats.drafted_tokens, 0);
  EXPECT_EQ(stats.sessions, 1);
  const std::string text = registry.Render();
  for (const char* series :
       {"lookahead_assistant_drafted_tokens_total",
        "lookahead_assistant_seconds_per_token",
        "lookahead_assistant_predraft_hits_total",
        "lookahead_assistant_predraft_misses_total",
        "lookahead_assistant_cached_tokens",
        "lookahead_assistant_evictions_total",
        "lookahead_assistant_draft_duration_seconds_count 4",
        "lookahead_assistant_sessions 1"}) {
    EXPECT_THAT(text, HasSubstr(series));
  }
  EXPECT_THAT(text, ::testing::Not(HasSubstr(
                        "lookahead_assistant_drafted_tokens_total 0\n")));
  // Closing the session closes its drafter session; the id can be reopened
  // and drafts from its new prompt.
  ASSERT_TRUE(h->Close("a").ok());
  EXPECT_EQ(h->draft->assistant_stats().sessions, 0);
  ASSERT_TRUE(h->Open("a", "ns", {9, 9, 9}).ok());
  const v1::SessionDraft reopened =
      StepSources(*h, "a", {}, {v1::DRAFT_SOURCE_ASSISTANT});
  ASSERT_EQ(reopened.code(), 0) << reopened.message();
  auto greedy = (*reference)->Continue({9, 9, 9}, 1);
  ASSERT_TRUE(greedy.ok());
  ASSERT_GT(reopened.tree().tokens_size(), 0);
  EXPECT_EQ(reopened.tree().tokens(0), (*greedy)[0]);
  // Lease expiry closes it too.
  EXPECT_EQ(h->draft->index().ExpireIdleSessions(absl::Now() + absl::Hours(1)),
            1);
  EXPECT_EQ(h->draft->assistant_stats().sessions, 0);
}

// The assistant follows only the tokens a Step applies: a Step retried
// after its answer was lost (same accepted_offset) does not advance it
// again, so its draft still continues the real context greedily.
TEST_F(AssistantServiceTest, ARetriedStepAdvancesTheAssistantOnce) {
  auto h = StartOrDie(AssistantOptions("assistant_retried"));
  ASSERT_NE(h, nullptr);
  auto reference = AssistantModel::Load(TinyAssistant(), kVocab);
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<int32_t> context = {5, 17, 250, 999, 3, 42};
  ASSERT_TRUE(h->Open("r", "ns", context).ok());
  const auto step = [&](const std::vector<int32_t>& tokens, int64_t offset) {
    v1::StepRequest request;
    v1::SessionStep* entry = request.add_steps();
    entry->set_session_id("r");
    for (int32_t t : tokens) entry->add_accepted_tokens(t);
    entry->set_accepted_offset(offset);
    entry->set_decoding_length(6);
    entry->add_sources(v1::DRAFT_SOURCE_ASSISTANT);
    v1::StepResponse response;
    const grpc::Status status = h->Step(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.drafts_size() == 1 ? response.drafts(0)
                                       : v1::SessionDraft();
  };
  ASSERT_EQ(step({7}, 0).code(), 0);  // Opens the drafter session.
  const std::vector<int32_t> second = {100, 8};
  step(second, 1);  // Its answer is lost.
  const v1::SessionDraft retried = step(second, 1);
  ASSERT_EQ(retried.code(), 0) << retried.message();
  ASSERT_GT(retried.tree().tokens_size(), 0);
  context.insert(context.end(), {7, 100, 8});
  auto greedy = (*reference)->Continue(context, 1);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  // Had the retry advanced it again, it would continue "... 100 8 100 8".
  std::vector<int32_t> doubled = context;
  doubled.insert(doubled.end(), second.begin(), second.end());
  auto wrong = (*reference)->Continue(doubled, 1);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  ASSERT_NE((*greedy)[0], (*wrong)[0]) << "the check would not bite";
  // The best root child is the model's greedy token after the context.
  int best = -1;
  for (int i = 0; i < retried.tree().tokens_size(); ++i) {
    if (retried.tree().parents(i) == -1 &&
        (best < 0 || retried.tree().scores(i) > retried.tree().scores(best))) {
      best = i;
    }
  }
  ASSERT_GE(best, 0);
  EXPECT_EQ(retried.tree().tokens(best), (*greedy)[0]);
}

TEST_F(AssistantServiceTest, AnotherVocabularyCannotAskForTheAssistant) {
  DraftServerOptions options = AssistantOptions("assistant_vocab");
  options.default_sources = CandidateSourceBit(CandidateSource::kPrompt) |
                            CandidateSourceBit(CandidateSource::kAssistant);
  auto h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  // Named at the open, the assistant fails it (a session of another
  // vocabulary could never draft from it); the id stays free.
  v1::OpenSessionRequest open;
  open.set_session_id("small");
  open.set_namespace_("other");
  open.set_vocab_size(500);
  open.add_prompt_tokens(1);
  open.add_sources(v1::DRAFT_SOURCE_ASSISTANT);
  v1::OpenSessionResponse opened;
  grpc::ClientContext context;
  const grpc::Status refused = h->stub->OpenSession(&context, open, &opened);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("500"));
  EXPECT_THAT(refused.error_message(), HasSubstr("1000"));
  // Opened without naming it, the session only fails the entries that do;
  // the assistant's cost is not reported to a session it cannot serve.
  v1::OpenSessionResponse small;
  ASSERT_TRUE(
      h->Open("small", "other", {1, 2, 3, 1, 2}, /*vocab=*/500, &small).ok());
  EXPECT_EQ(small.assistant_seconds_per_token(), 0);
  const v1::SessionDraft named = StepSources(
      *h, "small", {3}, {v1::DRAFT_SOURCE_PROMPT, v1::DRAFT_SOURCE_ASSISTANT});
  EXPECT_EQ(named.code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(named.message(), HasSubstr("500"));
  EXPECT_THAT(named.message(), HasSubstr("1000"));
  EXPECT_EQ(named.tree().tokens_size(), 0);
  // Nothing of the failed entry was applied: after "1 2" the prompt says 3.
  const v1::SessionDraft defaults = StepSources(*h, "small", {}, {});
  ASSERT_EQ(defaults.code(), 0) << defaults.message();
  ASSERT_GT(defaults.tree().tokens_size(), 0);
  EXPECT_EQ(defaults.tree().tokens(0), 3);
  for (uint32_t set : defaults.tree().source_sets()) {
    EXPECT_EQ(set & kAssistantWireBit, 0u);
  }
  EXPECT_EQ(h->draft->assistant_stats().sessions, 0);
  // A session of the model's vocabulary may name it at the open.
  open.set_session_id("named");
  open.set_namespace_("ns");
  open.set_vocab_size(kVocab);
  grpc::ClientContext named_context;
  EXPECT_TRUE(h->stub->OpenSession(&named_context, open, &opened).ok());
  // With what one of its passes costs, measured at load (no session has
  // run one yet).
  EXPECT_EQ(h->draft->assistant_stats().forward_passes, 0);
  EXPECT_GT(opened.assistant_seconds_per_token(), 0);
  EXPECT_LT(opened.assistant_seconds_per_token(), 10);
  // And uses it by default.
  ASSERT_TRUE(h->Open("full", "ns", {1, 2, 3}).ok());
  const v1::SessionDraft full = StepSources(*h, "full", {4}, {});
  ASSERT_EQ(full.code(), 0) << full.message();
  bool assistant_node = false;
  for (uint32_t set : full.tree().source_sets()) {
    assistant_node = assistant_node || (set & kAssistantWireBit) != 0;
  }
  EXPECT_TRUE(assistant_node);
}

// --assistant_head_tokens: the assistant scores only the ids below it, so
// it drafts no other (its cut logits are -infinity), and still drafts.
TEST_F(AssistantServiceTest, ACutHeadDraftsOnlyTheIdsBelowIt) {
  constexpr int kHead = 64;
  DraftServerOptions options = AssistantOptions("assistant_head");
  options.assistant.model.head_tokens = kHead;
  auto h = StartOrDie(options);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Open("c", "ns", {5, 17, 250, 999, 3, 42}).ok());
  int drafted = 0;
  for (int round = 0; round < 3; ++round) {
    const v1::SessionDraft d =
        StepSources(*h, "c", {700 + round, 900}, {v1::DRAFT_SOURCE_ASSISTANT});
    ASSERT_EQ(d.code(), 0) << d.message();
    ExpectWellFormed(d.tree(), 6);
    for (int i = 0; i < d.tree().tokens_size(); ++i) {
      EXPECT_LT(d.tree().tokens(i), kHead)
          << "round " << round << " node " << i;
    }
    drafted += d.tree().tokens_size();
  }
  EXPECT_GT(drafted, 0);
}

TEST_F(AssistantServiceTest, BadAssistantFilesFailTheStartNamingThePath) {
  engine::TinyModelSpec gpt2;
  gpt2.architecture = "gpt2";  // Llama-shaped tensors, unsupported name.
  const std::string gpt2_bytes = engine::TinyModelGguf(gpt2).value();
  std::string truncated = engine::TinyModelGguf({}).value();
  truncated.resize(truncated.size() / 2);
  struct Case {
    std::string path;
    std::vector<absl::StatusCode> codes;
  };
  const std::vector<Case> cases = {
      {TempDir("no_such_model") + "/missing.gguf",
       {absl::StatusCode::kNotFound}},
      {WriteFile("garbage", "this is not a GGUF file at all"),
       {absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument}},
      {WriteFile("truncated", truncated),
       {absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument}},
      {WriteFile("gpt2", gpt2_bytes), {absl::StatusCode::kUnimplemented}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    DraftServerOptions options = AssistantOptions("bad_assistant");
    options.assistant.model_path = c.path;
    const absl::StatusOr<std::unique_ptr<DraftServer>> server =
        DraftServer::Open(options);
    ASSERT_FALSE(server.ok());
    EXPECT_THAT(c.codes, ::testing::Contains(server.status().code()))
        << server.status();
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(c.path));
    // Nothing half-started: the store was never created.
    EXPECT_FALSE(std::filesystem::exists(options.db_path));
  }
  DraftServerOptions options = AssistantOptions("bad_assistant_options");
  options.assistant.model.layers = "first:0";
  EXPECT_EQ(DraftServer::Open(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = AssistantOptions("bad_assistant_options");
  options.assistant.drafter.max_cached_tokens = 0;
  const absl::Status drafter = DraftServer::Open(options).status();
  EXPECT_EQ(drafter.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(drafter.message()), HasSubstr("max_cached_tokens"));
  options = AssistantOptions("bad_assistant_options");
  options.assistant.model.head_tokens = -1;
  const absl::Status negative_head = DraftServer::Open(options).status();
  EXPECT_EQ(negative_head.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(negative_head.message()),
              HasSubstr("--assistant_head_tokens=-1"));
  options.assistant.model.head_tokens = kVocab + 1;
  const absl::Status long_head = DraftServer::Open(options).status();
  EXPECT_EQ(long_head.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(long_head.message()), HasSubstr("head tokens"));
  options = AssistantOptions("bad_assistant_options");
  options.assistant.step_deadline = absl::Milliseconds(-1);
  EXPECT_THAT(std::string(DraftServer::Open(options).status().message()),
              HasSubstr("--assistant_deadline_ms"));
  // Naming the assistant in --draft_sources needs one.
  options = Options("no_assistant", /*sync=*/false);
  options.default_sources = CandidateSourceBit(CandidateSource::kAssistant);
  EXPECT_THAT(std::string(DraftServer::Open(options).status().message()),
              HasSubstr("--assistant_model or --self_draft"));
}

TEST_F(AssistantServiceTest, BadSamplingIsInvalidArgumentNamingTheField) {
  auto h = StartOrDie(AssistantOptions("assistant_sampling"));
  ASSERT_NE(h, nullptr);
  struct Case {
    std::function<void(v1::DraftSampling*)> set;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::DraftSampling* s) { s->set_temperature(-0.5f); },
       "sampling.temperature"},
      {[](v1::DraftSampling* s) { s->set_temperature(NAN); },
       "sampling.temperature"},
      {[](v1::DraftSampling* s) { s->set_temperature(INFINITY); },
       "sampling.temperature"},
      {[](v1::DraftSampling* s) { s->set_top_p(1.5f); }, "sampling.top_p"},
      {[](v1::DraftSampling* s) { s->set_top_p(-0.1f); }, "sampling.top_p"},
      {[](v1::DraftSampling* s) { s->set_top_k(-1); }, "sampling.top_k"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    v1::OpenSessionRequest request;
    request.set_session_id("s");
    request.set_vocab_size(kVocab);
    request.add_prompt_tokens(1);
    c.set(request.mutable_sampling());
    v1::OpenSessionResponse response;
    grpc::ClientContext context;
    const grpc::Status status =
        h->stub->OpenSession(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr(c.field));
  }
  // None of them opened the session; a seeded one drafts.
  v1::OpenSessionRequest request;
  request.set_session_id("s");
  request.set_vocab_size(kVocab);
  for (int32_t t : {1, 2, 3}) request.add_prompt_tokens(t);
  request.mutable_sampling()->set_temperature(0.8f);
  request.mutable_sampling()->set_top_p(0.95f);
  request.mutable_sampling()->set_seed(7);
  v1::OpenSessionResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(h->stub->OpenSession(&context, request, &response).ok());
  const v1::SessionDraft d =
      StepSources(*h, "s", {4}, {v1::DRAFT_SOURCE_ASSISTANT});
  ASSERT_EQ(d.code(), 0) << d.message();
  EXPECT_GT(d.tree().tokens_size(), 0);
}

}  // namespace
}  // namespace lookahead::draftsvc
