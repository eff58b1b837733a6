#include "verifysvc/api/http_front.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "boost/asio.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/ssl.hpp"
#include "common/port_file.h"
#include "common/tcp_listen.h"
#include "verifysvc/api/openai_api.h"
#include "verifysvc/serving/output.h"

namespace lookahead::verifysvc {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

// Largest request head (request line and headers).
constexpr uint32_t kMaxHeaderBytes = 16 << 10;
// Bytes a client may send ahead (a pipelined request) while its generation
// runs; past it the server stops watching the socket until it answers.
constexpr size_t kMaxReadAheadBytes = 64 << 10;
// How long Stop lets answers in flight finish before closing them.
constexpr std::chrono::seconds kStopLinger(2);

enum class FrontState { kLoading, kServing, kDraining };

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return std::chrono::microseconds(absl::ToInt64Microseconds(d));
}

// One HTTP chunk of `data` (chunked transfer encoding).
std::string HttpChunk(absl::string_view data) {
  return absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n");
}

}  // namespace

// Everything but Start, Attach, Drain and Stop runs on the one I/O thread,
// so the members below the constants need no lock.
class HttpFront::Impl {
 public:
  class ConnectionBase;
  template <class Stream>
  class Connection;
  class Bridge;

  explicit Impl(const HttpFrontOptions& options)
      : options_(options), acceptor_(io_), tls_(ssl::context::tls_server) {}

  absl::Status Init();
  int port() const { return port_; }
  void Run() {
    Accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  void Attach(HttpBackend backend) {
    backend.limits = FitLimitsToTokenizer(backend.limits, *backend.tokenizer);
    if (backend.created == 0)
      backend.created = absl::ToUnixSeconds(absl::Now());
    asio::post(io_, [this, backend = std::move(backend)]() mutable {
      backend_ = std::move(backend);
      if (state_ == FrontState::kLoading) state_ = FrontState::kServing;
    });
  }
  void Drain() {
    asio::post(io_, [this] { state_ = FrontState::kDraining; });
  }
  void Stop();

  const HttpFrontOptions options_;
  asio::io_context io_;

 private:
  void Accept();
  template <class Stream>
  void StartConnection(Stream stream);
  // Stop's second half, on the I/O thread: closes connections as they go
  // idle, all of them at stop_deadline_, then stops the loop.
  void CloseWhenIdle();

  tcp::acceptor acceptor_;
  ssl::context tls_;
  bool use_tls_ = false;
  int port_ = 0;
  asio::steady_timer accept_retry_{io_};
  std::thread thread_;
  bool stopped_ = false;  // guarded by being touched only by Stop's caller
  std::chrono::steady_clock::time_point stop_deadline_;  // I/O thread

 public:
  // I/O thread only.
  FrontState state_ = FrontState::kLoading;
  std::optional<HttpBackend> backend_;
  std::unordered_set<ConnectionBase*> connections_;
};

// What a connection does for the server: close it (Stop), and take the
// scheduler's outputs (the Bridge posts them here).
class HttpFront::Impl::ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  virtual void Close() = 0;
  // Whether it is answering: a generation runs or a response is being
  // written (Stop lets these finish for a moment).
  virtual bool Busy() const = 0;
  virtual void OnOutput(GenerationOutput output) = 0;
  virtual void OnFinish(absl::Status status) = 0;
};

// The scheduler's sink for one request: posts outputs to the connection on
// the I/O thread. Lives until the scheduler's Finish has run on the I/O
// thread (it holds itself until then); the connection may go first.
class HttpFront::Impl::Bridge final : public GenerationSink {
 public:
  Bridge(asio::io_context* io, std::weak_ptr<ConnectionBase> connection)
      : io_(io), connection_(std::move(connection)) {}

