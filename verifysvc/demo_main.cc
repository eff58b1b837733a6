// lookahead_demo: answers one RAG question (a document passage + a question,
// rendered with the model's chat template) twice on the same model, with plain
// decoding and with draft trees from a running draftsvc, streams the lookahead
// answer, checks both outputs are token for token identical, and prints EDL
// and the measured speedup.
//
//   lookahead_demo --draftsvc=127.0.0.1:50061 --document=FILE --question=Q

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "verifysvc/draft_client.h"
#include "verifysvc/generate.h"
#include "verifysvc/llama_model.h"
#include "verifysvc/model_files.h"
#include "verifysvc/text_stream.h"
#include "verifysvc/threading.h"
#include "verifysvc/tokenizer.h"

ABSL_FLAG(std::string, model, "", "GGUF model file; empty = the default model");
ABSL_FLAG(std::string, draftsvc, "127.0.0.1:50061", "draftsvc address");
ABSL_FLAG(std::string, name_space, "demo", "draftsvc namespace");
ABSL_FLAG(std::string, document, "", "text file holding the passage");
ABSL_FLAG(std::string, question, "", "the question about the passage");
ABSL_FLAG(int, max_new_tokens, 160, "tokens to generate at most");
ABSL_FLAG(int, decoding_length, 16, "draft tokens per step");
ABSL_FLAG(int, branch_length, 8, "draft branch depth");
ABSL_FLAG(int, blas_threads, lookahead::verifysvc::AvailableCores(),
          "OpenBLAS threads (default: one per available core)");

namespace lookahead::verifysvc {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::Status Run() {
  const std::string question = absl::GetFlag(FLAGS_question);
  if (absl::GetFlag(FLAGS_document).empty() || question.empty()) {
    return absl::InvalidArgumentError("give --document=FILE and --question=Q");
  }
  ASSIGN_OR_RETURN(std::string passage,
                   ReadFile(absl::GetFlag(FLAGS_document)));
  ThreadOptions threads;
  threads.blas_threads = absl::GetFlag(FLAGS_blas_threads);
  RETURN_IF_ERROR(ConfigureThreads(threads));

  std::string path = absl::GetFlag(FLAGS_model);
  if (path.empty()) path = DefaultModelPath();
  absl::Time t0 = absl::Now();
  ASSIGN_OR_RETURN(auto file, OpenModelFile(path));
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(*file, ModelOptions()));
  ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::FromGguf(*file));
  std::printf("model: %s (%d layers, vocab %d), loaded in %.1f s\n",
              path.c_str(), model->config().block_count,
              model->config().vocab_size,
              absl::ToDoubleSeconds(absl::Now() - t0));

  std::vector<ChatMessage> chat = {
      {"user",
       absl::StrCat("Answer the question using the passage.\n\n", "Passage:\n",
                    passage, "\n\nQuestion: ", question)}};
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                   tokenizer->EncodeChat(chat, /*add_generation_prompt=*/true));
  std::printf("prompt: %zu tokens; question: %s\n\n", prompt.size(),
              question.c_str());

  GenerationOptions options;
  options.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  options.stop_token_ids = tokenizer->end_of_generation_ids();

  // Plain decoding: the baseline, and the output lookahead must reproduce.
  ASSIGN_OR_RETURN(GenerationResult plain,
                   Generate(*model, prompt, options, /*drafts=*/nullptr));

  auto client = DraftClient::Create(absl::GetFlag(FLAGS_draftsvc), {});
  DraftRequest step;
  step.decoding_length = absl::GetFlag(FLAGS_decoding_length);
  step.branch_length = absl::GetFlag(FLAGS_branch_length);
  ASSIGN_OR_RETURN(
      auto drafts,
      SessionDraftProvider::Open(
          client.get(), absl::StrCat("demo/", absl::ToUnixMicros(absl::Now())),
          absl::GetFlag(FLAGS_name_space), model->config().vocab_size, prompt,
          step));
  DecodeOptions visible;
  visible.render_special = false;  // No "<|im_end|>" in the answer.
  TextStream stream(tokenizer.get(), visible);
  std::printf("answer (lookahead, streamed):\n");
  ASSIGN_OR_RETURN(GenerationResult fast,
                   Generate(*model, prompt, options, drafts.get(),
                            [&](absl::Span<const int32_t> tokens) {
                              for (int32_t t : tokens) {
                                absl::StatusOr<std::string> text =
                                    stream.Feed(t);
                                if (text.ok()) std::cout << *text;
                              }
                              std::cout.flush();
                            }));
  std::cout << stream.Finish() << "\n\n";
  drafts.reset();  // Closes the session.

  const bool identical = plain.tokens == fast.tokens;
  std::printf("plain:     %3zu tokens in %3d steps, %.2f s, %.1f tokens/s\n",
              plain.tokens.size(), plain.steps, plain.total_seconds,
              plain.tokens.size() / plain.total_seconds);
  std::printf("lookahead: %3zu tokens in %3d steps, %.2f s, %.1f tokens/s\n",
              fast.tokens.size(), fast.steps, fast.total_seconds,
              fast.tokens.size() / fast.total_seconds);
  std::printf(
      "EDL (tokens per step): %.2f; draft tokens accepted: %lld of "
      "%lld\n",
      fast.edl(), static_cast<long long>(fast.accepted_draft_tokens),
      static_cast<long long>(fast.draft_tokens));
  // The prompt's prefill costs both runs the same; the decode phase is
  // where drafts act.
  std::printf("speedup over plain decoding: %.2fx end to end, %.2fx in the "
              "decode phase (prefill %.2f s vs %.2f s)\n",
              plain.total_seconds / fast.total_seconds,
              (plain.total_seconds - plain.prefill_seconds) /
                  (fast.total_seconds - fast.prefill_seconds),
              plain.prefill_seconds, fast.prefill_seconds);
  std::printf("outputs identical to plain decoding: %s\n",
              identical ? "yes" : "NO");
  if (!identical) {
    return absl::InternalError("lookahead output differs from plain decoding");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace lookahead::verifysvc

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Answers a question about a document with lookahead decoding and "
      "prints EDL and speedup over plain decoding.");
  absl::ParseCommandLine(argc, argv);
  absl::Status status = lookahead::verifysvc::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "lookahead_demo: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
