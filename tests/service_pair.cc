#include "tests/service_pair.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace lookahead::testing {
namespace {

// The port a server wrote to `path` (it does so before its gRPC port file,
// which the caller has already waited for); 0 if absent.
int ReadPort(const std::string& path) {
  std::ifstream in(path);
  int port = 0;
  in >> port;
  return port;
}

namespace v1 = ::lookahead::v1;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// Bazel's per-test scratch directory; /tmp when run by hand.
std::string TestTmpDir() {
  const std::string dir = Env("TEST_TMPDIR");
  return dir.empty() ? "/tmp" : dir;
}

absl::Status FromGrpc(const grpc::Status& status, const std::string& what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

// The last `max_bytes` of a server log: enough to see why it failed.
std::string Tail(const std::string& log, size_t max_bytes = 6000) {
  return log.size() <= max_bytes ? log : log.substr(log.size() - max_bytes);
}

// "running", or how the process ended.
std::string Describe(ChildProcess& process) {
  if (process.Running()) return "running";
  const int status = process.Kill(0);  // already reaped: its wait status
  if (WIFSIGNALED(status)) {
    return absl::StrCat("DIED of signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  if (WIFEXITED(status)) {
    return absl::StrCat("EXITED with status ", WEXITSTATUS(status));
  }
  return absl::StrCat("ended, wait status ", status);
}

std::shared_ptr<grpc::Channel> Loopback(int port) {
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                             grpc::InsecureChannelCredentials());
}

}  // namespace

v1::GenerateRequest ChatRequest(const std::string& user, int max_new_tokens) {
  v1::GenerateRequest request;
  v1::ChatMessage* message = request.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content(user);
  request.set_max_new_tokens(max_new_tokens);
  return request;
}

v1::GenerateRequest TokensRequest(const std::vector<int32_t>& ids,
                                  int max_new_tokens) {
  v1::GenerateRequest request;
  for (int32_t id : ids) request.mutable_tokens()->add_ids(id);
  request.set_max_new_tokens(max_new_tokens);
  return request;
}

void SetSeededSampling(v1::GenerateRequest* request, uint64_t seed) {
  v1::SamplingParams* sampling = request->mutable_sampling();
  sampling->set_temperature(0.8f);
  sampling->set_top_p(0.95f);
  sampling->set_seed(seed);
}

void SetDraftMode(v1::GenerateRequest* request, v1::DraftMode mode) {
  request->mutable_draft()->set_mode(mode);
}

std::string TokensToString(const std::vector<int32_t>& tokens) {
  return absl::StrCat("[", absl::StrJoin(tokens, " "), "]");
}

void ExpectSameTokens(const Generation& fast, const Generation& plain) {
  EXPECT_EQ(fast.tokens, plain.tokens)
      << "drafts: " << TokensToString(fast.tokens)
      << "\ndrafts off: " << TokensToString(plain.tokens);
}

ServicePair::ServicePair(PairOptions options)
    : options_(std::move(options)),
      dir_(absl::StrCat(TestTmpDir(), "/", options_.name)) {}

ServicePair::~ServicePair() {
  // verifysvc first, so it does not spend its last moments reconnecting.
  for (auto& replica : replicas_) {
    if (replica != nullptr) replica->Kill(SIGKILL);
  }
  if (verifysvc_ != nullptr) verifysvc_->Kill(SIGKILL);
  for (DraftShard& shard : shards_) {
    if (shard.process != nullptr) shard.process->Kill(SIGKILL);
  }
}

absl::StatusOr<std::unique_ptr<ServicePair>> ServicePair::Start(
    PairOptions options) {
  std::unique_ptr<ServicePair> pair(new ServicePair(std::move(options)));
  std::error_code error;
  std::filesystem::remove_all(pair->dir_, error);  // a fresh database
  std::filesystem::create_directories(pair->dir_, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", pair->dir_, ": ", error.message()));
  }
  if (pair->options_.with_draftsvc) {
    if (pair->options_.draftsvc_shards < 1) {
      return absl::InvalidArgumentError("PairOptions.draftsvc_shards < 1");
    }
    pair->shards_.resize(pair->options_.draftsvc_shards);
    for (int shard = 0; shard < pair->options_.draftsvc_shards; ++shard) {
      absl::Status started = pair->StartDraftsvc(shard, /*port=*/0);
      if (!started.ok()) return started;
    }
  }
  absl::Status started = pair->StartVerifysvc();
  if (!started.ok()) return started;
  return pair;
}

absl::Status ServicePair::StartDraftsvc(int shard, int port) {
  const std::string binary = Env("DRAFTSVC_BINARY");
  if (binary.empty())
    return absl::FailedPreconditionError("no DRAFTSVC_BINARY");
  // Shard 0 keeps the single-draftsvc names (db/, draftsvc.port, ...).
  const std::string suffix = shard == 0 ? "" : absl::StrCat(shard);
  const std::string name = absl::StrCat("draftsvc", suffix);
  const std::string metrics_file =
      absl::StrCat(dir_, "/", name, ".metrics_port");
  std::remove(metrics_file.c_str());
  std::vector<std::string> args = {
      binary,
      "--host=127.0.0.1",
      absl::StrCat("--port=", port),
      absl::StrCat("--db_path=", dir_, "/db", suffix),
      "--metrics_port=0",
      "--metrics_port_file=" + metrics_file};
  args.insert(args.end(), options_.draftsvc_flags.begin(),
              options_.draftsvc_flags.end());
  DraftShard& s = shards_[shard];
  ++s.starts;
  s.process = std::make_unique<ServerProcess>(
      std::move(args), absl::StrCat(dir_, "/", name, ".port"),
      absl::StrCat(dir_, "/", name, ".", s.starts, ".log"));
  const int bound = s.process->WaitForPort(options_.start_timeout_ms);
  if (bound <= 0 || (port != 0 && bound != port)) {
    return absl::UnavailableError(absl::StrCat(name, " did not start on port ",
                                               port, " (bound: ", bound, "):\n",
                                               Tail(s.process->Log())));
  }
  s.port = bound;
  s.metrics_port = ReadPort(metrics_file);
  s.stub = v1::DraftService::NewStub(Loopback(bound));
  return absl::OkStatus();
}

std::string ServicePair::draftsvc_address(int shard) const {
  return absl::StrCat("127.0.0.1:", shards_[shard].port);
}

int ServicePair::http_port(int replica) const {
  return replica >= 0 && replica < static_cast<int>(ports_.size())
             ? ports_[replica].http
             : 0;
}

int ServicePair::metrics_port(int replica) const {
  return replica >= 0 && replica < static_cast<int>(ports_.size())
             ? ports_[replica].metrics
             : 0;
}

v1::DraftService::Stub* ServicePair::drafts(int shard) {
  return shard >= 0 && shard < static_cast<int>(shards_.size())
             ? shards_[shard].stub.get()
             : nullptr;
}

absl::StatusOr<ServicePair::Ports> ServicePair::SpawnVerifysvc(
    int replica, const std::vector<std::string>& extra_flags,
    std::unique_ptr<ServerProcess>* process) {
  const std::string binary = Env("VERIFYSVC_BINARY");
  if (binary.empty()) {
    return absl::FailedPreconditionError("no VERIFYSVC_BINARY");
  }
  const std::string name =
      replica == 0 ? "verifysvc" : absl::StrCat("verifysvc", replica);
  const std::string metrics_file =
      absl::StrCat(dir_, "/", name, ".metrics_port");
  const std::string http_file = absl::StrCat(dir_, "/", name, ".http_port");
  std::remove(metrics_file.c_str());
  std::remove(http_file.c_str());
  std::vector<std::string> addresses;
  for (int shard = 0; shard < draftsvc_shards(); ++shard) {
    addresses.push_back(draftsvc_address(shard));
  }
  std::vector<std::string> args = {
      binary, "--host=127.0.0.1", "--port=0", "--metrics_port=0",
      "--metrics_port_file=" + metrics_file,
      // A free HTTP port each, so parallel tests never collide on 8000.
      "--http_port=0", "--http_port_file=" + http_file,
      absl::StrCat("--draftsvc=", absl::StrJoin(addresses, ","))};
  args.insert(args.end(), options_.verifysvc_flags.begin(),
              options_.verifysvc_flags.end());
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  // Extra flags for every verifysvc a test starts, e.g. "--device=cuda
  // --dtype=bfloat16" when tools/gpu_check.sh runs the suite on a GPU.
  for (absl::string_view flag : absl::StrSplit(Env("LOOKAHEAD_VERIFYSVC_FLAGS"),
                                               ' ', absl::SkipEmpty())) {
    args.emplace_back(flag);
  }
  *process = std::make_unique<ServerProcess>(
      std::move(args), absl::StrCat(dir_, "/", name, ".port"),
      absl::StrCat(dir_, "/", name, ".log"));
  Ports ports;
  ports.grpc = (*process)->WaitForPort(options_.start_timeout_ms);
  if (ports.grpc <= 0) {
    return absl::UnavailableError(
        absl::StrCat(name, " did not start:\n", Tail((*process)->Log())));
  }
  ports.metrics = ReadPort(metrics_file);
  ports.http = ReadPort(http_file);
  if (static_cast<int>(ports_.size()) <= replica) ports_.resize(replica + 1);
  ports_[replica] = ports;
  return ports;
}

absl::Status ServicePair::StartVerifysvc() {
  absl::StatusOr<Ports> ports = SpawnVerifysvc(0, {}, &verifysvc_);
  if (!ports.ok()) return ports.status();
  verifysvc_port_ = ports->grpc;
  verifysvc_metrics_port_ = ports->metrics;
  generation_ = v1::GenerationService::NewStub(Loopback(verifysvc_port_));
  return absl::OkStatus();
}

absl::StatusOr<int> ServicePair::StartReplica(
    std::vector<std::string> extra_flags) {
  const int replica = static_cast<int>(replicas_.size()) + 1;
  std::unique_ptr<ServerProcess> process;
  absl::StatusOr<Ports> ports = SpawnVerifysvc(replica, extra_flags, &process);
  replicas_.push_back(std::move(process));
  if (!ports.ok()) return ports.status();
  replica_stubs_.push_back(
      v1::GenerationService::NewStub(Loopback(ports->grpc)));
  return replica;
}

Generation ServicePair::Generate(const v1::GenerateRequest& request,
                                 const StreamHooks& hooks) {
  return GenerateOn(0, request, hooks);
}

Generation ServicePair::GenerateOn(int replica,
                                   const v1::GenerateRequest& request,
                                   const StreamHooks& hooks) {
  Generation out;
  v1::GenerationService::Stub* stub =
      replica == 0 ? generation_.get()
      : replica >= 1 && replica <= static_cast<int>(replica_stubs_.size())
          ? replica_stubs_[replica - 1].get()
          : nullptr;
  if (stub == nullptr) {
    out.status = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                              absl::StrCat("no verifysvc replica ", replica));
    return out;
  }
  grpc::ClientContext context;
  if (hooks.deadline_ms > 0) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(hooks.deadline_ms));
  }
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> stream =
      stub->Generate(&context, request);
  v1::GenerateResponse response;
  while (stream->Read(&response)) {
    ++out.messages;
    out.tokens.insert(out.tokens.end(), response.token_ids().begin(),
                      response.token_ids().end());
    out.text += response.text();
    out.logprobs.insert(out.logprobs.end(), response.logprobs().begin(),
                        response.logprobs().end());
    if (response.has_usage()) {
      out.usage = response.usage();
      out.has_usage = true;
    }
    if (hooks.on_message) hooks.on_message(&context, out.messages);
  }
  out.status = stream->Finish();
  return out;
}