  // Keeps this alive until Finish.
  void Hold(std::shared_ptr<Bridge> self) { self_ = std::move(self); }
  void Release() { self_.reset(); }
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }

  void Send(GenerationOutput output) override {
    if (Cancelled()) return;
    asio::post(*io_, [c = connection_, output = std::move(output)]() mutable {
      if (std::shared_ptr<ConnectionBase> connection = c.lock()) {
        connection->OnOutput(std::move(output));
      }
    });
  }
  void Finish(absl::Status status) override {
    asio::post(*io_, [c = connection_, status = std::move(status),
                      self = std::move(self_)]() mutable {
      if (std::shared_ptr<ConnectionBase> connection = c.lock()) {
        connection->OnFinish(std::move(status));
      }
    });
  }
  bool Cancelled() const override {
    return cancelled_.load(std::memory_order_relaxed);
  }

 private:
  asio::io_context* const io_;
  const std::weak_ptr<ConnectionBase> connection_;
  std::atomic<bool> cancelled_{false};
  std::shared_ptr<Bridge> self_;  // set by Hold, moved out by Finish
};

// One client connection over Stream (plain TCP or TLS): reads a request
// within the read timeout, answers it (JSON, or SSE events as the
// generation runs), and repeats while the client keeps it alive.
template <class Stream>
class HttpFront::Impl::Connection final
    : public ConnectionBase,
      public std::enable_shared_from_this<Connection<Stream>> {
 public:
  Connection(Impl* server, Stream stream)
      : server_(server), stream_(std::move(stream)), idle_timer_(server->io_) {}

  void Start() {
    server_->connections_.insert(this);
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      ReadHeader();
    } else {
      Lowest().expires_after(ToChrono(server_->options_.read_timeout));
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](error_code ec) {
                                if (ec) return self->Close();
                                self->ReadHeader();
                              });
    }
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    server_->connections_.erase(this);
    if (bridge_ != nullptr) bridge_->Cancel();  // the scheduler ends it
    idle_timer_.cancel();
    error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  bool Busy() const override { return generating_ || writing_; }

  void OnOutput(GenerationOutput output) override {
    if (closed_ || !responder_.has_value()) return;
    if (!stream_response_) return responder_->Add(output);
    std::string events = responder_->StreamOutput(output);
    if (!events.empty()) Enqueue(HttpChunk(events));
  }

  void OnFinish(absl::Status status) override {
    bridge_.reset();
    generating_ = false;
    if (closed_ || !responder_.has_value()) return;
    if (!stream_response_) {
      if (!status.ok()) return AnswerError(status);
      return Answer(http::status::ok, responder_->Body());
    }
    Enqueue(HttpChunk(status.ok() ? OpenAiResponder::StreamEnd()
                                  : OpenAiResponder::StreamError(status)));
    Enqueue("0\r\n\r\n");
    stream_done_ = true;
    if (!writing_) AfterResponse();
  }

 private:
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void ReadHeader() {
    if (closed_) return;
    responder_.reset();
    stream_response_ = stream_done_ = false;
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    parser_->body_limit(server_->options_.max_body_bytes);
    Lowest().expires_after(ToChrono(server_->options_.read_timeout));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](
                                error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(error_code ec) {
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      return AnswerError(absl::InvalidArgumentError(absl::StrCat(
          "the request head is over ", kMaxHeaderBytes, " bytes")));
    }
    if (ec == http::error::body_limit) {  // from Content-Length, unread
      uint64_t length = 0;
      const auto field = parser_->get()[http::field::content_length];
      (void)absl::SimpleAtoi(absl::string_view(field.data(), field.size()),
                             &length);
      return TooLarge(length);
    }
    if (ec) return Close();
    const auto& request = parser_->get();
    keep_alive_ = request.keep_alive();
    const bool has_body =
        parser_->chunked() || parser_->content_length().value_or(0) > 0;
    absl::string_view target(request.target().data(), request.target().size());
    target = target.substr(0, target.find('?'));
    const http::verb method = request.method();
    if (target == "/health" || target == "/v1/models") {
      if (method != http::verb::get && method != http::verb::head) {
        return MethodNotAllowed("GET", has_body);
      }
      if (has_body) keep_alive_ = false;  // its body is not read
      return target == "/health" ? Health(method == http::verb::head)
                                 : Models();
    }
    if (target != "/v1/chat/completions" && target != "/v1/completions") {
      if (has_body) keep_alive_ = false;
      return AnswerError(WithErrorCode(
          absl::NotFoundError(absl::StrCat(
              "no route ", QuotePath(target),
              "; use POST /v1/chat/completions, POST /v1/completions, GET "
              "/v1/models or GET /health")),
          "unknown_url"));
    }
    if (method != http::verb::post) return MethodNotAllowed("POST", has_body);
    endpoint_ = target == "/v1/completions" ? OpenAiEndpoint::kCompletions
                                            : OpenAiEndpoint::kChatCompletions;
    const uint64_t length = parser_->content_length().value_or(0);
    if (length > uint64_t(server_->options_.max_body_bytes)) {
      return TooLarge(length);  // from the header, before reading the body
    }
    if (beast::iequals(request[http::field::expect], "100-continue")) {
      // curl waits for this before it sends a body over 1 KiB.
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      return asio::async_write(
          stream_, asio::buffer(kContinue, sizeof(kContinue) - 1),
          [self = this->shared_from_this()](error_code ec, size_t) {
            if (ec) return self->Close();
            self->ReadBody();
          });
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](error_code ec, size_t) {
                       self->OnBody(ec);
                     });
  }

  void OnBody(error_code ec) {
    if (ec == http::error::body_limit) return TooLarge(0);
    if (ec) return Close();
    Handle(parser_->get());
  }

  // Authorizes, parses, builds and submits; answers errors.
  void Handle(const http::request<http::string_body>& request) {
    if (server_->state_ != FrontState::kServing) {
      retry_after_seconds_ = 1;
      return AnswerError(absl::UnavailableError(
          server_->state_ == FrontState::kLoading
              ? "the model is loading; retry shortly (GET /health says when)"
              : "the server is draining for shutdown; send the request to "
                "another replica"));
    }
    const HttpBackend& backend = *server_->backend_;
    std::optional<KeyGrant> grant;
    if (server_->options_.api_keys != nullptr) {
      absl::StatusOr<KeyGrant> authorized = Authorize(request);
      if (!authorized.ok()) return AnswerError(authorized.status());
      grant = *std::move(authorized);
    }
    absl::StatusOr<OpenAiRequest> parsed =
        ParseOpenAiRequest(endpoint_, request.body(), backend.model_name);
    absl::Status status = parsed.status();
    if (status.ok() && grant.has_value()) {
      status = ApplyGrant(*grant, &parsed->raw.draft.name_space);
      if (!status.ok()) status = WithParam(status, "lookahead.namespace");
    }
    absl::StatusOr<GenerationRequest> built =
        status.ok()
            ? BuildRequest(parsed->raw, *backend.tokenizer, backend.limits)
            : absl::StatusOr<GenerationRequest>(status);
    if (!built.ok()) {
      backend.scheduler->CountRejected();
      return AnswerError(parsed.ok() ? ToOpenAiError(built.status(), *parsed)
                                     : built.status());
    }
    Submit(*std::move(built), *parsed, backend);
  }

  absl::StatusOr<KeyGrant> Authorize(
      const http::request<http::string_body>& request) {
    auto header = request.find(http::field::authorization);
    absl::string_view authorization;
    if (header != request.end()) {
      authorization = {header->value().data(), header->value().size()};
    }
    absl::Duration retry_after = absl::ZeroDuration();
    absl::StatusOr<KeyGrant> grant =
        server_->options_.api_keys->Authorize(authorization, &retry_after);
    if (grant.status().code() == absl::StatusCode::kResourceExhausted) {
      retry_after_seconds_ =
          std::max<int64_t>(1, std::ceil(absl::ToDoubleSeconds(retry_after)));
    }
    return grant;
  }

  void Submit(GenerationRequest request, const OpenAiRequest& parsed,
              const HttpBackend& backend) {
    const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
    responder_.emplace(endpoint_, NewResponseId(chat ? "chatcmpl-" : "cmpl-"),
                       absl::ToUnixSeconds(absl::Now()), backend.model_name,
                       parsed.stream && parsed.include_usage,
                       backend.tokenizer);
    stream_response_ = parsed.stream;
    auto bridge =
        std::make_shared<Bridge>(&server_->io_, this->weak_from_this());
    bridge->Hold(bridge);
    absl::Status submitted =
        backend.scheduler->Submit(std::move(request), bridge.get());
    if (!submitted.ok()) {
      bridge->Release();
      responder_.reset();
      stream_response_ = false;
      if (submitted.code() == absl::StatusCode::kResourceExhausted) {
        retry_after_seconds_ = 1;
      }
      return AnswerError(submitted);
    }
    bridge_ = std::move(bridge);
    generating_ = true;
    if (stream_response_) {
      Enqueue(
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
          "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
      std::string first = responder_->StreamStart();
      if (!first.empty()) Enqueue(HttpChunk(first));
    }
    Watch();
  }

  // Reads ahead while the generation runs: an end of stream or an error
  // means the client is gone, which cancels the generation.
  void Watch() {
    if (closed_ || watching_ || buffer_.size() >= kMaxReadAheadBytes) return;
    watching_ = true;
    Lowest().expires_never();  // the read; a pending write keeps its timer
    stream_.async_read_some(
        buffer_.prepare(4096),
        [self = this->shared_from_this()](error_code ec, size_t n) {
          self->watching_ = false;
          if (ec) return self->Close();
          self->buffer_.commit(n);
          if (self->generating_ || self->writing_) return self->Watch();
          if (self->awaiting_next_) {  // the next request has begun
            self->awaiting_next_ = false;
            self->idle_timer_.cancel();
            self->ReadHeader();
          }
        });
  }

  void Enqueue(std::string data) {
    if (closed_) return;
    queued_bytes_ += data.size();
    if (queued_bytes_ > server_->options_.max_stream_buffer_bytes) {
      return Close();  // a client that does not read: cancel, drop
    }
    queue_.push_back(std::move(data));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    writing_ = true;
    // A write that cannot finish within the timeout means a stalled client.
    Lowest().expires_after(ToChrono(server_->options_.read_timeout));
    asio::async_write(stream_, asio::buffer(queue_.front()),
                      [self = this->shared_from_this()](error_code ec, size_t) {
                        self->OnWritten(ec);
                      });
  }

  void OnWritten(error_code ec) {
    writing_ = false;
    queued_bytes_ -= queue_.front().size();
    queue_.pop_front();
    if (ec) return Close();
    if (!queue_.empty()) return WriteNext();
    if (stream_done_) AfterResponse();
  }

  // After a whole response: close, or wait for the next request.
  void AfterResponse() {
    if (closed_) return;
    if (!keep_alive_) return Close();
    if (!watching_) return ReadHeader();
    // The read-ahead is still pending: it delivers the next request, or
    // the idle timer closes the connection.
    awaiting_next_ = true;
    idle_timer_.expires_after(ToChrono(server_->options_.read_timeout));
    idle_timer_.async_wait([self = this->shared_from_this()](error_code ec) {
      if (!ec && self->awaiting_next_) self->Close();
    });
  }

  void Health(bool head) {
    const FrontState state = server_->state_;
    const char* word = state == FrontState::kServing   ? "serving"
                       : state == FrontState::kLoading ? "loading"
                                                       : "draining";
    Answer(state == FrontState::kServing ? http::status::ok
                                         : http::status::service_unavailable,
           absl::StrCat("{\"status\":\"", word, "\"}"), head);
  }

  void Models() {
    if (server_->options_.api_keys != nullptr) {
      absl::StatusOr<KeyGrant> grant = Authorize(parser_->get());
      if (!grant.ok()) return AnswerError(grant.status());
    }
    if (!server_->backend_.has_value()) {
      retry_after_seconds_ = 1;
      return AnswerError(absl::UnavailableError(
          "the model is loading; retry shortly (GET /health says when)"));
    }
    Answer(http::status::ok, ModelsJson(server_->backend_->model_name,
                                        server_->backend_->created));
  }

  void MethodNotAllowed(const char* allow, bool has_body) {
    if (has_body) keep_alive_ = false;
    allow_ = allow;
    const auto& request = parser_->get();
    AnswerStatus(http::status::method_not_allowed,
                 absl::StrCat("method ", std::string(request.method_string()),
                              " is not allowed here; use ", allow));
  }

  void TooLarge(uint64_t length) {
    keep_alive_ = false;  // the body is left unread
    AnswerStatus(
        http::status::payload_too_large,
        absl::StrCat("the request body",
                     length > 0 ? absl::StrCat(" is ", length, " bytes; it")
                                : std::string(),
                     " is over this server's limit of ",
                     server_->options_.max_body_bytes,
                     " bytes (--http_max_body_bytes)"));
  }

  // An error with OpenAI's shape and an explicit HTTP status.
  void AnswerStatus(http::status status, const std::string& message) {
    Answer(status, HttpErrorJson(static_cast<int>(status), message));
  }

  void AnswerError(const absl::Status& status) {
    Answer(http::status(HttpStatusOf(status)), ErrorJson(status));
  }

  void Answer(http::status status, std::string body, bool head = false) {
    auto response = std::make_shared<http::response<http::string_body>>();
    response->result(status);
    response->version(11);
    response->set(http::field::content_type, "application/json");
    if (retry_after_seconds_ > 0) {
      response->set(http::field::retry_after,
                    std::to_string(retry_after_seconds_));
      retry_after_seconds_ = 0;
    }
    if (!allow_.empty()) {
      response->set(http::field::allow, allow_);
      allow_.clear();
    }
    response->keep_alive(keep_alive_);
    response->body() = std::move(body);
    response->prepare_payload();
    if (head) response->body().clear();
    writing_ = true;
    Lowest().expires_after(ToChrono(server_->options_.read_timeout));
    http::async_write(
        stream_, *response,
        [self = this->shared_from_this(), response](error_code ec, size_t) {
          self->writing_ = false;
          if (ec) return self->Close();
          self->AfterResponse();
        });
  }

  static std::string QuotePath(absl::string_view path) {
    return absl::StrCat("\"", path.substr(0, 200), "\"");
  }

  Impl* const server_;
  Stream stream_;
  asio::steady_timer idle_timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool closed_ = false;
  bool keep_alive_ = true;
  OpenAiEndpoint endpoint_ = OpenAiEndpoint::kChatCompletions;
  int64_t retry_after_seconds_ = 0;  // > 0: the next answer's Retry-After
  std::string allow_;                // non-empty: the next answer's Allow
  // The running generation.
  std::shared_ptr<Bridge> bridge_;
  std::optional<OpenAiResponder> responder_;
  bool stream_response_ = false;  // SSE, through queue_
  bool generating_ = false;       // Finish not yet seen
  bool stream_done_ = false;      // the SSE terminator is queued
  // Writes: queue_.front() is in flight while writing_.
  std::deque<std::string> queue_;
  int64_t queued_bytes_ = 0;
  bool writing_ = false;
  bool watching_ = false;       // the read-ahead of Watch is pending
  bool awaiting_next_ = false;  // answered; the read-ahead waits for more
};

