// Both services' /metrics endpoints under 300 idle and half-open
// connections each: a scrape is still answered in under a second. On the
// thread-per-connection server it replaced, such clients stalled scrapes for
// more than 15 s, blinding monitoring exactly when something was wrong.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/service_pair.h"

namespace lookahead::testing {
namespace {

constexpr int kIdleConnections = 300;

// Connects to 127.0.0.1:port; half of the connections send the start of a
// request and stop. Returns the descriptors (the caller closes them).
std::vector<int> HoldIdleConnections(int port) {
  std::vector<int> fds;
  for (int i = 0; i < kIdleConnections; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      break;
    }
    if (i % 2 == 1 && write(fd, "GET /metr", 9) != 9) {
      close(fd);
      break;
    }
    fds.push_back(fd);
  }
  return fds;
}

void ExpectPromptScrape(const char* service, int port,
                        const std::string& series) {
  const std::vector<int> idle = HoldIdleConnections(port);
  EXPECT_EQ(idle.size(), kIdleConnections) << service;
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(10));
  client.set_read_timeout(std::chrono::seconds(10));
  const auto start = std::chrono::steady_clock::now();
  httplib::Result result = client.Get("/metrics");
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  for (int fd : idle) close(fd);
  ASSERT_TRUE(result) << service << ": no scrape within 10 s";
  EXPECT_EQ(result->status, 200) << service;
  EXPECT_THAT(result->body, ::testing::HasSubstr(series)) << service;
  EXPECT_LT(ms, 1000) << service;
  std::printf("%s: scrape in %.1f ms with %d idle connections held\n", service,
              ms, kIdleConnections);
}

TEST(ServiceMetricsIdleTest, ScrapesAreAnsweredWithIdleConnectionsHeld) {
  PairOptions options;
  options.name = "metrics_idle";
  auto started = ServicePair::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServicePair& pair = **started;
  ExpectPromptScrape("draftsvc", pair.draftsvc_metrics_port(),
                     "lookahead_draft_sessions");
  ExpectPromptScrape("verifysvc", pair.verifysvc_metrics_port(), "lookahead_");
}

}  // namespace
}  // namespace lookahead::testing
