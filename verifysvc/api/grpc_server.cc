#include "verifysvc/api/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "common/port_file.h"

namespace lookahead::verifysvc {

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& host, int port, const std::string& port_file,
    std::shared_ptr<grpc::ServerCredentials> credentials,
    grpc::Service* service, int* bound_port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  *bound_port = 0;
  builder.AddListeningPort(absl::StrCat(host, ":", port),
                           std::move(credentials), bound_port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *bound_port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", host, ":", port,
        " (is the port free? with TLS: do --tls_cert_file and --tls_key_file "
        "hold a matching certificate and key?)"));
  }
  if (!port_file.empty()) {
    absl::Status written = WritePortFile(port_file, *bound_port);
    if (!written.ok()) {
      server->Shutdown();
      return written;
    }
  }
  return server;
}

}  // namespace lookahead::verifysvc
