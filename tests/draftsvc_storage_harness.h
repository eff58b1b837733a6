// Helpers of the draftsvc storage tests (draftsvc_storage_*_test,
// draftsvc_wal_*_test): start the real draftsvc binary on a directory, ask
// its health service about a named service, read one series from its
// /metrics, and drive sessions. Thread-compatible.
#ifndef LOOKAHEAD_TESTS_DRAFTSVC_STORAGE_HARNESS_H_
#define LOOKAHEAD_TESTS_DRAFTSVC_STORAGE_HARNESS_H_

#include <grpcpp/channel.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/draft.grpc.pb.h"
#include "tests/server_process.h"

namespace lookahead::testing {

// The draftsvc binary (env DRAFTSVC_BINARY) and a fresh work directory
// below TEST_TMPDIR.
std::string DraftsvcBinary();
std::string FreshDir(const std::string& name);

// A running draftsvc: its process, port, metrics port and stub.
struct Draftsvc {
  std::unique_ptr<ServerProcess> process;
  int port = 0;          // 0: it did not start (see process->Log()).
  int metrics_port = 0;  // 0: unknown.
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<lookahead::v1::DraftService::Stub> stub;
};

// Starts draftsvc on `db_path` with `flags` added; waits for its port.
// Flags with --testing_store_fault_file start $DRAFTSVC_FAULT_BINARY
// (//draftsvc/testing:draftsvc_fault_testing) instead of $DRAFTSVC_BINARY.
Draftsvc StartDraftsvc(const std::string& db_path, const std::string& work_dir,
                       const std::string& name,
                       const std::vector<std::string>& flags);

// grpc.health.v1 Check of `service`: 1 SERVING, 2 NOT_SERVING, -1 error.
int HealthStatus(std::shared_ptr<grpc::Channel> channel,
                 const std::string& service);

// The value of the first /metrics line starting with `series` (e.g.
// "lookahead_store_degraded "), or nullopt.
std::optional<double> ScrapeMetric(int metrics_port, const std::string& series);

// Opens session `id` in namespace "storage" with a short prompt.
grpc::Status OpenSession(lookahead::v1::DraftService::Stub& stub,
                         const std::string& id);
// One Step of `id` with `tokens` accepted and a draft of 16 asked for.
grpc::Status Step(lookahead::v1::DraftService::Stub& stub,
                  const std::string& id, const std::vector<int32_t>& tokens,
                  lookahead::v1::SessionDraft* out);
grpc::Status Stats(lookahead::v1::DraftService::Stub& stub,
                   lookahead::v1::StatsResponse* out);

}  // namespace lookahead::testing

#endif  // LOOKAHEAD_TESTS_DRAFTSVC_STORAGE_HARNESS_H_
