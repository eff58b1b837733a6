// API keys on verifysvc's gRPC front with real processes: every
// GenerationService RPC needs "authorization: Bearer <key>"; a key reaches
// only its namespace (on draftsvc too); a key over its rate is
// RESOURCE_EXHAUSTED with a retry-after trailer; health stays open; keys
// never reach the logs. And the loopback rule: a server without
// authentication refuses a non-loopback --host unless
// --allow_unauthenticated.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/draft.grpc.pb.h"
#include "proto/generation.grpc.pb.h"
#include "tests/secure_servers.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;
using ::testing::HasSubstr;
using ::testing::Not;

const char kKeyA[] = "key-a-5f0c8e1d2b3a49687756";
const char kKeyB[] = "key-b-9a8b7c6d5e4f30211f2e";
const char kKeyRated[] = "key-r-0011223344556677aabb";
const char kWrongKey[] = "key-x-ffffffffffffffffffff";

// A client context carrying `key` (none if empty), with a deadline.
std::unique_ptr<grpc::ClientContext> Context(const std::string& key,
                                             int seconds = 20) {
  auto context = std::make_unique<grpc::ClientContext>();
  if (!key.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", key));
  }
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(seconds));
  return context;
}

v1::GenerateRequest Request(const std::string& name_space) {
  v1::GenerateRequest request;
  request.set_text(
      "alpha beta gamma delta. alpha beta gamma delta. alpha beta gamma");
  request.set_max_new_tokens(12);
  request.mutable_draft()->set_namespace_(name_space);
  return request;
}

grpc::Status Generate(v1::GenerationService::Stub& stub,
                      const v1::GenerateRequest& request,
                      const std::string& key) {
  auto context = Context(key, 120);
  auto stream = stub.Generate(context.get(), request);
  v1::GenerateResponse response;
  while (stream->Read(&response)) {
  }
  return stream->Finish();
}

// Every unary RPC, with `key`.
std::vector<std::pair<std::string, grpc::Status>> Unary(
    v1::GenerationService::Stub& stub, const std::string& key) {
  std::vector<std::pair<std::string, grpc::Status>> out;
  {
    v1::TokenizeRequest request;
    request.set_text("hello");
    v1::TokenizeResponse response;
    out.push_back(
        {"Tokenize", stub.Tokenize(Context(key).get(), request, &response)});
  }
  {
    v1::DetokenizeRequest request;
    request.add_ids(1);
    v1::DetokenizeResponse response;
    out.push_back({"Detokenize",
                   stub.Detokenize(Context(key).get(), request, &response)});
  }
  v1::ModelInfoResponse info;
  out.push_back({"ModelInfo", stub.ModelInfo(Context(key).get(), {}, &info)});
  v1::GenerationStatsResponse stats;
  out.push_back({"Stats", stub.Stats(Context(key).get(), {}, &stats)});
  return out;
}

// Namespaces draftsvc holds with output-trie nodes.
std::vector<std::string> DraftNamespaces(int draft_port) {
  v1::StatsResponse stats;
  auto stub = v1::DraftService::NewStub(TestChannel(draft_port));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  EXPECT_TRUE(stub->Stats(&context, {}, &stats).ok());
  std::vector<std::string> names;
  for (const v1::NamespaceStats& ns : stats.namespaces()) {
    if (ns.output_nodes() > 0) names.push_back(ns.namespace_());
  }
  return names;
}