Generation ServicePair::Reference(v1::GenerateRequest request) {
  SetDraftMode(&request, v1::DRAFT_MODE_OFF);
  return Generate(request);
}

absl::StatusOr<v1::GenerationStatsResponse> ServicePair::Stats() {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::GenerationStatsResponse response;
  absl::Status status = FromGrpc(
      generation_->Stats(&context, v1::GenerationStatsRequest(), &response),
      "verifysvc Stats");
  if (!status.ok()) return status;
  return response;
}

bool ServicePair::WaitForStats(
    const std::function<bool(const v1::GenerationStatsResponse&)>& done,
    int timeout_ms, v1::GenerationStatsResponse* last) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    absl::StatusOr<v1::GenerationStatsResponse> stats = Stats();
    if (stats.ok()) {
      *last = *stats;
      if (done(*last)) return true;
    }
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

absl::StatusOr<v1::StatsResponse> ServicePair::DraftStats(const std::string& ns,
                                                          int shard) {
  v1::DraftService::Stub* stub = drafts(shard);
  if (stub == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no draftsvc shard ", shard));
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::StatsRequest request;
  request.set_namespace_(ns);
  v1::StatsResponse response;
  absl::Status status =
      FromGrpc(stub->Stats(&context, request, &response),
               absl::StrCat("draftsvc shard ", shard, " Stats"));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<int64_t> ServicePair::OutputNodes(const std::string& ns) {
  if (shards_.empty()) return absl::FailedPreconditionError("no draftsvc");
  int64_t nodes = 0;
  for (int shard = 0; shard < draftsvc_shards(); ++shard) {
    absl::StatusOr<v1::StatsResponse> stats = DraftStats("", shard);
    if (!stats.ok()) return stats.status();
    for (const v1::NamespaceStats& n : stats->namespaces()) {
      if (n.namespace_() == ns) nodes += n.output_nodes();
    }
  }
  return nodes;
}

int64_t ServicePair::ProposedDraftTokens() {
  absl::StatusOr<v1::StatsResponse> stats = DraftStats();
  if (!stats.ok()) return 0;
  int64_t proposed = 0;
  for (const v1::NamespaceStats& ns : stats->namespaces()) {
    for (const v1::SourceStats& source : ns.sources()) {
      proposed += source.proposed_tokens();
    }
  }
  return proposed;
}

absl::StatusOr<int64_t> ServicePair::WaitForOutputNodes(const std::string& ns,
                                                        int timeout_ms) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    absl::StatusOr<int64_t> nodes = OutputNodes(ns);
    if (!nodes.ok() || *nodes > 0) return nodes;
    if (std::chrono::steady_clock::now() >= end) {
      return absl::NotFoundError(absl::StrCat(
          "namespace '", ns, "' has no output nodes after ", timeout_ms,
          " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

absl::Status ServicePair::FlushDrafts() {
  if (shards_.empty()) return absl::FailedPreconditionError("no draftsvc");
  for (int shard = 0; shard < draftsvc_shards(); ++shard) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::FlushResponse response;
    absl::Status flushed =
        FromGrpc(drafts(shard)->Flush(&context, v1::FlushRequest(), &response),
                 absl::StrCat("draftsvc shard ", shard, " Flush"));
    if (!flushed.ok()) return flushed;
  }
  return absl::OkStatus();
}

void ExpectMentions(const std::string& message,
                    const std::vector<std::string>& needles) {
  const std::string lower = absl::AsciiStrToLower(message);
  for (const std::string& needle : needles) {
    bool found = false;
    for (absl::string_view alt : absl::StrSplit(needle, '|')) {
      found = found || absl::StrContains(lower, absl::AsciiStrToLower(alt));
    }
    EXPECT_TRUE(found) << "message \"" << message << "\" lacks " << needle;
  }
}

PrintLogsOnFailure::~PrintLogsOnFailure() {
  if (::testing::Test::HasFailure()) std::printf("%s\n", pair_.Logs().c_str());
}

void ServicePair::KillDraftsvc(int shard) {
  if (shard < draftsvc_shards() && shards_[shard].process != nullptr) {
    shards_[shard].process->Kill(SIGKILL);
  }
}

void ServicePair::SignalDraftsvc(int signal, int shard) {
  if (shard < draftsvc_shards() && shards_[shard].process != nullptr) {
    shards_[shard].process->Signal(signal);
  }
}

absl::Status ServicePair::RestartDraftsvc(int shard) {
  if (shard < 0 || shard >= draftsvc_shards()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no draftsvc shard ", shard));
  }
  return StartDraftsvc(shard, shards_[shard].port);
}

std::string ServicePair::Logs() {
  std::string logs;
  for (int shard = 0; shard < draftsvc_shards(); ++shard) {
    ServerProcess* draftsvc = shards_[shard].process.get();
    if (draftsvc == nullptr) continue;
    absl::StrAppend(&logs, "--- draftsvc shard ", shard, " ",
                    Describe(*draftsvc), ", log tail ---\n",
                    Tail(draftsvc->Log()));
  }
  if (verifysvc_ != nullptr) {
    absl::StrAppend(&logs, "--- verifysvc ", Describe(*verifysvc_),
                    ", log tail ---\n", Tail(verifysvc_->Log()));
  }
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (replicas_[i] == nullptr) continue;
    absl::StrAppend(&logs, "--- verifysvc replica ", i + 1, " ",
                    Describe(*replicas_[i]), ", log tail ---\n",
                    Tail(replicas_[i]->Log()));
  }
  return logs;
}

}  // namespace lookahead::testing
