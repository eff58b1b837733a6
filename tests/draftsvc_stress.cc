// draftsvc_stress: a load generator and crash-test writer for a running
// draftsvc. Each thread opens a session and sends Steps of random accepted
// tokens (a skewed small alphabet, so windows repeat) until --seconds pass
// or an RPC fails; then it reports Steps/s, Step latency p50/p99 and the
// mean draft size.
//
// --ack_log=PATH makes it an oracle outside the server: before each Step it
// appends "try <session> <tokens...>", after the acknowledgement "ack
// <session>", and for each session "open <session> <prompt...>" once opened;
// every line is fdatasync'ed before the writer goes on, so the log survives
// whatever happens to the server (tests/draftsvc_crash_test reads it).
#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "proto/draft.grpc.pb.h"
#include "proto/draft.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50061", "draftsvc address.");
ABSL_FLAG(int, threads, 4, "Concurrent sessions (one thread each).");
ABSL_FLAG(double, seconds, 10, "How long to write.");
ABSL_FLAG(std::string, name_space, "stress", "Namespace of the sessions.");
ABSL_FLAG(int, vocab_size, 49152, "Vocabulary bound sent with OpenSession.");
ABSL_FLAG(int, max_step_tokens, 8, "Accepted tokens per Step: 1..this.");
ABSL_FLAG(int, decoding_length, 16, "Draft budget asked for in each Step.");
ABSL_FLAG(std::string, session_prefix, "stress", "Session ids: prefix-<i>.");
ABSL_FLAG(uint64_t, seed, 1, "Random seed.");
ABSL_FLAG(std::string, ack_log, "", "If set, the fsynced log (see above).");

namespace lookahead {
namespace {

namespace v1 = ::lookahead::v1;
using Clock = std::chrono::steady_clock;

// Appends lines to a file, each made durable before Append returns.
class AckLog {
 public:
  explicit AckLog(const std::string& path)
      : fd_(path.empty()
                ? -1
                : open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644)) {}
  ~AckLog() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok(const std::string& path) const { return path.empty() || fd_ >= 0; }
  // Returns false iff the line could not be made durable.
  bool Append(const std::string& line) {
    if (fd_ < 0) return true;
    absl::MutexLock lock(&mu_);
    const std::string data = line + "\n";
    return write(fd_, data.data(), data.size()) ==
               static_cast<ssize_t>(data.size()) &&
           fdatasync(fd_) == 0;
  }

 private:
  const int fd_;
  absl::Mutex mu_;
};

struct ThreadResult {
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t draft_nodes = 0;
  std::vector<double> latencies_us;
  std::string error;
};

void Writer(v1::DraftService::Stub& stub, int index, AckLog& log,
            ThreadResult* result) {
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) * 1000003 + index);
  const std::string id =
      absl::StrCat(absl::GetFlag(FLAGS_session_prefix), "-", index);
  const int vocab = absl::GetFlag(FLAGS_vocab_size);
  auto token = [&] {
    return static_cast<int32_t>(rng() % 8 == 0 ? rng() % std::min(vocab, 2000)
                                               : rng() % std::min(vocab, 24));
  };
  v1::OpenSessionRequest open;
  open.set_session_id(id);
  open.set_namespace_(absl::GetFlag(FLAGS_name_space));
  open.set_vocab_size(vocab);
  for (int i = 0; i < 8; ++i) open.add_prompt_tokens(token());
  v1::OpenSessionResponse opened;
  grpc::ClientContext open_context;
  open_context.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::seconds(10));
  grpc::Status status = stub.OpenSession(&open_context, open, &opened);
  if (!status.ok()) {
    result->error = absl::StrCat("OpenSession: ", status.error_message());
    return;
  }
  if (!log.Append(absl::StrCat("open ", id, " ",
                               absl::StrJoin(open.prompt_tokens(), " ")))) {
    result->error = "cannot write the ack log";
    return;
  }
  const auto end =
      Clock::now() +
      std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
  while (Clock::now() < end) {
    v1::StepRequest request;
    v1::SessionStep* step = request.add_steps();
    step->set_session_id(id);
    const int n = 1 + rng() % absl::GetFlag(FLAGS_max_step_tokens);
    for (int i = 0; i < n; ++i) step->add_accepted_tokens(token());
    step->set_decoding_length(absl::GetFlag(FLAGS_decoding_length));
    if (!log.Append(absl::StrCat(
            "try ", id, " ", absl::StrJoin(step->accepted_tokens(), " ")))) {
      result->error = "cannot write the ack log";
      return;
    }
    v1::StepResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    const auto start = Clock::now();
    status = stub.Step(&context, request, &response);
    const double us =
        std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (!status.ok()) {
      result->error = absl::StrCat("Step: ", status.error_message());
      return;
    }
    if (response.drafts_size() != 1 || response.drafts(0).code() != 0) {
      result->error =
          absl::StrCat("Step entry: ", response.drafts_size() == 1
                                           ? response.drafts(0).message()
                                           : "wrong entry count");
      return;
    }
    if (!log.Append(absl::StrCat("ack ", id))) {
      result->error = "cannot write the ack log";
      return;
    }
    result->latencies_us.push_back(us);
    result->steps++;
    result->tokens += n;
    result->draft_nodes += response.drafts(0).tree().tokens_size();
  }
}

int Run() {
  AckLog log(absl::GetFlag(FLAGS_ack_log));
  if (!log.ok(absl::GetFlag(FLAGS_ack_log))) {
    std::fprintf(stderr, "cannot open --ack_log %s\n",
                 absl::GetFlag(FLAGS_ack_log).c_str());
    return 2;
  }
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_target),
                                     grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(10))) {
    std::fprintf(stderr, "cannot connect to %s\n",
                 absl::GetFlag(FLAGS_target).c_str());
    return 2;
  }
  auto stub = v1::DraftService::NewStub(channel);
  const int threads = std::max(1, absl::GetFlag(FLAGS_threads));
  std::vector<ThreadResult> results(threads);
  std::vector<std::thread> workers;
  const auto start = Clock::now();
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&, i] { Writer(*stub, i, log, &results[i]); });
  }
  for (auto& w : workers) w.join();
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  ThreadResult total;
  for (const ThreadResult& r : results) {
    total.steps += r.steps;
    total.tokens += r.tokens;
    total.draft_nodes += r.draft_nodes;
    total.latencies_us.insert(total.latencies_us.end(), r.latencies_us.begin(),
                              r.latencies_us.end());
    if (!r.error.empty()) {
      std::fprintf(stderr, "writer stopped: %s\n", r.error.c_str());
    }
  }
  std::sort(total.latencies_us.begin(), total.latencies_us.end());
  auto pct = [&](double q) {
    return total.latencies_us.empty()
               ? 0.0
               : total.latencies_us[static_cast<size_t>(
                     q * (total.latencies_us.size() - 1))];
  };
  std::printf(
      "acknowledged steps %lld (%.0f/s), tokens %lld (%.0f/s), Step latency "
      "p50 %.0f us p99 %.0f us, mean draft nodes %.1f\n",
      static_cast<long long>(total.steps), total.steps / seconds,
      static_cast<long long>(total.tokens), total.tokens / seconds, pct(0.5),
      pct(0.99),
      total.steps > 0 ? static_cast<double>(total.draft_nodes) / total.steps
                      : 0.0);
  return 0;
}

}  // namespace
}  // namespace lookahead

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return lookahead::Run();
}
