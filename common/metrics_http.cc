#include "common/metrics_http.h"

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/port_file.h"
#include "httplib.h"

namespace lookahead::metrics {
namespace {

// Scrapes are rare and cheap; two workers let a slow or idle keep-alive
// client not block a second scraper, without httplib's default of one
// thread per core.
constexpr int kWorkerThreads = 2;

// A worker parked on an idle keep-alive connection (or one that sent no
// request yet) notices Stop() only when this expires, so it bounds Stop().
// Requests are a few hundred bytes, so one second is ample.
constexpr int kIdleTimeoutSeconds = 1;

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, int port, const Registry* registry) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics port ", port, " is out of range; use 0..65535 (0 = any)"));
  }
  auto server = std::make_unique<httplib::Server>();
  server->new_task_queue = [] {
    return new httplib::ThreadPool(kWorkerThreads);
  };
  server->Get("/metrics",
              [registry](const httplib::Request&, httplib::Response& res) {
                res.set_content(registry->Render(), kContentType);
              });
  // Unregistered paths get httplib's 404.
  server->set_keep_alive_timeout(kIdleTimeoutSeconds);
  server->set_read_timeout(kIdleTimeoutSeconds);
  // httplib's default also sets SO_REUSEPORT, which would let a second
  // process bind the same port and steal half the scrapes; a taken port must
  // fail instead. SO_REUSEADDR still allows a quick restart.
  server->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  int bound_port = port;
  if (port == 0) {
    bound_port = server->bind_to_any_port(host);
  } else if (!server->bind_to_port(host, port)) {
    bound_port = -1;
  }
  if (bound_port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the metrics server to ", host, ":", port,
                     "; is the port in use or the host not local?"));
  }

  std::unique_ptr<MetricsServer> metrics_server(
      new MetricsServer(std::move(server), bound_port));
  httplib::Server* raw = metrics_server->server_.get();
  auto listen_done = std::make_shared<std::atomic<bool>>(false);
  metrics_server->listener_ = std::thread([raw, listen_done] {
    raw->listen_after_bind();
    listen_done->store(true);
  });
  // httplib's stop() is a no-op until the accept loop has started, so wait
  // for it; otherwise an early Stop() would leave the thread unjoinable.
  while (!raw->is_running() && !listen_done->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!raw->is_running()) {
    metrics_server->listener_.join();
    return absl::InternalError(absl::StrCat("the metrics server on ", host, ":",
                                            bound_port, " stopped at once"));
  }
  return metrics_server;
}

MetricsServer::MetricsServer(std::unique_ptr<httplib::Server> server, int port)
    : server_(std::move(server)), port_(port) {}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  if (!listener_.joinable()) return;
  server_->stop();
  listener_.join();
}

absl::StatusOr<std::unique_ptr<MetricsServer>> ServeMetrics(
    const std::string& host, int port, const std::string& port_file,
    const Registry* registry) {
  if (port < 0) return nullptr;
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start(host, port, registry);
  if (!server.ok() || port_file.empty()) return server;
  absl::Status written = WritePortFile(port_file, (*server)->port());
  if (!written.ok()) return written;
  return server;
}

}  // namespace lookahead::metrics
