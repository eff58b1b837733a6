// HttpFront: verifysvc's OpenAI-compatible HTTP/1.1 front end on its own
// port, over Boost.Beast/Asio: POST /v1/chat/completions, POST
// /v1/completions (JSON or server-sent events), GET /v1/models, GET /health.
// Requests are mapped by openai_api.h, validated by the shared BuildRequest
// and submitted to the same Scheduler as the gRPC front.
//
// One I/O thread runs every connection (no thread per connection or per
// stream); the scheduler's Send/Finish calls are posted to it. Bounds: a
// request's head and body must arrive within read_timeout (else the
// connection closes); a body over max_body_bytes is answered 413 from its
// Content-Length before it is read; past max_connections new connections
// are closed at once; a stream whose client does not read keeps at most
// max_stream_buffer_bytes queued (and a write may stall at most
// read_timeout): past either its generation is cancelled and the
// connection closed. A client that disconnects cancels its generation.
//
// Lifecycle: Start binds and serves at once, answering GET /health and
// every POST with 503 "model loading" until Attach; Drain turns new
// requests away with 503 while running ones finish; Stop closes
// everything. Start, Attach, Drain, Stop and port are thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_API_HTTP_FRONT_H_
#define LOOKAHEAD_VERIFYSVC_API_HTTP_FRONT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/text/tokenizer.h"
#include "verifysvc/api/api_keys.h"
#include "verifysvc/serving/request_builder.h"
#include "verifysvc/serving/scheduler.h"

namespace lookahead::verifysvc {

struct HttpFrontOptions {
  std::string host = "127.0.0.1";
  int port = 8000;        // 0 picks a free one
  std::string port_file;  // the bound port is written here; empty = none
  // Largest request body (--http_max_body_bytes); larger is 413.
  int64_t max_body_bytes = 4 << 20;
  // Open connections at most (--http_max_connections); more are closed.
  int max_connections = 1024;
  // A request's head and body must arrive within this, and one write to a
  // client may take at most this (--http_read_timeout_ms).
  absl::Duration read_timeout = absl::Seconds(30);
  // Bytes of events queued for one client at most
  // (--http_max_stream_buffer_bytes); past it the generation is cancelled.
  int64_t max_stream_buffer_bytes = 1 << 20;
  // SO_SNDBUF of each connection; 0 = the system's (tests make it small).
  int send_buffer_bytes = 0;
  // Both set: HTTPS with this PEM certificate chain and private key.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Not owned; null = no authentication. Otherwise every POST needs
  // `Authorization: Bearer <key>` (401, or 429 with Retry-After) and its
  // lookahead.namespace must be the key's (403).
  ApiKeys* api_keys = nullptr;
};

// What requests are served with, once the model is loaded. Not owned; all
// must outlive the HttpFront, and the scheduler must be shut down (every
// sink finished) before the HttpFront is destroyed.
struct HttpBackend {
  const engine::Tokenizer* tokenizer = nullptr;
  Scheduler* scheduler = nullptr;
  RequestLimits limits;  // fitted to the tokenizer by Attach
  std::string model_name;
  int64_t created = 0;  // /v1/models' "created" (Unix seconds); 0 = now
};

class HttpFront {
 public:
  // Binds host:port (UNAVAILABLE naming them if it cannot; INVALID_ARGUMENT
  // for out-of-range options or unreadable TLS files), writes the port file
  // and starts the I/O thread.
  static absl::StatusOr<std::unique_ptr<HttpFront>> Start(
      const HttpFrontOptions& options);
  ~HttpFront();  // Stop()

  int port() const;
  // Serves requests with `backend` from now on.
  void Attach(HttpBackend backend);
  // New requests get 503 "draining"; running ones continue.
  void Drain();
  // Closes the port and every connection (their generations are
  // cancelled) and joins the I/O thread. Idempotent.
  void Stop();

  class Impl;

 private:
  explicit HttpFront(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_API_HTTP_FRONT_H_