absl::Status HttpFront::Impl::Init() {
  const HttpFrontOptions& o = options_;
  if (o.port < 0 || o.port > 65535 || o.max_body_bytes < 1 ||
      o.max_connections < 1 || o.read_timeout <= absl::ZeroDuration() ||
      o.max_stream_buffer_bytes < 1024 || o.send_buffer_bytes < 0) {
    return absl::InvalidArgumentError(
        "HTTP front: --http_port must be in [0, 65535] (-1 = off), "
        "--http_max_body_bytes and --http_max_connections >= 1, "
        "--http_read_timeout_ms > 0, --http_max_stream_buffer_bytes >= 1024");
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "set both --tls_cert_file and --tls_key_file, or neither");
  }
  if (!o.tls_cert_file.empty()) {
    error_code ec;
    tls_.use_certificate_chain_file(o.tls_cert_file, ec);
    if (!ec) tls_.use_private_key_file(o.tls_key_file, ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(
          "HTTP front TLS: cannot use --tls_cert_file=", o.tls_cert_file,
          " with --tls_key_file=", o.tls_key_file, ": ", ec.message()));
    }
    use_tls_ = true;
  }
  if (absl::Status s =
          Listen(&acceptor_, o.host, o.port, "the HTTP front", "--http_port");
      !s.ok()) {
    return s;
  }
  port_ = acceptor_.local_endpoint().port();
  return absl::OkStatus();
}