TEST(ServiceAuthTest, KeysGuardEveryRpcAndBindNamespaces) {
  const std::string dir = TestDir("auth");
  const std::string keys_file = dir + "/keys";
  std::ofstream(keys_file) << "# test keys\n"
                           << kKeyA << " team-a\n"
                           << kKeyB << " team-b\n"
                           << kKeyRated << " team-r 0.2\n";
  int draft_port = 0;
  auto draftsvc =
      StartServer("DRAFTSVC_BINARY", dir, "draftsvc",
                  {absl::StrCat("--db_path=", dir, "/db")}, &draft_port);
  ASSERT_GT(draft_port, 0) << draftsvc->Log();
  // Keys satisfy the loopback rule: 0.0.0.0 without --allow_unauthenticated.
  int port = 0;
  auto verifysvc = StartServer(
      "VERIFYSVC_BINARY", dir, "verifysvc",
      {"--host=0.0.0.0", absl::StrCat("--draftsvc=127.0.0.1:", draft_port),
       "--api_keys_file=" + keys_file, "--max_context_tokens=512"},
      &port);
  ASSERT_GT(port, 0) << verifysvc->Log();
  auto channel = TestChannel(port);
  auto stub = v1::GenerationService::NewStub(channel);

  // No key or a wrong one: UNAUTHENTICATED on every RPC.
  for (const std::string& key : {std::string(), std::string(kWrongKey)}) {
    EXPECT_EQ(Generate(*stub, Request(""), key).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << key;
    for (const auto& [rpc, status] : Unary(*stub, key)) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << rpc << " with key \"" << key << "\": " << status.error_message();
      EXPECT_THAT(status.error_message(), Not(HasSubstr(kWrongKey)));
    }
  }
  {  // Not the Bearer scheme.
    auto context = Context("");
    context->AddMetadata("authorization", absl::StrCat("Basic ", kKeyA));
    v1::ModelInfoResponse info;
    grpc::Status status = stub->ModelInfo(context.get(), {}, &info);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(status.error_message(), HasSubstr("Bearer"));
  }
  // Health checks need no key.
  EXPECT_TRUE(HealthCheck(channel).ok());

  // The right key: every RPC works.
  for (const auto& [rpc, status] : Unary(*stub, kKeyA)) {
    EXPECT_TRUE(status.ok()) << rpc << ": " << status.error_message();
  }
  // Key A naming B's namespace: PERMISSION_DENIED naming both.
  grpc::Status denied = Generate(*stub, Request("team-b"), kKeyA);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(denied.error_message(), HasSubstr("\"team-a\""));
  EXPECT_THAT(denied.error_message(), HasSubstr("\"team-b\""));
  EXPECT_EQ(Generate(*stub, Request("default"), kKeyA).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // Key A with no namespace writes into team-a only; key B names its own.
  grpc::Status a = Generate(*stub, Request(""), kKeyA);
  ASSERT_TRUE(a.ok()) << a.error_message();
  grpc::Status b = Generate(*stub, Request("team-b"), kKeyB);
  ASSERT_TRUE(b.ok()) << b.error_message();
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) {  // Steps reach draftsvc asynchronously.
    names = DraftNamespaces(draft_port);
    if (names.size() >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("team-a", "team-b"));

  // Rate 0.2/s (burst 1): the second call in a row is refused with a
  // retry-after trailer of about 5 s; other keys are unaffected.
  {
    v1::ModelInfoResponse info;
    EXPECT_TRUE(stub->ModelInfo(Context(kKeyRated).get(), {}, &info).ok());
    auto context = Context(kKeyRated);
    grpc::Status limited = stub->ModelInfo(context.get(), {}, &info);
    EXPECT_EQ(limited.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(limited.error_message(), HasSubstr("retry after"));
    auto trailer = context->GetServerTrailingMetadata().find("retry-after");
    ASSERT_NE(trailer, context->GetServerTrailingMetadata().end());
    const std::string seconds(trailer->second.data(), trailer->second.size());
    EXPECT_TRUE(seconds == "5" || seconds == "4") << seconds;
    EXPECT_EQ(Generate(*stub, Request(""), kKeyRated).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_TRUE(stub->ModelInfo(Context(kKeyA).get(), {}, &info).ok());
  }

  // No key reaches either log.
  for (const std::string& log : {verifysvc->Log(), draftsvc->Log()}) {
    for (const char* key : {kKeyA, kKeyB, kKeyRated, kWrongKey}) {
      EXPECT_THAT(log, Not(HasSubstr(key)));
    }
  }
}

TEST(ServiceAuthTest, UnauthenticatedServersListenOnLoopbackOnly) {
  const std::string dir = TestDir("loopback");
  int exit_status = 0;
  std::string log = StartupFailure("VERIFYSVC_BINARY", dir, "verifysvc",
                                   {"--host=0.0.0.0"}, &exit_status);
  EXPECT_EQ(exit_status, 1) << log;
  EXPECT_THAT(log, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(log, HasSubstr("--host=0.0.0.0"));
  EXPECT_THAT(log, HasSubstr("--api_keys_file"));
  EXPECT_THAT(log, HasSubstr("--allow_unauthenticated"));

  log = StartupFailure("DRAFTSVC_BINARY", dir, "draftsvc",
                       {"--host=::", absl::StrCat("--db_path=", dir, "/db")},
                       &exit_status);
  EXPECT_EQ(exit_status, 1) << log;
  EXPECT_THAT(log, HasSubstr("--tls_client_ca_file"));
  EXPECT_THAT(log, HasSubstr("--allow_unauthenticated"));

  // A malformed keys file names its line, never a key.
  const std::string keys_file = dir + "/keys";
  std::ofstream(keys_file) << kKeyA << " team-a\n" << kKeyB << " bad/ns\n";
  log = StartupFailure("VERIFYSVC_BINARY", dir, "verifysvc_keys",
                       {"--api_keys_file=" + keys_file}, &exit_status);
  EXPECT_EQ(exit_status, 1) << log;
  EXPECT_THAT(log, HasSubstr("--api_keys_file line 2: namespace"));
  EXPECT_THAT(log, Not(HasSubstr(kKeyB)));

  // --allow_unauthenticated is the explicit way out (draftsvc starts fast).
  int port = 0;
  auto draftsvc = StartServer("DRAFTSVC_BINARY", dir, "draftsvc_open",
                              {"--host=0.0.0.0", "--allow_unauthenticated",
                               absl::StrCat("--db_path=", dir, "/db_open")},
                              &port);
  EXPECT_GT(port, 0) << draftsvc->Log();
}

}  // namespace
}  // namespace lookahead::testing
