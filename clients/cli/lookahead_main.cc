// lookahead: command-line client of verifysvc (lookahead.v1.GenerationService).
//
//   lookahead generate --server=127.0.0.1:50051 --prompt="Once upon a time"
//   lookahead chat --server=127.0.0.1:50051 [--system="..."] [--message="..."]
//
// Text goes to stdout as it arrives. `chat` keeps the conversation and sends
// it as ChatMessages, so the server's chat template renders it; without
// --message it reads one user turn per stdin line until EOF. --stats prints
// EDL, tokens/s and TTFT to stderr, and the speedup over the same request
// with drafts off, which it runs and whose tokens must be identical.
// Exit status: 0 ok, 1 a failed RPC or a lossless check, 2 bad usage.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "proto/generation.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "verifysvc host:port.");
ABSL_FLAG(std::string, prompt, "", "generate: the prompt, as raw text.");
ABSL_FLAG(std::string, system, "", "chat: an optional system message.");
ABSL_FLAG(std::string, message, "",
          "chat: send this one user message and exit instead of reading "
          "stdin.");
ABSL_FLAG(int, max_new_tokens, 0,
          "Most tokens to generate; 0 = server default.");
ABSL_FLAG(double, temperature, 0.0, "0 = greedy; > 0 samples.");
ABSL_FLAG(double, top_p, 0.0, "Nucleus mass in (0, 1]; 0 = off.");
ABSL_FLAG(int, top_k, 0, "Sample from the k most likely tokens; 0 = off.");
ABSL_FLAG(uint64_t, seed, 0,
          "Sampling seed; with --temperature > 0 the output is a function of "
          "prompt, parameters and seed.");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "Comma-separated stop strings; generation ends before them.");
ABSL_FLAG(std::string, draft_mode, "",
          "off, hierarchical or parallel; empty = server default "
          "(hierarchical).");
ABSL_FLAG(std::string, namespace, "", "draftsvc namespace; empty = default.");
ABSL_FLAG(std::vector<std::string>, sources, {},
          "Draft sources, comma-separated: trie, ngram, assistant; empty = "
          "the server's. A source draftsvc does not run fails the request "
          "(FAILED_PRECONDITION).");
ABSL_FLAG(bool, stats, false,
          "After each answer, print EDL, tokens/s, TTFT and the speedup over "
          "drafts off (runs the request again without drafts) to stderr.");
ABSL_FLAG(double, timeout_s, 0, "Deadline of each request; 0 = none.");

