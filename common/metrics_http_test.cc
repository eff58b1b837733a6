#include "common/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace lookahead::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `request` to 127.0.0.1:port over a plain socket and returns all the
// server wrote until it closed the connection ("" if it could not connect).
std::string RawExchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      write(fd, request.data(), request.size()) ==
          static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof(buffer))) > 0)
      response.append(buffer, n);
  }
  close(fd);
  return response;
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Counter*> counter =
        registry_.AddCounter("scrapes_seen_total", "Test counter.");
    ASSERT_TRUE(counter.ok()) << counter.status();
    counter_ = *counter;
    counter_->Increment(41);
    absl::StatusOr<std::unique_ptr<MetricsServer>> server =
        MetricsServer::Start("127.0.0.1", 0, &registry_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
  }

  Registry registry_;
  Counter* counter_ = nullptr;
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, ServesMetricsWithPrometheusContentType) {
  httplib::Client client("127.0.0.1", server_->port());
  httplib::Result result = client.Get("/metrics");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->get_header_value("Content-Type"),
            "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(result->body, registry_.Render());
  EXPECT_THAT(result->body, HasSubstr("scrapes_seen_total 41\n"));

  // Each scrape renders afresh.
  counter_->Increment();
  result = client.Get("/metrics");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_THAT(result->body, HasSubstr("scrapes_seen_total 42\n"));
}

TEST_F(MetricsServerTest, RawHttpRequest) {
  const std::string response = RawExchange(
      server_->port(),
      "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("\r\nContent-Type: text/plain; "
                                  "version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(response, HasSubstr("\r\n\r\n# HELP scrapes_seen_total Test "
                                  "counter.\n# TYPE scrapes_seen_total "
                                  "counter\nscrapes_seen_total 41\n"));
}

TEST_F(MetricsServerTest, OtherPathsAre404) {
  httplib::Client client("127.0.0.1", server_->port());
  for (const char* path : {"/", "/metric", "/metrics/x", "/healthz"}) {
    httplib::Result result = client.Get(path);
    ASSERT_TRUE(result) << path;
    EXPECT_EQ(result->status, 404) << path;
    EXPECT_THAT(result->body, ::testing::Not(HasSubstr("scrapes_seen_total")));
  }
}

TEST_F(MetricsServerTest, StopClosesThePortPromptly) {
  const int port = server_->port();
  const auto start = std::chrono::steady_clock::now();
  server_->Stop();
  server_->Stop();  // idempotent
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(1));
  EXPECT_FALSE(client.Get("/metrics"));
  server_.reset();  // the destructor after Stop() is fine too
}

TEST_F(MetricsServerTest, StopWithAnOpenKeepAliveConnection) {
  httplib::Client client("127.0.0.1", server_->port());
  client.set_keep_alive(true);
  ASSERT_TRUE(client.Get("/metrics"));
  const auto start = std::chrono::steady_clock::now();
  server_.reset();
  // Closing does not wait for the idle connection.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

// Opens a TCP connection to 127.0.0.1:port and returns its descriptor (-1
// on failure); the caller closes it.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Clients that connect and then say nothing (or stop halfway through a
// request) must not take the server's workers: a scrape is still answered
// at once. With a worker blocked per connection until its read timeout,
// 300 such connections stalled scrapes for minutes.
TEST_F(MetricsServerTest, IdleConnectionsDoNotStallScrapes) {
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    const int fd = Connect(server_->port());
    ASSERT_GE(fd, 0) << "connection " << i;
    if (i % 2 == 1) {
      const std::string partial = "GET /metr";
      ASSERT_EQ(write(fd, partial.data(), partial.size()),
                static_cast<ssize_t>(partial.size()));
    }
    idle.push_back(fd);
  }
  httplib::Client client("127.0.0.1", server_->port());
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(5));
  const auto start = std::chrono::steady_clock::now();
  httplib::Result result = client.Get("/metrics");
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(result) << "no answer within 5 s with 300 idle connections";
  EXPECT_EQ(result->status, 200);
  EXPECT_THAT(result->body, HasSubstr("scrapes_seen_total 41"));
  EXPECT_LT(elapsed, std::chrono::seconds(1));
  std::printf("scrape with 300 idle connections held: %.1f ms\n",
              std::chrono::duration<double, std::milli>(elapsed).count());
  for (int fd : idle) close(fd);
}

