// draftsvc's run from start to stop (server_main.h): wires the parts; every
// setting comes from config.h.
#include "draftsvc/service/server_main.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "common/port_file.h"
#include "common/shutdown_signal.h"
#include "draftsvc/service/config.h"
#include "draftsvc/service/draft_service.h"

namespace lookahead::draftsvc {
namespace {

// Prints what Open() found: the rebuild, the assistant, and what WAL
// recovery dropped (a warning if acknowledged writes were lost).
void PrintOpened(DraftServer* draft, const DraftServerOptions& options) {
  const RebuildStats& rebuild = draft->rebuild_stats();
  std::printf(
      "draftsvc: rebuilt %lld namespaces, %lld nodes, %lld n-gram pool "
      "entries from %s in %.3f s (sync=%d)\n",
      static_cast<long long>(rebuild.namespaces),
      static_cast<long long>(rebuild.nodes),
      static_cast<long long>(rebuild.ngram_entries), options.db_path.c_str(),
      rebuild.seconds, options.store.sync ? 1 : 0);
  if (const AssistantEngine* assistant = draft->assistant_engine()) {
    std::printf("draftsvc: assistant model %s\n",
                assistant->description().c_str());
  }
  const WalRecoveryReport& wal = draft->store().wal_recovery();
  if (wal.LostAcknowledged() || wal.rocksdb_dropped_bytes > 0 ||
      wal.records_ignored > 0) {
    std::fprintf(stderr, "draftsvc: %strie store %s: %s\n",
                 wal.LostAcknowledged() ? "WARNING: " : "",
                 options.db_path.c_str(), wal.Summary().c_str());
  }
}

// The gRPC server of `draft` on config's host and port, with the health
// service and reflection; sets *port to the bound one. Null (the error
// printed) if it cannot listen.
std::unique_ptr<grpc::Server> StartGrpcServer(
    const DraftsvcConfig& config,
    const std::shared_ptr<grpc::ServerCredentials>& credentials,
    DraftServer* draft, int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(config.host, ":", config.port),
                           credentials, port);
  builder.RegisterService(draft->service());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) {
    std::fprintf(stderr,
                 "draftsvc: cannot listen on %s:%d (is the port free? with "
                 "TLS: do --tls_cert_file and --tls_key_file hold a matching "
                 "certificate and key?)\n",
                 config.host.c_str(), config.port);
    return nullptr;
  }
  return server;
}

// Serves `draft` until a signal, then stops: RPCs drain within the grace,
// /metrics stops, the store is flushed and closed. Returns the exit code.
int ServeUntilSignal(
    const DraftsvcConfig& config,
    const std::shared_ptr<grpc::ServerCredentials>& credentials,
    DraftServer* draft, metrics::MetricsServer* metrics_server,
    ShutdownSignal* shutdown) {
  int port = 0;
  std::unique_ptr<grpc::Server> server =
      StartGrpcServer(config, credentials, draft, &port);
  if (server == nullptr) return kExitFailed;
  // "lookahead.v1.DraftService.storage" follows the store; "" stays SERVING.
  draft->ReportHealthTo(server->GetHealthCheckService());
  // Declared after `server`, so it runs first on every return: the store's
  // writer thread must not reach the health service once it is destroyed.
  absl::Cleanup detach_health = [draft] { draft->ReportHealthTo(nullptr); };
  std::printf("draftsvc: serving on %s:%d (%s)\n", config.host.c_str(), port,
              config.transport.c_str());
  std::fflush(stdout);
  if (!config.port_file.empty()) {
    absl::Status written = WritePortFile(config.port_file, port);
    if (!written.ok()) {
      std::fprintf(stderr, "draftsvc: %s\n", written.ToString().c_str());
      server->Shutdown();
      return kExitFailed;
    }
  }

  const int signal = shutdown->Wait();
  std::printf("draftsvc: signal %d, shutting down\n", signal);
  std::fflush(stdout);
  server->Shutdown(std::chrono::system_clock::now() +
                   absl::ToChronoMilliseconds(config.shutdown_grace));
  server->Wait();
  if (metrics_server != nullptr) metrics_server->Stop();
  absl::Status closed = draft->Close();
  if (!closed.ok()) {
    std::fprintf(stderr, "draftsvc: closing the store: %s\n",
                 closed.ToString().c_str());
    // Unavailable: stopped degraded with updates that were never written.
    return closed.code() == absl::StatusCode::kUnavailable ? kExitUnpersisted
                                                           : kExitFailed;
  }
  std::printf("draftsvc: flushed and closed %s\n",
              config.server.db_path.c_str());
  return kExitStopped;
}

int Run(ShutdownSignal* shutdown, const OptionsHook& customize) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFromFlags();
  if (!credentials.ok()) {
    std::fprintf(stderr, "draftsvc: %s\n",
                 credentials.status().ToString().c_str());
    return kExitFailed;
  }
  absl::StatusOr<DraftsvcConfig> config = ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "draftsvc: %s\n",
                 std::string(config.status().message()).c_str());
    return kExitFailed;
  }
  DraftServerOptions& options = config->server;
  if (customize) customize(&options);

  // The store, the index and the assistant.
  metrics::Registry registry;
  options.metrics = &registry;
  shutdown->SetPhase(options.assistant.model_path.empty()
                         ? "recovering the trie store"
                         : "recovering the trie store and loading the "
                           "assistant model");
  absl::StatusOr<std::unique_ptr<DraftServer>> draft =
      DraftServer::Open(options);
  if (!draft.ok()) {
    std::fprintf(stderr, "draftsvc: %s\n", draft.status().ToString().c_str());
    return kExitFailed;
  }
  PrintOpened(draft->get(), options);

  // /metrics, then the gRPC port until a signal.
  absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> metrics_server =
      metrics::ServeMetrics(config->host, config->metrics_port,
                            config->metrics_port_file, &registry);
  if (!metrics_server.ok()) {
    std::fprintf(stderr, "draftsvc: metrics: %s\n",
                 metrics_server.status().ToString().c_str());
    return kExitFailed;
  }
  if (*metrics_server != nullptr) {
    std::printf("draftsvc: metrics on http://%s:%d/metrics\n",
                config->host.c_str(), (*metrics_server)->port());
  }
  return ServeUntilSignal(*config, *credentials, draft->get(),
                          metrics_server->get(), shutdown);
}

}  // namespace

int DraftsvcMain(int argc, char** argv, const OptionsHook& customize) {
  absl::SetProgramUsageMessage(
      "Serves lookahead.v1.DraftService: draft trees from a RocksDB-persisted "
      "global token trie.");
  absl::InitializeSymbolizer(argv[0]);
  // A crash prints its signal and stack trace to stderr before dying.
  absl::InstallFailureSignalHandler({});
  // SIGTERM and SIGINT are an orderly stop in every phase, never the
  // failure handler's banner.
  ShutdownSignal shutdown("draftsvc");
  absl::ParseCommandLine(argc, argv);
  return Run(&shutdown, customize);
}

}  // namespace lookahead::draftsvc
