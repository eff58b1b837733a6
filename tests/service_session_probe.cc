#include "tests/service_session_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace lookahead::testing {
namespace {

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

// GET http://127.0.0.1:port/path (HTTP/1.0: the server closes after it).
absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError("socket() failed");
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", port));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (send(fd, request.data(), request.size(), 0) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string response;
  char buffer[8192];
  ssize_t got;
  while ((got = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    response.append(buffer, static_cast<size_t>(got));
    // Done once the head and Content-Length bytes of body are in (a server
    // may keep the connection open).
    const size_t head_end = response.find("\r\n\r\n");
    if (head_end == std::string::npos) continue;
    for (absl::string_view header : absl::StrSplit(
             absl::string_view(response).substr(0, head_end), "\r\n")) {
      size_t length = 0;
      if ((absl::ConsumePrefix(&header, "Content-Length:") ||
           absl::ConsumePrefix(&header, "content-length:")) &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(header), &length) &&
          response.size() >= head_end + 4 + length) {
        got = 0;
      }
    }
    if (got == 0) break;
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || body == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("bad HTTP response from ", port,
                                               ": ", response.substr(0, 200)));
  }
  return response.substr(body + 4);
}

}  // namespace

pid_t FindPidByArg(const std::string& arg) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return -1;
  pid_t found = -1;
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    const std::string cmdline =
        ReadWhole(absl::StrCat("/proc/", pid, "/cmdline"));
    for (absl::string_view a : absl::StrSplit(cmdline, '\0')) {
      if (a == arg) found = pid;
    }
    if (found > 0) break;
  }
  closedir(proc);
  return found;
}

int64_t RssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmRSS:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, "kB");
    int64_t kib = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib)) {
      return kib * 1024;
    }
  }
  return -1;
}

absl::StatusOr<double> ScrapeMetric(int port, const std::string& name) {
  absl::StatusOr<std::string> page = HttpGet(port, "/metrics");
  if (!page.ok()) return page.status();
  for (absl::string_view line : absl::StrSplit(*page, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, " ")) {
      continue;
    }
    double value = 0;
    if (absl::SimpleAtod(absl::StripAsciiWhitespace(line), &value)) {
      return value;
    }
  }
  return absl::NotFoundError(absl::StrCat(name, " not in /metrics"));
}

absl::StatusOr<double> ScrapeMetricSum(int port, const std::string& name,
                                       const std::vector<std::string>& labels) {
  absl::StatusOr<std::string> page = HttpGet(port, "/metrics");
  if (!page.ok()) return page.status();
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(*page, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, "{")) {
      continue;
    }
    const size_t close = line.find("} ");
    if (close == absl::string_view::npos) continue;
    const absl::string_view set = line.substr(0, close);
    bool all = true;
    for (const std::string& label : labels) {
      all = all && absl::StrContains(set, label);
    }
    double value = 0;
    if (all &&
        absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(close + 2)),
                         &value)) {
      sum += value;
    }
  }
  return sum;
}

absl::StatusOr<std::unique_ptr<LoneDraftsvc>> LoneDraftsvc::Start(
    const std::string& name, const std::vector<std::string>& flags) {
  const char* binary = std::getenv("DRAFTSVC_BINARY");
  if (binary == nullptr) {
    return absl::FailedPreconditionError("no DRAFTSVC_BINARY");
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  std::filesystem::create_directories(dir, error);
  const std::string metrics_file = dir + "/metrics_port";
  const std::string port_file = dir + "/port";
  std::vector<std::string> args = {binary,
                                   "--host=127.0.0.1",
                                   "--port=0",
                                   "--db_path=" + dir + "/db",
                                   "--metrics_port=0",
                                   "--metrics_port_file=" + metrics_file};
  args.insert(args.end(), flags.begin(), flags.end());
  std::unique_ptr<LoneDraftsvc> server(new LoneDraftsvc());
  server->process_ = std::make_unique<ServerProcess>(std::move(args), port_file,
                                                     dir + "/draftsvc.log");
  const int port = server->process_->WaitForPort(60000);
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("draftsvc did not start:\n", server->process_->Log()));
  }
  std::ifstream(metrics_file) >> server->metrics_port_;
  server->pid_ = FindPidByArg("--port_file=" + port_file);
  server->stub_ = lookahead::v1::DraftService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  return server;
}

}  // namespace lookahead::testing
