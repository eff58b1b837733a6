// TLS between clients, verifysvc and draftsvc, with real processes and
// throwaway certificates made by `openssl`: draftsvc requires a client
// certificate from its CA (mutual TLS), so plaintext, certificate-less and
// foreign-CA clients are refused while a verifysvc with the right
// certificate drafts from it; verifysvc's gRPC front serves TLS only; bad
// or missing PEM files stop either binary at startup naming the flag.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <string>
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

constexpr int kDeadlineS = 20;

void SetDeadline(grpc::ClientContext* context, int seconds = kDeadlineS) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(seconds));
}

grpc::Status DraftStats(const std::shared_ptr<grpc::Channel>& channel,
                        v1::StatsResponse* stats) {
  grpc::ClientContext context;
  SetDeadline(&context, 5);
  return v1::DraftService::NewStub(channel)->Stats(&context, {}, stats);
}

class ServiceTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir("tls");
    absl::StatusOr<TestCerts> certs = MakeTestCerts(dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *certs;
  }

  // A draftsvc named `name` that requires client certificates from the
  // test CA; *port gets its port (0 if it did not start).
  std::unique_ptr<ServerProcess> StartMutualTlsDraftsvc(const std::string& name,
                                                        int* port) {
    return StartServer("DRAFTSVC_BINARY", dir_, name,
                       {absl::StrCat("--db_path=", dir_, "/", name, "_db"),
                        "--tls_cert_file=" + certs_.server_cert,
                        "--tls_key_file=" + certs_.server_key,
                        "--tls_client_ca_file=" + certs_.ca},
                       port);
  }

  std::string dir_;
  TestCerts certs_;
};

TEST_F(ServiceTlsTest, MutualTlsBetweenServicesAndTlsFront) {
  int draft_port = 0;
  auto draftsvc = StartMutualTlsDraftsvc("draftsvc", &draft_port);
  ASSERT_GT(draft_port, 0) << draftsvc->Log();
  EXPECT_THAT(draftsvc->Log(), HasSubstr("mutual TLS"));

  // The right CA and client certificate: served.
  v1::StatsResponse stats;
  grpc::Status ok = DraftStats(
      TestChannel(draft_port, certs_.ca, certs_.client_cert, certs_.client_key),
      &stats);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  // Plaintext, TLS without a client certificate, and a client certificate
  // from a foreign CA: the handshake fails, no RPC reaches the service.
  for (const auto& [what, channel] :
       std::vector<std::pair<std::string, std::shared_ptr<grpc::Channel>>>{
           {"plaintext", TestChannel(draft_port)},
           {"no client certificate", TestChannel(draft_port, certs_.ca)},
           {"foreign-CA client certificate",
            TestChannel(draft_port, certs_.ca, certs_.foreign_cert,
                        certs_.foreign_key)},
           {"server not trusted",
            TestChannel(draft_port, certs_.foreign_ca, certs_.client_cert,
                        certs_.client_key)}}) {
    grpc::Status refused = DraftStats(channel, &stats);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
        << what << ": " << refused.error_message();
  }

  // verifysvc: TLS front, mutual TLS to draftsvc.
  int port = 0;
  auto verifysvc = StartServer(
      "VERIFYSVC_BINARY", dir_, "verifysvc",
      {absl::StrCat("--draftsvc=127.0.0.1:", draft_port),
       "--draftsvc_ca_file=" + certs_.ca,
       "--draftsvc_client_cert_file=" + certs_.client_cert,
       "--draftsvc_client_key_file=" + certs_.client_key,
       "--tls_cert_file=" + certs_.server_cert,
       "--tls_key_file=" + certs_.server_key, "--max_context_tokens=512"},
      &port);
  ASSERT_GT(port, 0) << verifysvc->Log();
  auto front = v1::GenerationService::NewStub(TestChannel(port, certs_.ca));

  // A prompt that repeats itself drafts from its prompt trie; the outputs
  // go to the namespace's trie on draftsvc, over mutual TLS.
  v1::GenerateRequest request;
  request.set_text(
      "one two three four five six seven eight nine ten. one two three four "
      "five six seven eight nine ten. one two three four five six seven");
  request.set_max_new_tokens(24);
  request.mutable_draft()->set_namespace_("tls-ns");
  for (int round = 0; round < 2; ++round) {
    grpc::ClientContext context;
    SetDeadline(&context, 120);
    auto stream = front->Generate(&context, request);
    v1::GenerateResponse response;
    int tokens = 0;
    while (stream->Read(&response)) tokens += response.token_ids_size();
    grpc::Status finished = stream->Finish();
    ASSERT_TRUE(finished.ok()) << finished.error_message() << "\n"
                               << verifysvc->Log();
    EXPECT_GT(tokens, 0);
  }
  v1::GenerationStatsResponse verifier;
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(front->Stats(&context, {}, &verifier).ok());
  }
  EXPECT_TRUE(verifier.draftsvc_available()) << verifier.DebugString();
  EXPECT_GT(verifier.draft_tokens(), 0) << verifier.DebugString();
  EXPECT_EQ(verifier.draft_step_failures(), 0) << verifier.DebugString();
  ASSERT_TRUE(DraftStats(TestChannel(draft_port, certs_.ca, certs_.client_cert,
                                     certs_.client_key),
                         &stats)
                  .ok());
  bool found = false;
  for (const v1::NamespaceStats& ns : stats.namespaces()) {
    if (ns.namespace_() == "tls-ns") {
      found = true;
      EXPECT_GT(ns.output_nodes(), 0) << ns.DebugString();
    }
  }
  EXPECT_TRUE(found) << stats.DebugString();

  // The front serves TLS only.
  {
    auto plaintext = v1::GenerationService::NewStub(TestChannel(port));
    grpc::ClientContext context;
    SetDeadline(&context, 5);
    v1::ModelInfoResponse info;
    grpc::Status refused = plaintext->ModelInfo(&context, {}, &info);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
        << refused.error_message();
  }
  EXPECT_TRUE(HealthCheck(TestChannel(port, certs_.ca)).ok());
}

