#include "tests/secure_servers.h"

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"

namespace lookahead::testing {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Runs `command` through the shell with output to `log`; true iff it exits 0.
bool Shell(const std::string& command, const std::string& log) {
  return std::system(
             absl::StrCat("(", command, ") >>", log, " 2>&1").c_str()) == 0;
}

std::vector<std::string> BaseArgs(const std::string& binary_env,
                                  std::vector<std::string> flags) {
  std::vector<std::string> args = {Env(binary_env.c_str()), "--host=127.0.0.1",
                                   "--port=0", "--metrics_port=-1"};
  if (binary_env == "VERIFYSVC_BINARY") {
    // The HTTP front's port flag, where the binary has one.
    args.push_back("--undefok=http_port");
    args.push_back("--http_port=-1");
  }
  args.insert(args.end(), flags.begin(), flags.end());
  return args;
}

}  // namespace

std::string TestDir(const std::string& name) {
  std::string root = Env("TEST_TMPDIR");
  if (root.empty()) root = "/tmp";
  const std::string dir = absl::StrCat(root, "/", name);
  std::filesystem::create_directories(dir);
  return dir;
}

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir) {
  const std::string log = dir + "/openssl.log";
  auto path = [&dir](const char* name) { return absl::StrCat(dir, "/", name); };
  TestCerts c{path("ca.pem"),      path("server.pem"), path("server.key"),
              path("client.pem"),  path("client.key"), path("foreign_ca.pem"),
              path("foreign.pem"), path("foreign.key")};
  const std::string ec =
      "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
      "-nodes";
  // A self-signed CA.
  auto make_ca = [&](const std::string& pem, const std::string& key,
                     const std::string& cn) {
    return Shell(absl::StrCat("openssl req -x509 ", ec, " -keyout ", key,
                              " -out ", pem, " -days 2 -subj '/CN=", cn,
                              "' -addext basicConstraints=critical,CA:TRUE"
                              " -addext keyUsage=critical,keyCertSign,cRLSign"),
                 log);
  };
  // A leaf signed by `ca`, with `ext` (one extension per line).
  auto make_leaf = [&](const std::string& pem, const std::string& key,
                       const std::string& ca, const std::string& ca_key,
                       const std::string& cn, const std::string& ext) {
    const std::string csr = pem + ".csr";
    const std::string ext_file = pem + ".ext";
    std::ofstream(ext_file) << ext;
    return Shell(absl::StrCat("openssl req ", ec, " -keyout ", key, " -out ",
                              csr, " -subj '/CN=", cn, "'"),
                 log) &&
           Shell(absl::StrCat("openssl x509 -req -in ", csr, " -CA ", ca,
                              " -CAkey ", ca_key, " -CAcreateserial -out ", pem,
                              " -days 2 -extfile ", ext_file),
                 log);
  };
  const std::string ca_key = path("ca.key");
  const std::string foreign_ca_key = path("foreign_ca.key");
  const bool ok =
      make_ca(c.ca, ca_key, "lookahead test CA") &&
      make_ca(c.foreign_ca, foreign_ca_key, "foreign test CA") &&
      make_leaf(c.server_cert, c.server_key, c.ca, ca_key, "localhost",
                "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n") &&
      make_leaf(c.client_cert, c.client_key, c.ca, ca_key, "verifysvc",
                "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n") &&
      make_leaf(c.foreign_cert, c.foreign_key, c.foreign_ca, foreign_ca_key,
                "verifysvc",
                "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n");
  if (!ok) {
    return absl::InternalError(absl::StrCat("openssl failed:\n", ReadAll(log)));
  }
  return c;
}

std::shared_ptr<grpc::Channel> TestChannel(int port, const std::string& ca,
                                           const std::string& cert,
                                           const std::string& key) {
  const std::string target = absl::StrCat("127.0.0.1:", port);
  if (ca.empty()) {
    return grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadAll(ca);
  if (!cert.empty()) {
    options.pem_cert_chain = ReadAll(cert);
    options.pem_private_key = ReadAll(key);
  }
  return grpc::CreateChannel(target, grpc::SslCredentials(options));
}

std::unique_ptr<ServerProcess> StartServer(const std::string& binary_env,
                                           const std::string& dir,
                                           const std::string& name,
                                           std::vector<std::string> flags,
                                           int* port) {
  auto process =
      std::make_unique<ServerProcess>(BaseArgs(binary_env, std::move(flags)),
                                      absl::StrCat(dir, "/", name, ".port"),
                                      absl::StrCat(dir, "/", name, ".log"));
  *port = process->WaitForPort(/*timeout_ms=*/240000);
  return process;
}

std::string StartupFailure(const std::string& binary_env,
                           const std::string& dir, const std::string& name,
                           std::vector<std::string> flags, int* exit_status) {
  ChildProcess process(BaseArgs(binary_env, std::move(flags)),
                       absl::StrCat(dir, "/", name, ".log"));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (process.Running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const bool timed_out = process.Running();
  const int status = process.Kill(timed_out ? SIGKILL : 0);
  *exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return timed_out ? process.Log() + "TIMEOUT" : process.Log();
}

grpc::Status HealthCheck(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  grpc::Slice empty("");  // HealthCheckRequest{service: ""}
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request,
                            &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) return status;
  // HealthCheckResponse{status: SERVING} is the bytes 08 01.
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  if (bytes != std::string("\x08\x01", 2)) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "health check answered other than SERVING");
  }
  return grpc::Status::OK;
}

}  // namespace lookahead::testing
