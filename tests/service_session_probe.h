// Looking at service processes from outside, for the session lease tests: a
// lone real draftsvc binary on loopback, a process's pid and resident memory,
// and one sample of a server's Prometheus /metrics. Linux only (/proc).
//
// Thread-compatible: each LoneDraftsvc is used from one thread at a time;
// the free functions are thread-safe.
#ifndef LOOKAHEAD_TESTS_SERVICE_SESSION_PROBE_H_
#define LOOKAHEAD_TESTS_SERVICE_SESSION_PROBE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/draft.grpc.pb.h"
#include "tests/server_process.h"

namespace lookahead::testing {

// The pid of the running process whose command line holds exactly `arg`
// (e.g. its unique "--port_file=..."), or -1.
pid_t FindPidByArg(const std::string& arg);

// VmRSS of `pid` in bytes, or -1 if it cannot be read.
int64_t RssBytes(pid_t pid);

// The value of the unlabeled sample `name` in the /metrics page served on
// 127.0.0.1:`port`; NOT_FOUND if absent, UNAVAILABLE if the scrape fails.
absl::StatusOr<double> ScrapeMetric(int port, const std::string& name);
// The sum of the samples of the labeled series `name` whose labels include
// every one of `labels` (each as exposed, e.g. `decision="run"`); 0 if none
// match, UNAVAILABLE if the scrape fails.
absl::StatusOr<double> ScrapeMetricSum(int port, const std::string& name,
                                       const std::vector<std::string>& labels);

// A real draftsvc (env DRAFTSVC_BINARY) on free loopback ports with a fresh
// database below $TEST_TMPDIR/<name>, plus a stub to it.
class LoneDraftsvc {
 public:
  static absl::StatusOr<std::unique_ptr<LoneDraftsvc>> Start(
      const std::string& name, const std::vector<std::string>& flags);
  ~LoneDraftsvc() = default;  // The process is SIGKILLed.

  lookahead::v1::DraftService::Stub& stub() { return *stub_; }
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  std::string Log() const { return process_->Log(); }

 private:
  LoneDraftsvc() = default;

  std::unique_ptr<ServerProcess> process_;
  std::unique_ptr<lookahead::v1::DraftService::Stub> stub_;
  int metrics_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace lookahead::testing

#endif  // LOOKAHEAD_TESTS_SERVICE_SESSION_PROBE_H_