namespace lookahead::cli {
namespace {

using v1::GenerateRequest;
using v1::GenerateResponse;
using v1::GenerationService;

// One Generate call, collected.
struct Completion {
  std::string text;
  std::vector<int32_t> token_ids;
  v1::Usage usage;
};

absl::StatusOr<v1::DraftMode> ParseDraftMode(const std::string& name) {
  if (name.empty()) return v1::DRAFT_MODE_UNSPECIFIED;
  if (name == "off") return v1::DRAFT_MODE_OFF;
  if (name == "hierarchical") return v1::DRAFT_MODE_TRIE_HIERARCHICAL;
  if (name == "parallel") return v1::DRAFT_MODE_TRIE_PARALLEL;
  return absl::InvalidArgumentError(absl::StrCat(
      "--draft_mode=", name, ": want off, hierarchical or parallel"));
}

absl::StatusOr<v1::DraftSource> ParseDraftSource(const std::string& name) {
  if (name == "trie" || name == "prompt") return v1::DRAFT_SOURCE_PROMPT;
  if (name == "output") return v1::DRAFT_SOURCE_OUTPUT;
  if (name == "ngram") return v1::DRAFT_SOURCE_NGRAM;
  if (name == "assistant") return v1::DRAFT_SOURCE_ASSISTANT;
  return absl::InvalidArgumentError(
      absl::StrCat("--sources: ", name, ": want trie, ngram or assistant"));
}

// The name the verifier's usage reports a source under (the prompt and
// output tries are one source to it).
const char* SourceName(v1::DraftSource source) {
  switch (source) {
    case v1::DRAFT_SOURCE_PROMPT:
    case v1::DRAFT_SOURCE_OUTPUT:
      return "trie";
    case v1::DRAFT_SOURCE_NGRAM:
      return "ngram";
    case v1::DRAFT_SOURCE_ASSISTANT:
      return "assistant";
    default:
      return "unknown";
  }
}

// Everything but the prompt, from the flags. The server validates values.
absl::StatusOr<GenerateRequest> RequestFromFlags() {
  absl::StatusOr<v1::DraftMode> mode =
      ParseDraftMode(absl::GetFlag(FLAGS_draft_mode));
  if (!mode.ok()) return mode.status();
  GenerateRequest request;
  request.set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_temperature(
      static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  sampling->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  sampling->set_top_k(absl::GetFlag(FLAGS_top_k));
  sampling->set_seed(absl::GetFlag(FLAGS_seed));
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) {
    request.add_stop(stop);
  }
  request.mutable_draft()->set_mode(*mode);
  request.mutable_draft()->set_namespace_(absl::GetFlag(FLAGS_namespace));
  for (const std::string& name : absl::GetFlag(FLAGS_sources)) {
    absl::StatusOr<v1::DraftSource> source = ParseDraftSource(name);
    if (!source.ok()) return source.status();
    request.mutable_draft()->add_sources(*source);
  }
  return request;
}

// The server's status as an absl::Status, with a hint when nothing answers
// at --server.
absl::Status RpcError(const grpc::Status& status) {
  absl::Status error = FromGrpcStatus(status);
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return error;
  return absl::Status(
      error.code(),
      absl::StrCat(error.message(), " (is verifysvc running at --server=",
                   absl::GetFlag(FLAGS_server), "?)"));
}

// Runs `request` to the end. With `echo`, each piece of text is written to
// stdout as it arrives.
absl::StatusOr<Completion> Generate(GenerationService::Stub& stub,
                                    const GenerateRequest& request, bool echo) {
  grpc::ClientContext context;
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (timeout_s > 0) {
    context.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
  }
  std::unique_ptr<grpc::ClientReader<GenerateResponse>> reader =
      stub.Generate(&context, request);
  Completion completion;
  bool has_usage = false;
  GenerateResponse response;
  while (reader->Read(&response)) {
    if (echo && !response.text().empty()) {
      std::fwrite(response.text().data(), 1, response.text().size(), stdout);
      std::fflush(stdout);
    }
    completion.text += response.text();
    completion.token_ids.insert(completion.token_ids.end(),
                                response.token_ids().begin(),
                                response.token_ids().end());
    if (response.has_usage()) {
      completion.usage = response.usage();
      has_usage = true;
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    // End a partly streamed answer so the error starts on its own line.
    if (echo && !completion.text.empty()) std::fputc('\n', stdout);
    return RpcError(status);
  }
  if (!has_usage) {
    return absl::InternalError("the Generate stream ended without usage");
  }
  return completion;
}

double DecodeSeconds(const v1::Usage& usage) {
  return usage.total_seconds() - usage.time_to_first_token_seconds();
}

// Prints `drafts`' figures to stderr and, unless drafts were off already,
// runs `request` again with drafts off, checks the tokens are identical and
// prints the speedup. Returns an error iff the baseline fails or differs.
absl::Status PrintStats(GenerationService::Stub& stub,
                        const GenerateRequest& request,
                        const Completion& drafts) {
  const v1::Usage& d = drafts.usage;
  std::fprintf(stderr,
               "stats: %d prompt + %d output tokens (%s), %d steps, EDL %.2f "
               "(%lld of %lld draft tokens accepted)\n",
               d.prompt_tokens(), d.output_tokens(),
               v1::FinishReason_Name(d.finish_reason()).c_str(),
               d.decoding_steps(), d.edl(),
               static_cast<long long>(d.accepted_draft_tokens()),
               static_cast<long long>(d.draft_tokens()));
  if (d.sources_size() > 0) {
    std::string line;
    for (const v1::SourceUsage& source : d.sources()) {
      absl::StrAppend(
          &line, line.empty() ? "" : ", ", SourceName(source.source()), " ",
          source.accepted_draft_tokens(), "/", source.draft_tokens());
    }
    std::fprintf(stderr,
                 "stats: per source: %s accepted/verified draft tokens\n",
                 line.c_str());
  }
  std::fprintf(stderr,
               "stats: this run : %.1f tok/s, TTFT %.3f s, total %.3f s\n",
               d.tokens_per_second(), d.time_to_first_token_seconds(),
               d.total_seconds());
  if (request.draft().mode() == v1::DRAFT_MODE_OFF) return absl::OkStatus();

  GenerateRequest plain_request = request;
  plain_request.mutable_draft()->set_mode(v1::DRAFT_MODE_OFF);
  absl::StatusOr<Completion> plain = Generate(stub, plain_request, false);
  if (!plain.ok()) {
    return absl::Status(
        plain.status().code(),
        absl::StrCat("drafts-off baseline: ", plain.status().message()));
  }
  const v1::Usage& p = plain->usage;
  std::fprintf(stderr,
               "stats: drafts off: %.1f tok/s, TTFT %.3f s, total %.3f s\n",
               p.tokens_per_second(), p.time_to_first_token_seconds(),
               p.total_seconds());
  if (plain->token_ids != drafts.token_ids) {
    size_t i = 0;
    while (i < plain->token_ids.size() && i < drafts.token_ids.size() &&
           plain->token_ids[i] == drafts.token_ids[i]) {
      ++i;
    }
    return absl::InternalError(absl::StrFormat(
        "NOT LOSSLESS: drafts on and off diverge at output token %d (%d vs "
        "%d tokens)",
        i, drafts.token_ids.size(), plain->token_ids.size()));
  }
  if (d.total_seconds() > 0 && DecodeSeconds(d) > 0) {
    std::fprintf(stderr,
                 "stats: speedup %.2fx end to end, %.2fx decode (total - "
                 "TTFT); tokens identical\n",
                 p.total_seconds() / d.total_seconds(),
                 DecodeSeconds(p) / DecodeSeconds(d));
  }
  return absl::OkStatus();
}

// Streams one answer to stdout (newline-terminated) and, with --stats,
// prints its figures. Returns the answer's text.
absl::StatusOr<std::string> Answer(GenerationService::Stub& stub,
                                   const GenerateRequest& request) {
  absl::StatusOr<Completion> completion = Generate(stub, request, true);
  if (!completion.ok()) return completion.status();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_stats)) {
    absl::Status stats = PrintStats(stub, request, *completion);
    if (!stats.ok()) return stats;
  }
  return std::move(completion->text);
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "lookahead: %s\n", status.ToString().c_str());
  return 1;
}

