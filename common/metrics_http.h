// MetricsServer: serves a Registry as Prometheus text on GET /metrics from a
// small HTTP server (cpp-httplib) with its own threads; other paths get 404.
// Thread safety: the registry is read concurrently from the server threads;
// port() is safe anywhere; Stop() and the destructor must not race each other.
#ifndef LOOKAHEAD_COMMON_METRICS_HTTP_H_
#define LOOKAHEAD_COMMON_METRICS_HTTP_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/metrics.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace lookahead::metrics {

class MetricsServer {
 public:
  // Binds host:port (port 0 picks a free port; see port()) and starts
  // serving `registry`, which must outlive the server. Returns UNAVAILABLE
  // if the address cannot be bound (in use, or not local).
  // Scrapes are served by two worker threads; a scrape renders the whole
  // registry, so callback gauges run on those threads.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& host, int port, const Registry* registry);

  // Stops serving (see Stop()).
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port.
  int port() const { return port_; }

  // Closes the listening socket and joins the server threads; afterwards the
  // registry is no longer read. Takes up to about a second when a client
  // holds an idle keep-alive connection. Idempotent.
  void Stop();

 private:
  MetricsServer(std::unique_ptr<httplib::Server> server, int port);

  const std::unique_ptr<httplib::Server> server_;
  const int port_;
  std::thread listener_;  // runs the accept loop until Stop()
};

// The services' --metrics_port convention: a negative port serves nothing
// (returns null); otherwise Start(host, port, registry) and, if `port_file`
// is not empty, writes the bound port there (common/port_file.h).
absl::StatusOr<std::unique_ptr<MetricsServer>> ServeMetrics(
    const std::string& host, int port, const std::string& port_file,
    const Registry* registry);

}  // namespace lookahead::metrics

#endif  // LOOKAHEAD_COMMON_METRICS_HTTP_H_
