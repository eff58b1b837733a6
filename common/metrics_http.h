// MetricsServer: serves a Registry as Prometheus text on GET /metrics from a
// small event-driven HTTP server (Boost.Beast over Asio, one thread); other
// paths get 404. Idle and half-open connections cost a descriptor, not a
// thread: a scrape is answered at once however many such clients are
// connected, each connection must deliver its request within a read
// timeout, and past a connection cap the oldest idle connection is closed.
//
// Thread safety: the registry is read concurrently from the server thread;
// port() is safe anywhere; Stop() and the destructor must not race each
// other.
#ifndef LOOKAHEAD_COMMON_METRICS_HTTP_H_
#define LOOKAHEAD_COMMON_METRICS_HTTP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"

namespace lookahead::metrics {

struct MetricsServerOptions {
  // Most open connections. A new connection past it closes the oldest one
  // that is not being answered, so a scraper always gets in; if every one
  // is being answered, the new one is closed.
  int max_connections = 256;
  // A connection must deliver a whole request head within this time after
  // it opens or after its previous response (keep-alive), and take each
  // response within this time; otherwise it is closed.
  absl::Duration read_timeout = absl::Seconds(10);
  // Largest request head accepted (request line and headers); larger
  // requests are answered 431 and the connection is closed.
  int max_request_bytes = 8 << 10;
};

class MetricsServer {
 public:
  // Binds host:port (port 0 picks a free port; see port()) and starts
  // serving `registry`, which must outlive the server. Returns UNAVAILABLE
  // if the address cannot be bound (in use, or not local), INVALID_ARGUMENT
  // for a port or option out of range. A scrape renders the whole registry,
  // so callback gauges run on the server thread.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& host, int port, const Registry* registry,
      const MetricsServerOptions& options = {});

  // Stops serving (see Stop()).
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port.
  int port() const { return port_; }

  // Closes the listening socket and every connection and joins the server
  // thread; afterwards the registry is no longer read. Idempotent.
  void Stop();

 private:
  class Impl;
  MetricsServer(std::unique_ptr<Impl> impl, int port);

  std::unique_ptr<Impl> impl_;
  const int port_;
};

// The services' --metrics_port convention: a negative port serves nothing
// (returns null); otherwise Start(host, port, registry) and, if `port_file`
// is not empty, writes the bound port there (common/port_file.h).
absl::StatusOr<std::unique_ptr<MetricsServer>> ServeMetrics(
    const std::string& host, int port, const std::string& port_file,
    const Registry* registry);

}  // namespace lookahead::metrics

#endif  // LOOKAHEAD_COMMON_METRICS_HTTP_H_