// Past the connection cap the oldest idle connection is closed, so new
// clients (a scraper) always get in and descriptors stay bounded.
TEST(MetricsServerOptionsTest, ConnectionCapClosesTheOldestIdle) {
  Registry registry;
  MetricsServerOptions options;
  options.max_connections = 8;
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1", 0, &registry, options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) {
    const int fd = Connect((*server)->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  const std::string response =
      RawExchange((*server)->port(),
                  "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: "
                  "close\r\n\r\n");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200"));
  // The first connections were closed by the server: a read sees EOF.
  char byte;
  timeval timeout = {5, 0};
  setsockopt(idle[0], SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  EXPECT_EQ(read(idle[0], &byte, 1), 0);
  for (int fd : idle) close(fd);
}

// A client that sends nothing is dropped after the read timeout.
TEST(MetricsServerOptionsTest, SilentClientIsDroppedAfterTheReadTimeout) {
  Registry registry;
  MetricsServerOptions options;
  options.read_timeout = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1", 0, &registry, options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd = Connect((*server)->port());
  ASSERT_GE(fd, 0);
  timeval timeout = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  char byte;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(read(fd, &byte, 1), 0);  // EOF, not the 10 s receive timeout
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  close(fd);
}

// A client that asks and never reads its (large) answer is dropped after
// the timeout instead of holding its connection, and the slot, forever; and
// while every slot is busy answering, a new connection is closed at once.
TEST(MetricsServerOptionsTest, ClientThatDoesNotReadIsDropped) {
  constexpr size_t kHelpBytes = 16 << 20;
  Registry registry;
  ASSERT_TRUE(
      registry.AddCounter("big_total", std::string(kHelpBytes, 'h')).ok());
  MetricsServerOptions options;
  options.read_timeout = absl::Milliseconds(300);
  options.max_connections = 1;
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1", 0, &registry, options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const int stalled = Connect(port);
  ASSERT_GE(stalled, 0);
  int small = 4096;
  setsockopt(stalled, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(write(stalled, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  // The one slot is answering: a second client is closed at once.
  const std::string refused = RawExchange(port, request);
  EXPECT_TRUE(refused.empty()) << "got " << refused.size() << " bytes";

  // Past the timeout the server has given up on the stalled client, so its
  // slot is free: a new client is answered (before the fix, the stalled
  // answer held the slot forever).
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(std::chrono::seconds(10));
  httplib::Result result = client.Get("/metrics");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  close(stalled);
}

// An oversized request head is refused, not buffered.
TEST_F(MetricsServerTest, OversizedRequestIsRefused) {
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " +
                              std::string(64 << 10, 'a') + "\r\n\r\n";
  const std::string response = RawExchange(server_->port(), request);
  EXPECT_THAT(response, ::testing::Not(HasSubstr("scrapes_seen_total")));
}

TEST(MetricsServerStartTest, PortInUseIsUnavailable) {
  Registry registry;
  absl::StatusOr<std::unique_ptr<MetricsServer>> first =
      MetricsServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<MetricsServer>> second =
      MetricsServer::Start("127.0.0.1", (*first)->port(), &registry);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("cannot bind"));
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat(":", (*first)->port())));
}

TEST(MetricsServerStartTest, BadPortIsInvalidArgument) {
  Registry registry;
  EXPECT_EQ(MetricsServer::Start("127.0.0.1", 70000, &registry).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start("127.0.0.1", -1, &registry).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MetricsServerStartTest, StartStopLoop) {
  Registry registry;
  for (int i = 0; i < 50; ++i) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> server =
        MetricsServer::Start("127.0.0.1", 0, &registry);
    ASSERT_TRUE(server.ok()) << server.status();
  }
}

}  // namespace
}  // namespace lookahead::metrics