void HttpFront::Impl::Accept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {  // out of descriptors or the like: retry shortly, no spin
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](error_code wait_ec) {
        if (!wait_ec) Accept();
      });
      return;
    }
    if (int(connections_.size()) < options_.max_connections) {
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      if (options_.send_buffer_bytes > 0) {
        socket.set_option(
            asio::socket_base::send_buffer_size(options_.send_buffer_bytes),
            ignored);
      }
      if (use_tls_) {
        StartConnection(beast::ssl_stream<beast::tcp_stream>(
            beast::tcp_stream(std::move(socket)), tls_));
      } else {
        StartConnection(beast::tcp_stream(std::move(socket)));
      }
    }  // else the socket closes as it goes out of scope
    Accept();
  });
}

template <class Stream>
void HttpFront::Impl::StartConnection(Stream stream) {
  std::make_shared<Connection<Stream>>(this, std::move(stream))->Start();
}

void HttpFront::Impl::Stop() {
  if (stopped_ || !thread_.joinable()) return;
  stopped_ = true;
  asio::post(io_, [this] {
    error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
    stop_deadline_ = std::chrono::steady_clock::now() + kStopLinger;
    CloseWhenIdle();
  });
  thread_.join();
}

void HttpFront::Impl::CloseWhenIdle() {
  // Idle connections close now; answers in flight (a drained stream's last
  // events) get until the deadline.
  std::vector<ConnectionBase*> open(connections_.begin(), connections_.end());
  const bool late = std::chrono::steady_clock::now() >= stop_deadline_;
  for (ConnectionBase* c : open) {
    if (late || !c->Busy()) c->Close();
  }
  if (connections_.empty()) return io_.stop();
  accept_retry_.expires_after(std::chrono::milliseconds(10));
  accept_retry_.async_wait([this](error_code) { CloseWhenIdle(); });
}

absl::StatusOr<std::unique_ptr<HttpFront>> HttpFront::Start(
    const HttpFrontOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  if (!options.port_file.empty()) {
    if (absl::Status s = WritePortFile(options.port_file, impl->port());
        !s.ok()) {
      return s;
    }
  }
  impl->Run();
  return std::unique_ptr<HttpFront>(new HttpFront(std::move(impl)));
}

HttpFront::HttpFront(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpFront::~HttpFront() { Stop(); }
int HttpFront::port() const { return impl_->port(); }
void HttpFront::Attach(HttpBackend backend) {
  impl_->Attach(std::move(backend));
}
void HttpFront::Drain() { impl_->Drain(); }
void HttpFront::Stop() { impl_->Stop(); }

}  // namespace lookahead::verifysvc
