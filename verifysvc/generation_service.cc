#include "verifysvc/generation_service.h"

#include <cmath>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "draftsvc/trie_format.h"
#include "verifysvc/stop_strings.h"
#include "verifysvc/text_stream.h"

namespace lookahead::verifysvc {

namespace v1 = lookahead::v1;

namespace {

absl::StatusOr<std::vector<ChatMessage>> ChatFromProto(
    const v1::ChatMessages& chat) {
  if (chat.messages().empty()) {
    return absl::InvalidArgumentError(
        "chat.messages is empty: give at least one message");
  }
  std::vector<ChatMessage> messages;
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& m = chat.messages(i);
    if (m.role() != "system" && m.role() != "user" && m.role() != "assistant") {
      return absl::InvalidArgumentError(
          absl::StrCat("chat.messages[", i, "].role is \"", m.role(),
                       "\"; use system, user or assistant"));
    }
    messages.push_back({m.role(), m.content()});
  }
  return messages;
}

absl::Status CheckIds(absl::Span<const int32_t> ids, int32_t vocab,
                      absl::string_view field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "] = ", ids[i],
                       " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> PromptTokens(
    const v1::GenerateRequest& request, const Tokenizer& tokenizer,
    int32_t vocab) {
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      EncodeOptions options;
      options.add_special = true;  // BOS iff the model wants one.
      return tokenizer.Encode(request.text(), options);
    }
    case v1::GenerateRequest::kChat: {
      ASSIGN_OR_RETURN(std::vector<ChatMessage> messages,
                       ChatFromProto(request.chat()));
      return tokenizer.EncodeChat(messages, /*add_generation_prompt=*/true);
    }
    case v1::GenerateRequest::kTokens: {
      std::vector<int32_t> ids(request.tokens().ids().begin(),
                               request.tokens().ids().end());
      RETURN_IF_ERROR(CheckIds(ids, vocab, "tokens.ids"));
      return ids;
    }
    case v1::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "no prompt: set one of text, chat or tokens");
}

absl::StatusOr<SamplingParams> SamplingFromProto(const v1::SamplingParams& p) {
  if (!(p.temperature() >= 0) || std::isinf(p.temperature())) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.temperature is ", p.temperature(),
                     "; use 0 for greedy or a finite value > 0"));
  }
  if (!(p.top_p() >= 0 && p.top_p() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.top_p is ", p.top_p(), "; use a value in (0, 1] (0 = off)"));
  }
  if (p.top_k() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_k is ", p.top_k(), "; use >= 0 (0 = off)"));
  }
  SamplingParams params;
  params.temperature = p.temperature();
  params.top_p = p.top_p() == 0 ? 1.0f : p.top_p();
  params.top_k = p.top_k();
  params.seed = p.seed();
  return params;
}

absl::Status DraftFromProto(const v1::DraftParams& draft,
                            const RequestLimits& limits, SequenceSpec* spec) {
  switch (draft.mode()) {
    case v1::DRAFT_MODE_UNSPECIFIED:
      spec->draft_mode = v1::DRAFT_MODE_TRIE_HIERARCHICAL;
      break;
    case v1::DRAFT_MODE_OFF:
    case v1::DRAFT_MODE_TRIE_HIERARCHICAL:
    case v1::DRAFT_MODE_TRIE_PARALLEL:
      spec->draft_mode = draft.mode();
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "draft.mode ", draft.mode(),
          " is not supported; use OFF, TRIE_HIERARCHICAL or TRIE_PARALLEL"));
  }
  if (draft.decoding_length() < 0 ||
      draft.decoding_length() > limits.max_decoding_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft.decoding_length is ", draft.decoding_length(),
                     "; use 0 (server default) to ", limits.max_decoding_length,
                     " (--max_decoding_length)"));
  }
  if (draft.branch_length() < 0 ||
      draft.branch_length() > limits.max_branch_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft.branch_length is ", draft.branch_length(),
                     "; use 0 (server default) to ", limits.max_branch_length));
  }
  spec->name_space =
      draft.namespace_().empty() ? "default" : draft.namespace_();
  absl::Status name =
      draftsvc::trie_format::ValidateNamespace(spec->name_space);
  if (!name.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft.namespace: ", name.message()));
  }
  spec->decoding_length = draft.decoding_length() == 0
                              ? limits.default_decoding_length
                              : draft.decoding_length();
  if (spec->draft_mode == v1::DRAFT_MODE_OFF) spec->decoding_length = 0;
  spec->branch_length = draft.branch_length() == 0
                            ? limits.default_branch_length
                            : draft.branch_length();
  return absl::OkStatus();
}

