// verifysvc: serves lookahead.v1.GenerationService, one batched tree-masked
// forward pass of a GGUF model per step for every running request, drafted
// in process and by draftsvc. Wires the parts; every setting is config.h's.
//
//   verifysvc --port=50051 --draftsvc=HOST:PORT[,HOST:PORT...] [--model=F]

#include <grpcpp/health_check_service_interface.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/metrics_http.h"
#include "common/shutdown_signal.h"
#include "common/status_macros.h"
#include "engine/gguf/model_files.h"
#include "engine/model/device_options.h"
#include "verifysvc/api/generation_service.h"
#include "verifysvc/api/grpc_server.h"
#include "verifysvc/api/model_info.h"
#include "verifysvc/config.h"
#include "verifysvc/draftsvc_client/sharded_draft_source.h"
#include "verifysvc/serving/prometheus_observer.h"
#include "verifysvc/serving/step_cost.h"

namespace lookahead::verifysvc {
namespace {

absl::Status Run(VerifysvcConfig c, ShutdownSignal* shutdown) {
  RETURN_IF_ERROR(engine::ConfigureThreads(c.threads));
  ASSIGN_OR_RETURN(auto http, StartHttpFront(c));  // 503 until Attach

  // The model, its tokenizer, and the limits they imply.
  shutdown->SetPhase("loading the model");
  const absl::Time load_start = absl::Now();
  ASSIGN_OR_RETURN(std::unique_ptr<engine::GgufFile> file,
                   engine::OpenModelFile(c.model_path));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Tokenizer> tokenizer,
                   engine::Tokenizer::FromGguf(*file, c.tokenizer));
  ASSIGN_OR_RETURN(engine::ModelConfig probe,
                   engine::ModelConfig::FromGguf(*file));
  FitLimitsToModel(probe, &c.limits);
  c.model.max_cache_tokens = c.limits.max_context_tokens;
  ASSIGN_OR_RETURN(std::unique_ptr<engine::LlamaModel> model,
                   engine::LlamaModel::Load(*file, c.model));
  file->ReleaseMappedPages();  // the model holds its own copy
  std::printf("verifysvc: model %s (%s, %d layers), weights %s, in %.1f s\n",
              c.model_path.c_str(), probe.architecture.c_str(),
              probe.block_count, model->DescribeWeights().c_str(),
              absl::ToDoubleSeconds(absl::Now() - load_start));

  // What one forward pass costs here, by tokens: the draft budget's basis.
  shutdown->SetPhase("measuring the step cost");
  ASSIGN_OR_RETURN(StepCostModel cost,
                   MeasureStepCost(*model, {1, 2, 3, 4, 8, 16, 32, 64},
                                   /*context=*/128, /*repeats=*/5));
  std::printf("verifysvc: forward ms by tokens %s\n",
              DescribeStepCost(cost).c_str());

  // The draft sources, the assistant's load among them.
  shutdown->SetPhase("loading the draft sources");
  ASSIGN_OR_RETURN(DraftSources drafts, MakeDraftSources(c, probe.vocab_size));
  DraftFanout fanout(drafts.ordered, probe.vocab_size, c.draft_cascade);

  // Metrics, labelled with the model's name.
  metrics::Registry registry;
  ASSIGN_OR_RETURN(
      std::unique_ptr<VerifierMetrics> verifier_metrics,
      VerifierMetrics::Create(&registry, ModelName(*file, c.model_path), 32));
  verifier_metrics->kv_cache_capacity_tokens->Set(
      double(c.scheduler.max_running) * c.limits.max_context_tokens);
  if (drafts.draftsvc != nullptr) {
    RETURN_IF_ERROR(AddDraftShardMetrics(&registry, drafts.draftsvc.get()));
  }
  PrometheusObserver observer(verifier_metrics.get());
  c.scheduler.observer = &observer;
  ASSIGN_OR_RETURN(auto prefix_cache, AttachPrefixCache(*model, &c));

  ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                   Scheduler::Create(model.get(), tokenizer.get(), &fanout,
                                     std::move(cost), c.scheduler));
  GenerationServiceImpl service(
      tokenizer.get(), scheduler.get(), c.limits,
      MakeModelInfo(*file, c.model_path, *model, *tokenizer, c.limits),
      c.api_keys.get());
  if (http != nullptr) {
    http->Attach({tokenizer.get(), scheduler.get(), c.limits,
                  c.served_model_name});
  }
  ASSIGN_OR_RETURN(auto metrics_server, StartMetricsServer(c, &registry));

  int port = 0;
  ASSIGN_OR_RETURN(std::unique_ptr<grpc::Server> server,
                   StartGrpcServer(c.host, c.port, c.port_file,
                                   c.grpc_credentials, &service, &port));
  std::printf("verifysvc: serving on %s:%d (draftsvc %s; %s)\n", c.host.c_str(),
              port, c.draftsvc.empty() ? "off" : c.draftsvc.c_str(),
              DescribeSecurity(c).c_str());
  std::fflush(stdout);

  const int signal = shutdown->Wait();
  std::printf("verifysvc: signal %d, finishing running requests\n", signal);
  server->GetHealthCheckService()->SetServingStatus(false);
  if (http != nullptr) http->Drain();  // new HTTP requests: 503
  // New requests now get UNAVAILABLE; running ones finish within the grace.
  scheduler->Shutdown(c.shutdown_grace);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->Wait();
  if (metrics_server != nullptr) metrics_server->Stop();
  std::printf("verifysvc: stopped after %s\n",
              Scheduler::Describe(scheduler->Stats()).c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace lookahead::verifysvc

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves lookahead.v1.GenerationService: lossless lookahead decoding "
      "of a GGUF model with draft trees from its own text and draftsvc.");
  absl::InitializeSymbolizer(argv[0]);
  absl::InstallFailureSignalHandler({});  // a crash prints its stack
  // SIGTERM/SIGINT: an orderly stop in every phase, never the banner.
  lookahead::ShutdownSignal shutdown("verifysvc");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<lookahead::verifysvc::VerifysvcConfig> config =
      lookahead::verifysvc::ConfigFromFlags();
  absl::Status status =
      config.ok() ? lookahead::verifysvc::Run(*std::move(config), &shutdown)
                  : config.status();
  if (!status.ok()) {
    std::fprintf(stderr, "verifysvc: %s\n", status.ToString().c_str());
    return lookahead::kExitFailed;
  }
  return lookahead::kExitStopped;
}
