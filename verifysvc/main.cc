// verifysvc: serves lookahead.v1.GenerationService. Loads a GGUF model, and
// decodes every running request in one batched, tree-masked forward pass per
// step with drafts from draftsvc (optional at run time).
//
//   verifysvc --port=50051 --draftsvc=127.0.0.1:50061 [--model=FILE.gguf]

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "common/port_file.h"
#include "common/status_macros.h"
#include "verifysvc/device_options.h"
#include "verifysvc/draft_client.h"
#include "verifysvc/draft_sessions.h"
#include "verifysvc/generation_service.h"
#include "verifysvc/llama_model.h"
#include "verifysvc/model_files.h"
#include "verifysvc/scheduler.h"
#include "verifysvc/threading.h"
#include "verifysvc/tokenizer.h"
#include "verifysvc/verifier_metrics.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 50051, "Port to listen on; 0 picks a free one.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here once serving.");
ABSL_FLAG(std::string, model, "",
          "GGUF model file; empty = the default model in the model cache "
          "(tools/setup.sh puts SmolLM2-135M-Instruct there).");
ABSL_FLAG(std::string, draftsvc, "127.0.0.1:50061",
          "draftsvc address; empty = no drafts (plain decoding).");
ABSL_FLAG(std::string, replica_id, "",
          "Prefix of this replica's draftsvc session ids; empty = "
          "<hostname>-<pid>-<start time>.");
ABSL_FLAG(int, max_running, 16, "Sequences decoded together (batch slots).");
ABSL_FLAG(int, max_queued, 64,
          "Requests waiting for a slot; beyond it RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_context_tokens, 2048,
          "Most prompt + output tokens per request (0 = the model's context "
          "length).");
ABSL_FLAG(int, max_prompt_tokens, 0,
          "Most prompt tokens per request; 0 = max_context_tokens - 1.");
ABSL_FLAG(int, default_max_new_tokens, 256,
          "Output limit of a request that sets max_new_tokens = 0.");
ABSL_FLAG(int, decoding_length, 32,
          "Draft tokens per sequence per step at most (requests may ask for "
          "up to --max_decoding_length); the scheduler gives fewer when they "
          "do not pay for their cost in the forward pass.");
ABSL_FLAG(int, max_decoding_length, 64, "Largest decoding_length allowed.");
ABSL_FLAG(int, branch_length, 16,
          "Draft branch depth: most draft tokens one step can accept "
          "(bench/results: RAG decode speedup 1.64x at 8, 1.77x at 16, 1.81x "
          "at 24, with decoding_length 32).");
ABSL_FLAG(int, max_step_tokens, 64,
          "Most tokens (roots + drafts + prefill) in one forward pass.");
ABSL_FLAG(int, prefill_chunk_tokens, 64,
          "Prompt tokens prefilled per step while other sequences decode.");
ABSL_FLAG(int, draft_deadline_ms, 20,
          "Deadline of each step's draftsvc call; later drafts are skipped.");