// Streams a scheduler's output to one client. Writes go out one at a time
// (the callback API allows one in flight); the rest wait in `pending_`.
// Deletes itself when gRPC is done with the call (after Finish).
class GenerateReactor final
    : public grpc::ServerWriteReactor<v1::GenerateResponse>,
      public GenerationSink {
 public:
  // Ends the call now with `status` (a request that never reached the
  // scheduler).
  void Reject(const absl::Status& status) { FinishCall(ToGrpcStatus(status)); }

  void Send(v1::GenerateResponse response) override {
    const v1::GenerateResponse* first = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) return;
      pending_.push_back(std::move(response));
      if (writing_) return;
      writing_ = true;
      first = &pending_.front();
    }
    StartWrite(first);
  }

  void Finish(absl::Status status) override {
    {
      absl::MutexLock lock(&mu_);
      if (writing_) {  // OnWriteDone finishes once the queue drains.
        finish_ = ToGrpcStatus(status);
        finish_pending_ = true;
        return;
      }
    }
    FinishCall(ToGrpcStatus(status));
  }

  bool Cancelled() const override {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

  void OnWriteDone(bool ok) override {
    const v1::GenerateResponse* next = nullptr;
    grpc::Status finish;
    bool do_finish = false;
    {
      absl::MutexLock lock(&mu_);
      pending_.pop_front();
      if (!ok) {  // The stream broke (client gone): drop what is queued.
        cancelled_ = true;
        pending_.clear();
      }
      if (!pending_.empty()) {
        next = &pending_.front();
      } else {
        writing_ = false;
        do_finish = finish_pending_;
        finish = finish_;
      }
    }
    if (next != nullptr) {
      StartWrite(next);
    } else if (do_finish) {
      FinishCall(finish);
    }
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

  void OnDone() override { delete this; }

 private:
  void FinishCall(const grpc::Status& status) {
    grpc::ServerWriteReactor<v1::GenerateResponse>::Finish(status);
  }

  mutable absl::Mutex mu_;
  // std::deque keeps the element being written in place while more arrive.
  std::deque<v1::GenerateResponse> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_pending_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_ ABSL_GUARDED_BY(mu_);
};

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

absl::StatusOr<SequenceSpec> BuildSequenceSpec(
    const v1::GenerateRequest& request, const Tokenizer& tokenizer,
    const RequestLimits& limits) {
  SequenceSpec spec;
  ASSIGN_OR_RETURN(spec.prompt,
                   PromptTokens(request, tokenizer, limits.vocab_size));
  const int prompt = static_cast<int>(spec.prompt.size());
  if (prompt == 0) {
    return absl::InvalidArgumentError(
        "prompt is empty (0 tokens): give at least one token of text");
  }
  if (prompt > limits.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt has ", prompt, " tokens; this server accepts at most ",
        limits.max_prompt_tokens, " (--max_prompt_tokens)"));
  }
  if (request.max_new_tokens() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens is ", request.max_new_tokens(),
                     "; use 0 (server default) or more"));
  }
  if (request.max_new_tokens() == 0) {
    spec.max_new_tokens = std::min(limits.default_max_new_tokens,
                                   limits.max_context_tokens - prompt);
  } else if (prompt + request.max_new_tokens() > limits.max_context_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt, " tokens) + max_new_tokens (",
        request.max_new_tokens(), ") = ", prompt + request.max_new_tokens(),
        " exceeds the context limit of ", limits.max_context_tokens,
        " tokens (--max_context_tokens); ask for at most ",
        limits.max_context_tokens - prompt, " new tokens"));
  } else {
    spec.max_new_tokens = request.max_new_tokens();
  }
  ASSIGN_OR_RETURN(spec.sampling, SamplingFromProto(request.sampling()));
  spec.stop.assign(request.stop().begin(), request.stop().end());
  RETURN_IF_ERROR(ValidateStopStrings(spec.stop, limits.max_stop_strings));
  RETURN_IF_ERROR(DraftFromProto(request.draft(), limits, &spec));
  return spec;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationServiceImpl::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  auto* reactor = new GenerateReactor();
  absl::StatusOr<SequenceSpec> spec =
      BuildSequenceSpec(*request, *tokenizer_, limits_);
  absl::Status submitted = spec.status();
  if (submitted.ok()) {
    submitted = scheduler_->Submit(*std::move(spec), reactor);  // Counts.
  } else {
    scheduler_->CountRejected();
  }
  if (!submitted.ok()) reactor->Reject(submitted);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Tokenize(
    grpc::CallbackServerContext* context, const v1::TokenizeRequest* request,
    v1::TokenizeResponse* response) {
  absl::StatusOr<std::vector<int32_t>> ids;
  switch (request->input_case()) {
    case v1::TokenizeRequest::kText: {
      EncodeOptions options;
      options.add_special = request->add_special();
      ids = tokenizer_->Encode(request->text(), options);
      break;
    }
    case v1::TokenizeRequest::kChat: {
      absl::StatusOr<std::vector<ChatMessage>> messages =
          ChatFromProto(request->chat());
      ids = messages.ok() ? tokenizer_->EncodeChat(*messages, true)
                          : messages.status();
      break;
    }
    case v1::TokenizeRequest::INPUT_NOT_SET:
      ids = absl::InvalidArgumentError("no input: set text or chat");
      break;
  }
  if (ids.ok()) *response->mutable_ids() = {ids->begin(), ids->end()};
  return FinishUnary(context, ids.status());
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Detokenize(
    grpc::CallbackServerContext* context, const v1::DetokenizeRequest* request,
    v1::DetokenizeResponse* response) {
  std::vector<int32_t> ids(request->ids().begin(), request->ids().end());
  absl::Status checked = CheckIds(ids, limits_.vocab_size, "ids");
  if (checked.ok()) {
    absl::StatusOr<std::string> text = tokenizer_->Decode(ids);
    if (text.ok()) {
      // Valid UTF-8 on the wire: a cut character becomes U+FFFD.
      response->set_text(SanitizeUtf8(*text));
    }
    checked = text.status();
  }
  return FinishUnary(context, checked);
}

grpc::ServerUnaryReactor* GenerationServiceImpl::ModelInfo(
    grpc::CallbackServerContext* context, const v1::ModelInfoRequest*,
    v1::ModelInfoResponse* response) {
  *response = info_;
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Stats(
    grpc::CallbackServerContext* context, const v1::GenerationStatsRequest*,
    v1::GenerationStatsResponse* response) {
  *response = scheduler_->Stats();
  return FinishUnary(context, absl::OkStatus());
}

}  // namespace lookahead::verifysvc