int RunGenerate(GenerationService::Stub& stub) {
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  if (prompt.empty()) {
    std::fprintf(stderr, "lookahead generate: --prompt=TEXT is required\n");
    return 2;
  }
  absl::StatusOr<GenerateRequest> request = RequestFromFlags();
  if (!request.ok()) return Fail(request.status());
  request->set_text(prompt);
  absl::StatusOr<std::string> answer = Answer(stub, *request);
  return answer.ok() ? 0 : Fail(answer.status());
}

// One turn: appends `user` and, on success, the answer to `history`.
absl::Status ChatTurn(GenerationService::Stub& stub,
                      const GenerateRequest& base, const std::string& user,
                      v1::ChatMessages& history) {
  v1::ChatMessage* turn = history.add_messages();
  turn->set_role("user");
  turn->set_content(user);
  GenerateRequest request = base;
  *request.mutable_chat() = history;
  absl::StatusOr<std::string> answer = Answer(stub, request);
  if (!answer.ok()) return answer.status();
  turn = history.add_messages();
  turn->set_role("assistant");
  turn->set_content(*std::move(answer));
  return absl::OkStatus();
}

int RunChat(GenerationService::Stub& stub) {
  absl::StatusOr<GenerateRequest> base = RequestFromFlags();
  if (!base.ok()) return Fail(base.status());
  v1::ChatMessages history;
  if (!absl::GetFlag(FLAGS_system).empty()) {
    v1::ChatMessage* system = history.add_messages();
    system->set_role("system");
    system->set_content(absl::GetFlag(FLAGS_system));
  }
  if (!absl::GetFlag(FLAGS_message).empty()) {
    absl::Status turn =
        ChatTurn(stub, *base, absl::GetFlag(FLAGS_message), history);
    return turn.ok() ? 0 : Fail(turn);
  }
  // The prompt marker is for people; piped input gets none.
  const bool interactive = isatty(STDIN_FILENO);
  std::string line;
  while (true) {
    if (interactive) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    absl::Status turn = ChatTurn(stub, *base, line, history);
    if (!turn.ok()) return Fail(turn);
  }
  if (interactive) std::fputc('\n', stderr);
  return 0;
}

}  // namespace
}  // namespace lookahead::cli

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Client of lookahead's verifysvc.\n"
      "  lookahead generate --server=HOST:PORT --prompt=TEXT [--stats ...]\n"
      "  lookahead chat --server=HOST:PORT [--system=TEXT] [--message=TEXT] "
      "[--stats ...]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string command = args.size() == 2 ? args[1] : "";
  if (command != "generate" && command != "chat") {
    std::fprintf(stderr, "%s\n(--help lists the flags)\n",
                 absl::ProgramUsageMessage().data());
    return 2;
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::GetFlag(FLAGS_server), grpc::InsecureChannelCredentials());
  std::unique_ptr<lookahead::v1::GenerationService::Stub> stub =
      lookahead::v1::GenerationService::NewStub(channel);
  return command == "generate" ? lookahead::cli::RunGenerate(*stub)
                               : lookahead::cli::RunChat(*stub);
}
