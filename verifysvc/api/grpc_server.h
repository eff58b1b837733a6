// StartGrpcServer: the gRPC front end's listener: `service` plus gRPC
// health and server reflection on host:port over `credentials` (TLS or
// plaintext: common/tls_files.h), the bound port written to `port_file` (if
// not empty) once serving. Health and reflection need no API key.
#ifndef LOOKAHEAD_VERIFYSVC_API_GRPC_SERVER_H_
#define LOOKAHEAD_VERIFYSVC_API_GRPC_SERVER_H_

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace lookahead::verifysvc {

// UNAVAILABLE naming the address if it cannot listen (or the TLS files
// hold no usable certificate and key); the port file's error if it cannot
// be written (the server is then shut down). `service` is not owned and
// must outlive the server. *bound_port: the port in use.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& host, int port, const std::string& port_file,
    std::shared_ptr<grpc::ServerCredentials> credentials,
    grpc::Service* service, int* bound_port);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_API_GRPC_SERVER_H_