ABSL_FLAG(int, metrics_port, 9090,
          "Port of the Prometheus /metrics HTTP endpoint; 0 picks a free one, "
          "-1 turns it off.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "If set, the bound metrics port is written here.");
ABSL_FLAG(int, log_every_steps, 0,
          "Print a scheduler line every this many steps; 0 = never.");
ABSL_FLAG(int, blas_threads, lookahead::verifysvc::DefaultBlasThreads(),
          "OpenBLAS threads (default: 1 where the packed matmul kernel runs, "
          "else one per available core).");
ABSL_FLAG(int, intra_op_threads, 1, "LibTorch intra-op threads.");
ABSL_FLAG(int, matmul_threads, 0,
          "Threads sharing the packed AVX2/AVX-512 matmuls (default 0: one "
          "per available core; set the CPU limit in a container).");
ABSL_FLAG(bool, packed_linear, true,
          "Packed matmul kernel where the CPU has AVX2 or AVX-512 (false: "
          "OpenBLAS).");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, cuda or cuda:N (CUDA needs the build of tools/cuda_build.sh).");
ABSL_FLAG(std::string, dtype, "float32",
          "Weights, activations and KV cache: float32, bfloat16 or float16 "
          "(logits are float32). Lossless against plain decoding at the same "
          "dtype; bfloat16 suits GPUs.");
ABSL_FLAG(bool, cuda_kernels, true,
          "On CUDA: tree attention through kernels/cuda (false: LibTorch "
          "attention).");
ABSL_FLAG(int, shutdown_grace_ms, 10000,
          "On SIGTERM/SIGINT, running requests get this long to finish.");

namespace lookahead::verifysvc {
namespace {

std::string FileTypeName(uint32_t type) {
  // llama.cpp's LLAMA_FTYPE values (general.file_type).
  switch (type) {
    case 0:
      return "F32";
    case 1:
      return "F16";
    case 2:
      return "Q4_0";
    case 3:
      return "Q4_1";
    case 7:
      return "Q8_0";
    case 8:
      return "Q5_0";
    case 9:
      return "Q5_1";
    case 10:
      return "Q2_K";
    case 12:
      return "Q3_K_M";
    case 15:
      return "Q4_K_M";
    case 17:
      return "Q5_K_M";
    case 18:
      return "Q6_K";
    case 32:
      return "BF16";
    default:
      return absl::StrCat("type ", type);
  }
}

std::string DefaultReplicaId() {
  char host[256] = "verifysvc";
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "-", getpid(), "-",
                      absl::ToUnixMillis(absl::Now()));
}

absl::Status Run() {
  // Block the shutdown signals in every thread (all are created later) and
  // take them synchronously below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ThreadOptions threads;
  threads.blas_threads = absl::GetFlag(FLAGS_blas_threads);
  threads.intra_op_threads = absl::GetFlag(FLAGS_intra_op_threads);
  RETURN_IF_ERROR(ConfigureThreads(threads));

  std::string path = absl::GetFlag(FLAGS_model);
  if (path.empty()) path = DefaultModelPath();
  const absl::Time load_start = absl::Now();
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, OpenModelFile(path));
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                   Tokenizer::FromGguf(*file));
  const ModelConfig config_probe =
      ModelConfig::FromGguf(*file).value_or(ModelConfig());
  RequestLimits limits;
  limits.max_context_tokens = absl::GetFlag(FLAGS_max_context_tokens);
  if (limits.max_context_tokens <= 0 ||
      (config_probe.context_length > 0 &&
       limits.max_context_tokens > config_probe.context_length)) {
    limits.max_context_tokens = config_probe.context_length;
  }
  ModelOptions model_options;
  model_options.max_cache_tokens = limits.max_context_tokens;
  model_options.matmul_threads = absl::GetFlag(FLAGS_matmul_threads);
  model_options.packed_linear = absl::GetFlag(FLAGS_packed_linear);
  model_options.cuda_kernels = absl::GetFlag(FLAGS_cuda_kernels);
  RETURN_IF_ERROR(ParseDeviceOptions(
      absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_dtype), &model_options));
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                   LlamaModel::Load(*file, model_options));
  const ModelConfig& config = model->config();
  limits.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  if (limits.max_prompt_tokens <= 0 ||
      limits.max_prompt_tokens >= limits.max_context_tokens) {
    limits.max_prompt_tokens = limits.max_context_tokens - 1;
  }
  limits.default_max_new_tokens = absl::GetFlag(FLAGS_default_max_new_tokens);
  limits.default_decoding_length = absl::GetFlag(FLAGS_decoding_length);
  limits.max_decoding_length = absl::GetFlag(FLAGS_max_decoding_length);
  limits.default_branch_length = absl::GetFlag(FLAGS_branch_length);
  limits.vocab_size = config.vocab_size;
  if (limits.default_decoding_length < 0 ||
      limits.default_decoding_length > limits.max_decoding_length ||
      limits.default_max_new_tokens < 1 || limits.default_branch_length < 1) {
    return absl::InvalidArgumentError(
        "--decoding_length must be in [0, --max_decoding_length]; "
        "--default_max_new_tokens and --branch_length >= 1");
  }
  std::printf(
      "verifysvc: model %s (%s, %d layers, vocab %d) on %s loaded in %.1f "
      "s\n",
      path.c_str(), config.architecture.c_str(), config.block_count,
      config.vocab_size, DescribeDevice(model_options).c_str(),
      absl::ToDoubleSeconds(absl::Now() - load_start));

  // What one forward pass costs here, by tokens: the draft budget's basis.
  ASSIGN_OR_RETURN(StepCostModel cost,
                   MeasureStepCost(*model, {1, 2, 3, 4, 8, 16, 32, 64},
                                   /*context=*/128, /*repeats=*/2));
  std::vector<std::string> table;
  for (const auto& [tokens, seconds] : cost.points()) {
    table.push_back(absl::StrFormat("%d:%.1f", tokens, seconds * 1e3));
  }
  std::printf("verifysvc: forward ms by tokens %s\n",
              absl::StrJoin(table, " ").c_str());

  std::unique_ptr<DraftClient> draft_client;
  std::unique_ptr<DraftSessions> sessions;
  const std::string draftsvc = absl::GetFlag(FLAGS_draftsvc);
  if (!draftsvc.empty()) {
    DraftClientOptions client_options;
    client_options.step_deadline =
        absl::Milliseconds(absl::GetFlag(FLAGS_draft_deadline_ms));
    draft_client = DraftClient::Create(draftsvc, client_options);
    DraftSessionsOptions session_options;
    session_options.replica_id = absl::GetFlag(FLAGS_replica_id);
    if (session_options.replica_id.empty()) {
      session_options.replica_id = DefaultReplicaId();
    }
    sessions = std::make_unique<DraftSessions>(
        draft_client.get(), config.vocab_size, session_options);
  }

  // Series are labelled with the model's name (the file's if unnamed).
  std::string model_name = file->GetStringOr("general.name", "").value_or("");
  if (model_name.empty()) model_name = path.substr(path.rfind('/') + 1);
  metrics::Registry registry;
  ASSIGN_OR_RETURN(std::unique_ptr<VerifierMetrics> verifier_metrics,
                   VerifierMetrics::Create(&registry, model_name, 32));
  verifier_metrics->kv_cache_capacity_tokens->Set(
      double(absl::GetFlag(FLAGS_max_running)) * limits.max_context_tokens);
  if (sessions != nullptr) {
    RETURN_IF_ERROR(registry.AddGaugeCallback(
        "lookahead_draft_sessions_open",
        "draftsvc sessions this verifier holds open.",
        [s = sessions.get()] { return double(s->Stats().open_sessions); }));
  }

  SchedulerOptions scheduler_options;
  scheduler_options.metrics = verifier_metrics.get();
  scheduler_options.max_running = absl::GetFlag(FLAGS_max_running);
  scheduler_options.max_queued = absl::GetFlag(FLAGS_max_queued);
  scheduler_options.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  scheduler_options.prefill_chunk_tokens =
      absl::GetFlag(FLAGS_prefill_chunk_tokens);
  scheduler_options.log_every_steps = absl::GetFlag(FLAGS_log_every_steps);
  ASSIGN_OR_RETURN(
      std::unique_ptr<Scheduler> scheduler,
      Scheduler::Create(model.get(), tokenizer.get(), sessions.get(),
                        std::move(cost), scheduler_options));

  lookahead::v1::ModelInfoResponse info;
  info.set_name(model_name);
  info.set_architecture(config.architecture);
  info.set_vocab_size(config.vocab_size);
  info.set_context_length(limits.max_context_tokens);
  info.set_bos_token_id(tokenizer->bos_id());
  info.set_eos_token_id(tokenizer->eos_id());
  info.set_dtype("float32");
  info.set_device("cpu");
  info.set_model_file(path);
  info.set_file_type(
      FileTypeName(file->GetUint32Or("general.file_type", 0).value_or(0)));
  info.set_max_new_tokens(limits.default_max_new_tokens);
  info.set_max_prompt_tokens(limits.max_prompt_tokens);
  GenerationServiceImpl service(tokenizer.get(), scheduler.get(), limits,
                                std::move(info));

  const std::string host = absl::GetFlag(FLAGS_host);
  ASSIGN_OR_RETURN(
      std::unique_ptr<metrics::MetricsServer> metrics_server,
      metrics::ServeMetrics(host, absl::GetFlag(FLAGS_metrics_port),
                            absl::GetFlag(FLAGS_metrics_port_file), &registry));
  if (metrics_server != nullptr) {
    std::printf("verifysvc: metrics on http://%s:%d/metrics\n", host.c_str(),
                metrics_server->port());
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::StrCat(host, ":", absl::GetFlag(FLAGS_port)),
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":",
                                               absl::GetFlag(FLAGS_port)));
  }
  std::printf("verifysvc: serving on %s:%d (draftsvc %s)\n", host.c_str(), port,
              draftsvc.empty() ? "off" : draftsvc.c_str());
  std::fflush(stdout);
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    absl::Status written = WritePortFile(absl::GetFlag(FLAGS_port_file), port);
    if (!written.ok()) {
      server->Shutdown();
      return written;
    }
  }

  int signal = 0;
  sigwait(&signals, &signal);
  std::printf("verifysvc: signal %d, finishing running requests\n", signal);
  std::fflush(stdout);
  server->GetHealthCheckService()->SetServingStatus(false);
  // New requests now get UNAVAILABLE; running ones finish within the grace.
  scheduler->Shutdown(
      absl::Milliseconds(absl::GetFlag(FLAGS_shutdown_grace_ms)));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->Wait();
  if (metrics_server != nullptr) metrics_server->Stop();
  const lookahead::v1::GenerationStatsResponse stats = scheduler->Stats();
  std::printf(
      "verifysvc: stopped after %lld requests (%lld finished, %lld "
      "cancelled), %lld forward passes, %lld output tokens in %lld steps\n",
      static_cast<long long>(stats.requests_admitted()),
      static_cast<long long>(stats.requests_finished()),
      static_cast<long long>(stats.requests_cancelled()),
      static_cast<long long>(stats.forward_passes()),
      static_cast<long long>(stats.output_tokens()),
      static_cast<long long>(stats.decoding_steps()));
  return absl::OkStatus();
}

}  // namespace
}  // namespace lookahead::verifysvc

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves lookahead.v1.GenerationService: lossless lookahead decoding "
      "of a GGUF model with draft trees from draftsvc.");
  absl::InitializeSymbolizer(argv[0]);
  // A crash prints its signal and stack trace to stderr before dying.
  absl::InstallFailureSignalHandler({});
  absl::ParseCommandLine(argc, argv);
  absl::Status status = lookahead::verifysvc::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "verifysvc: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
