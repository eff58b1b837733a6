#include "tests/draftsvc_storage_harness.h"

#include <arpa/inet.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

std::chrono::system_clock::time_point Deadline(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

}  // namespace

std::string DraftsvcBinary() {
  const char* binary = std::getenv("DRAFTSVC_BINARY");
  return binary != nullptr ? binary : "";
}

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

Draftsvc StartDraftsvc(const std::string& db_path, const std::string& work_dir,
                       const std::string& name,
                       const std::vector<std::string>& flags) {
  const std::string metrics_port_file =
      absl::StrCat(work_dir, "/metrics_port.", name);
  std::filesystem::remove(metrics_port_file);
  // The storage fault flag exists only in the testonly fault binary.
  std::string binary = DraftsvcBinary();
  for (const std::string& flag : flags) {
    if (absl::StartsWith(flag, "--testing_store_fault_file")) {
      const char* fault = std::getenv("DRAFTSVC_FAULT_BINARY");
      binary = fault != nullptr ? fault : "";
    }
  }
  std::vector<std::string> args = {binary,
                                   "--host=127.0.0.1",
                                   "--port=0",
                                   "--metrics_port=0",
                                   "--metrics_port_file=" + metrics_port_file,
                                   "--db_path=" + db_path};
  args.insert(args.end(), flags.begin(), flags.end());
  Draftsvc d;
  d.process = std::make_unique<ServerProcess>(
      args, absl::StrCat(work_dir, "/port.", name),
      absl::StrCat(work_dir, "/server.", name, ".log"));
  d.port = d.process->WaitForPort();
  if (d.port == 0) return d;
  std::ifstream in(metrics_port_file);
  in >> d.metrics_port;
  d.channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", d.port),
                                  grpc::InsecureChannelCredentials());
  d.channel->WaitForConnected(Deadline(10));
  d.stub = v1::DraftService::NewStub(d.channel);
  return d;
}

int HealthStatus(std::shared_ptr<grpc::Channel> channel,
                 const std::string& service) {
  grpc::GenericStub stub(std::move(channel));
  grpc::ClientContext context;
  context.set_deadline(Deadline(10));
  // HealthCheckRequest{service = 1}.
  std::string request_bytes;
  if (!service.empty()) {
    request_bytes =
        absl::StrCat("\x0a", std::string(1, char(service.size())), service);
  }
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  absl::Mutex mu;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   absl::MutexLock lock(&mu);
                   status = std::move(s);
                   done = true;
                 });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  if (!status.ok()) return -1;
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const auto& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  // HealthCheckResponse{status = 1}: "\x08" + value; empty = UNKNOWN (0).
  if (bytes.size() == 2 && bytes[0] == '\x08') return bytes[1];
  return bytes.empty() ? 0 : -1;
}

std::optional<double> ScrapeMetric(int metrics_port,
                                   const std::string& series) {
  if (metrics_port <= 0) return std::nullopt;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(metrics_port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[8192];
      for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) {
        body.append(buffer, n);
      }
    }
  }
  close(fd);
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (line.substr(0, series.size()) != series) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(series.size()), &value)) return value;
  }
  return std::nullopt;
}

grpc::Status OpenSession(v1::DraftService::Stub& stub, const std::string& id) {
  v1::OpenSessionRequest request;
  request.set_session_id(id);
  request.set_namespace_("storage");
  request.set_vocab_size(50000);
  for (int32_t t : {1, 2, 3, 4, 5}) request.add_prompt_tokens(t);
  v1::OpenSessionResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline(10));
  return stub.OpenSession(&context, request, &response);
}

grpc::Status Step(v1::DraftService::Stub& stub, const std::string& id,
                  const std::vector<int32_t>& tokens, v1::SessionDraft* out) {
  v1::StepRequest request;
  v1::SessionStep* step = request.add_steps();
  step->set_session_id(id);
  for (int32_t t : tokens) step->add_accepted_tokens(t);
  step->set_decoding_length(16);
  v1::StepResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline(10));
  grpc::Status s = stub.Step(&context, request, &response);
  if (s.ok() && response.drafts_size() == 1) *out = response.drafts(0);
  return s;
}

grpc::Status Stats(v1::DraftService::Stub& stub, v1::StatsResponse* out) {
  grpc::ClientContext context;
  context.set_deadline(Deadline(10));
  return stub.Stats(&context, v1::StatsRequest(), out);
}

}  // namespace lookahead::testing