TEST_F(ServiceTlsTest, VerifierWithForeignCertificateGetsNoDrafts) {
  int draft_port = 0;
  auto draftsvc = StartMutualTlsDraftsvc("draftsvc_foreign", &draft_port);
  ASSERT_GT(draft_port, 0) << draftsvc->Log();
  int port = 0;
  auto verifysvc =
      StartServer("VERIFYSVC_BINARY", dir_, "verifysvc_foreign",
                  {absl::StrCat("--draftsvc=127.0.0.1:", draft_port),
                   "--draftsvc_ca_file=" + certs_.ca,
                   "--draftsvc_client_cert_file=" + certs_.foreign_cert,
                   "--draftsvc_client_key_file=" + certs_.foreign_key,
                   "--max_context_tokens=512"},
                  &port);
  ASSERT_GT(port, 0) << verifysvc->Log();
  // Plain decoding still answers (draftsvc is optional at run time), but no
  // draft step reaches draftsvc.
  auto front = v1::GenerationService::NewStub(TestChannel(port));
  v1::GenerateRequest request;
  request.set_text("one two three one two three one two three");
  request.set_max_new_tokens(8);
  request.mutable_draft()->set_namespace_("foreign-ns");
  grpc::ClientContext context;
  SetDeadline(&context, 120);
  auto stream = front->Generate(&context, request);
  v1::GenerateResponse response;
  while (stream->Read(&response)) {
  }
  grpc::Status finished = stream->Finish();
  ASSERT_TRUE(finished.ok()) << finished.error_message();
  v1::StatsResponse stats;
  ASSERT_TRUE(DraftStats(TestChannel(draft_port, certs_.ca, certs_.client_cert,
                                     certs_.client_key),
                         &stats)
                  .ok());
  for (const v1::NamespaceStats& ns : stats.namespaces()) {
    EXPECT_NE(ns.namespace_(), "foreign-ns") << stats.DebugString();
  }
}

TEST_F(ServiceTlsTest, BadPemFilesStopTheStartNamingTheFlag) {
  const std::string not_pem = dir_ + "/not.pem";
  std::ofstream(not_pem) << "hello\n";
  struct Case {
    std::string binary;
    std::vector<std::string> flags;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"VERIFYSVC_BINARY",
            {"--draftsvc_ca_file=" + dir_ + "/missing.pem"},
            "--draftsvc_ca_file=" + dir_ + "/missing.pem: cannot read"},
           {"VERIFYSVC_BINARY",
            {"--tls_cert_file=" + not_pem, "--tls_key_file=" + not_pem},
            "--tls_cert_file=" + not_pem + ": not a PEM file"},
           {"VERIFYSVC_BINARY",
            {"--tls_cert_file=" + certs_.server_cert},
            "needs --tls_key_file"},
           {"VERIFYSVC_BINARY",
            {"--draftsvc_client_cert_file=" + certs_.client_cert,
             "--draftsvc_ca_file=" + certs_.ca},
            "needs --draftsvc_client_key_file"},
           {"DRAFTSVC_BINARY",
            {"--tls_cert_file=" + certs_.server_cert,
             "--tls_key_file=" + certs_.server_cert},
            "--tls_key_file=" + certs_.server_cert + ": not a PEM file"},
           {"DRAFTSVC_BINARY",
            {"--tls_client_ca_file=" + certs_.ca},
            "needs --tls_cert_file and --tls_key_file"},
           // A key that does not match the certificate: the port cannot
           // serve TLS.
           {"DRAFTSVC_BINARY",
            {absl::StrCat("--db_path=", dir_, "/db_mismatch"),
             "--tls_cert_file=" + certs_.server_cert,
             "--tls_key_file=" + certs_.client_key},
            "cannot listen"},
       }) {
    int exit_status = 0;
    const std::string log =
        StartupFailure(c.binary, dir_, "bad_pem", c.flags, &exit_status);
    EXPECT_EQ(exit_status, 1) << log;
    EXPECT_THAT(log, HasSubstr(c.message)) << c.binary;
  }
}

}  // namespace
}  // namespace lookahead::testing
