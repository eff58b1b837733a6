#include "common/metrics_http.h"

#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "common/port_file.h"
#include "common/tcp_listen.h"

namespace lookahead::metrics {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

// Largest request body accepted: a scrape is a GET and has none.
constexpr int kMaxBodyBytes = 1024;

}  // namespace

// Everything below runs on the one server thread (Start's setup and Stop's
// hand-over aside), so no member needs a lock.
class MetricsServer::Impl {
 public:
  Impl(const Registry* registry, const MetricsServerOptions& options)
      : registry_(registry), options_(options), acceptor_(io_) {}

  absl::Status Bind(const std::string& host, int port);
  int port() const { return acceptor_.local_endpoint().port(); }

  void Run() {
    Accept();
    thread_ = std::thread([this] { io_.run(); });
  }

  // Closes the port and every connection and joins the thread. Idempotent.
  void Stop();

 private:
  class Connection;
  using Connections = std::list<std::shared_ptr<Connection>>;

  void Accept();
  // Makes room for one more connection under options_.max_connections by
  // closing the oldest idle one; false if every connection is answering.
  bool MakeRoom();

  const Registry* const registry_;
  const MetricsServerOptions options_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_{io_};  // after an accept error (EMFILE)
  Connections connections_;               // oldest first
  std::thread thread_;
};

// One client connection: reads a request within the read timeout, answers
// it, and repeats while the client keeps the connection alive.
class MetricsServer::Impl::Connection
    : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Impl* server, tcp::socket socket)
      : server_(server),
        socket_(std::move(socket)),
        deadline_(socket_.get_executor()) {}

  void Start(Connections::iterator self) {
    self_ = self;
    ReadRequest();
  }

  // Whether it may be evicted: open and not in the middle of an answer.
  bool idle() const { return !answering_ && socket_.is_open(); }
  bool open() const { return socket_.is_open(); }

  // Closes the socket; pending operations complete with an error and the
  // connection leaves the server's list.
  void Close() {
    boost::system::error_code ignored;
    deadline_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  void ReadRequest() {
    parser_.emplace();
    parser_->header_limit(server_->options_.max_request_bytes);
    parser_->body_limit(kMaxBodyBytes);
    ArmDeadline();
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](boost::system::error_code ec,
                                                 size_t) { self->OnRead(ec); });
  }

  // Closes the connection unless the current read or write completes
  // within options_.read_timeout.
  void ArmDeadline() {
    deadline_.expires_after(std::chrono::microseconds(
        absl::ToInt64Microseconds(server_->options_.read_timeout)));
    deadline_.async_wait(
        [self = shared_from_this()](boost::system::error_code ec) {
          // A wait that completed just before a cancel() or a re-arm still
          // runs without an error: only a deadline that is really past counts.
          if (ec ||
              self->deadline_.expiry() > asio::steady_timer::clock_type::now())
            return;
          self->Close();
        });
  }

  void OnRead(boost::system::error_code ec) {
    if (ec == http::error::header_limit) {
      Answer(http::status::request_header_fields_too_large, "", false);
      return;
    }
    if (ec) return Finish();
    const http::request<http::empty_body>& request = parser_->get();
    if (request.target() != "/metrics") {
      Answer(http::status::not_found, "Not Found\n", request.keep_alive());
    } else if (request.method() != http::verb::get &&
               request.method() != http::verb::head) {
      Answer(http::status::method_not_allowed, "", request.keep_alive());
    } else {
      Answer(http::status::ok, server_->registry_->Render(),
             request.keep_alive(), request.method() == http::verb::head);
    }
  }

  void Answer(http::status status, std::string body, bool keep_alive,
              bool head = false) {
    answering_ = true;
    response_ = {};
    response_.result(status);
    response_.version(11);
    response_.set(http::field::content_type,
                  status == http::status::ok ? kContentType : "text/plain");
    response_.keep_alive(keep_alive);
    response_.body() = std::move(body);
    response_.prepare_payload();
    if (head) response_.body().clear();
    ArmDeadline();  // a client that does not read its answer is dropped
    http::async_write(socket_, response_,
                      [self = shared_from_this(), keep_alive](
                          boost::system::error_code ec, size_t) {
                        self->answering_ = false;
                        if (ec || !keep_alive) return self->Finish();
                        self->ReadRequest();
                      });
  }

  // Closes the connection and drops it from the server's list.
  void Finish() {
    Close();
    if (self_.has_value()) {
      server_->connections_.erase(*self_);
      self_.reset();
    }
  }

  Impl* const server_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> parser_;
  http::response<http::string_body> response_;
  std::optional<Connections::iterator> self_;  // in server_->connections_
  bool answering_ = false;
};

void MetricsServer::Impl::Stop() {
  if (!thread_.joinable()) return;
  asio::post(io_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
    for (const std::shared_ptr<Connection>& c : connections_) c->Close();
    io_.stop();
  });
  thread_.join();
}

absl::Status MetricsServer::Impl::Bind(const std::string& host, int port) {
  return Listen(&acceptor_, host, port, "the metrics server", "--metrics_port");
}

void MetricsServer::Impl::Accept() {
  acceptor_.async_accept([this](boost::system::error_code ec,
                                tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors or the like: try again shortly, not in a spin.
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](boost::system::error_code wait_ec) {
        if (!wait_ec) Accept();
      });
      return;
    }
    if (MakeRoom()) {
      auto connection = std::make_shared<Connection>(this, std::move(socket));
      connections_.push_back(connection);
      connection->Start(std::prev(connections_.end()));
    }  // else the new socket closes as it goes out of scope
    Accept();
  });
}

bool MetricsServer::Impl::MakeRoom() {
  // Closed connections stay listed until their pending operation fails.
  int open = 0;
  for (const std::shared_ptr<Connection>& c : connections_) open += c->open();
  if (open < options_.max_connections) return true;
  for (const std::shared_ptr<Connection>& c : connections_) {
    if (c->idle()) {
      c->Close();  // its pending read fails and removes it
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, int port, const Registry* registry,
    const MetricsServerOptions& options) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics port ", port, " is out of range; use 0..65535 (0 = any)"));
  }
  if (options.max_connections < 1 || options.max_request_bytes < 256 ||
      options.read_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "metrics server options: max_connections must be >= 1, "
        "max_request_bytes >= 256 and read_timeout > 0");
  }
  auto impl = std::make_unique<Impl>(registry, options);
  if (absl::Status bound = impl->Bind(host, port); !bound.ok()) return bound;
  const int bound_port = impl->port();
  impl->Run();
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(std::move(impl), bound_port));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() { impl_->Stop(); }

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
