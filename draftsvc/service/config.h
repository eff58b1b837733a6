// DraftsvcConfig: every setting of the draftsvc binary, read from its flags
// in one place (config.cc defines the flags; `draftsvc --help`). Reading is
// not thread-safe with flag changes: call it once, after
// absl::ParseCommandLine.
#ifndef LOOKAHEAD_DRAFTSVC_SERVICE_CONFIG_H_
#define LOOKAHEAD_DRAFTSVC_SERVICE_CONFIG_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "draftsvc/service/draft_service.h"

namespace lookahead::draftsvc {

struct DraftsvcConfig {
  // --host: the address of the gRPC and /metrics ports.
  std::string host;
  int port = 0;           // 0: a free one
  std::string port_file;  // written once serving; empty = none
  // How the gRPC port is served, as the start line says it: "mutual TLS",
  // "TLS" or "plaintext" (from the --tls_* flags).
  std::string transport;
  // The store, the index, the sources and the assistant. server.metrics is
  // left null: the caller points it at its registry.
  DraftServerOptions server;
  int metrics_port = 0;  // -1: no /metrics; 0: a free one
  std::string metrics_port_file;
  // On SIGTERM/SIGINT, in-flight RPCs get this long before they are
  // cancelled.
  absl::Duration shutdown_grace;
};

// The gRPC port's credentials from the TLS flags, after the loopback rule:
// without client certificates (--tls_client_ca_file), only a loopback --host
// unless --allow_unauthenticated. Errors as CheckListenHost and
// MakeServerCredentials (they name the flag and file).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
ServerCredentialsFromFlags();

// Reads the flags (after absl::ParseCommandLine). INVALID_ARGUMENT whose
// message names the flag and its value for an unknown --wal_recovery, a
// negative --session_lease_s, a bad --draft_sources, --self_draft with
// --assistant_model, or --assistant_deadline_ms outside [0, 1000]; the
// other values are checked when the server opens.
absl::StatusOr<DraftsvcConfig> ConfigFromFlags();

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SERVICE_CONFIG_H_
