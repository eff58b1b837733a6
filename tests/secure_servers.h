// Helpers of the keys and TLS tests (service_auth_test, service_tls_test):
// throwaway certificates made with the `openssl` tool at test time, TLS
// channels, and draftsvc/verifysvc children with chosen flags. Every server
// runs on 127.0.0.1 ports picked by the kernel; logs go below
// $TEST_TMPDIR/<name>. Thread-compatible.
#ifndef LOOKAHEAD_TESTS_SECURE_SERVERS_H_
#define LOOKAHEAD_TESTS_SECURE_SERVERS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/server_process.h"

namespace lookahead::testing {

// PEM files, all below one directory.
struct TestCerts {
  std::string ca;           // the CA both services trust
  std::string server_cert;  // signed by `ca`, SAN IP:127.0.0.1, localhost
  std::string server_key;
  std::string client_cert;  // signed by `ca` (clientAuth)
  std::string client_key;
  std::string foreign_ca;    // another CA nobody trusts
  std::string foreign_cert;  // a client certificate signed by foreign_ca
  std::string foreign_key;
};

// Makes fresh EC P-256 certificates in `dir` with `openssl`; INTERNAL with
// the tool's output if it fails.
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

// A channel to 127.0.0.1:port: plaintext if `ca` is empty, else TLS trusting
// `ca`, presenting `cert`/`key` if given.
std::shared_ptr<grpc::Channel> TestChannel(int port, const std::string& ca = "",
                                           const std::string& cert = "",
                                           const std::string& key = "");

// $TEST_TMPDIR/<name>, created.
std::string TestDir(const std::string& name);

// Runs a server binary (env `binary_env`, e.g. "DRAFTSVC_BINARY") with
// --host=127.0.0.1 --port=0 --metrics_port=-1, then `flags` (a later --host
// wins). verifysvc also gets --http_port=-1 (undefok). Returns the process
// (its Log() says why if it did not start) and *port (0 if it did not).
std::unique_ptr<ServerProcess> StartServer(const std::string& binary_env,
                                           const std::string& dir,
                                           const std::string& name,
                                           std::vector<std::string> flags,
                                           int* port);

// Runs a binary that must fail at startup; returns its output (waits up to
// 60 s; "TIMEOUT" appended if it did not exit).
std::string StartupFailure(const std::string& binary_env,
                           const std::string& dir, const std::string& name,
                           std::vector<std::string> flags, int* exit_status);

// The standard gRPC health check of service "" over `channel`, with no
// credentials in metadata.
grpc::Status HealthCheck(const std::shared_ptr<grpc::Channel>& channel);

}  // namespace lookahead::testing

#endif  // LOOKAHEAD_TESTS_SECURE_SERVERS_H_
