#include "verifysvc/api/generation_service.h"

#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "engine/text/text_stream.h"
#include "verifysvc/serving/field_error.h"

namespace lookahead::verifysvc {

namespace v1 = lookahead::v1;

namespace {

std::vector<engine::ChatMessage> ChatFromProto(const v1::ChatMessages& chat) {
  std::vector<engine::ChatMessage> messages;
  for (const v1::ChatMessage& m : chat.messages()) {
    messages.push_back({m.role(), m.content()});
  }
  return messages;
}

RawPrompt PromptFromProto(const v1::GenerateRequest& request) {
  RawPrompt prompt;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      prompt.kind = RawPrompt::Kind::kText;
      prompt.text = request.text();
      break;
    case v1::GenerateRequest::kChat:
      prompt.kind = RawPrompt::Kind::kChat;
      prompt.chat = ChatFromProto(request.chat());
      break;
    case v1::GenerateRequest::kTokens:
      prompt.kind = RawPrompt::Kind::kTokens;
      prompt.token_ids.assign(request.tokens().ids().begin(),
                              request.tokens().ids().end());
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  return prompt;
}

RawDraftParams DraftFromProto(const v1::DraftParams& draft) {
  RawDraftParams raw;
  raw.wire_mode = draft.mode();
  switch (draft.mode()) {
    case v1::DRAFT_MODE_UNSPECIFIED:
      raw.mode = RawDraftParams::Mode::kUnspecified;
      break;
    case v1::DRAFT_MODE_OFF:
      raw.mode = RawDraftParams::Mode::kOff;
      break;
    case v1::DRAFT_MODE_TRIE_HIERARCHICAL:
      raw.mode = RawDraftParams::Mode::kTrieHierarchical;
      break;
    case v1::DRAFT_MODE_TRIE_PARALLEL:
      raw.mode = RawDraftParams::Mode::kTrieParallel;
      break;
    default:
      raw.mode = RawDraftParams::Mode::kUnsupported;
      break;
  }
  raw.decoding_length = draft.decoding_length();
  raw.branch_length = draft.branch_length();
  raw.name_space = draft.namespace_();
  for (int wire : draft.sources()) {
    RawDraftParams::Source source;
    source.wire = wire;
    switch (wire) {
      case v1::DRAFT_SOURCE_PROMPT:
      case v1::DRAFT_SOURCE_OUTPUT:
        source.kind = RawDraftParams::Source::Kind::kTrie;
        break;
      case v1::DRAFT_SOURCE_NGRAM:
        source.kind = RawDraftParams::Source::Kind::kNgram;
        break;
      case v1::DRAFT_SOURCE_ASSISTANT:
        source.kind = RawDraftParams::Source::Kind::kAssistant;
        break;
      default:  // UNSPECIFIED, or a value from a newer client
        source.kind = RawDraftParams::Source::Kind::kUnsupported;
        break;
    }
    raw.sources.push_back(source);
  }
  // Unset = the server default; an explicit 0 turns the window off.
  if (draft.has_lookahead_window()) {
    raw.lookahead_window = draft.lookahead_window();
  }
  raw.lookahead_ngram = draft.lookahead_ngram();
  raw.lookahead_guess = draft.lookahead_guess();
  return raw;
}

// The wire name of a source in Usage: the verifier counts the prompt and
// output tries as one source, reported as DRAFT_SOURCE_PROMPT.
v1::DraftSource SourceToProto(engine::DraftSourceTag source) {
  switch (source) {
    case engine::DraftSourceTag::kTrie:
      return v1::DRAFT_SOURCE_PROMPT;
    case engine::DraftSourceTag::kNgram:
      return v1::DRAFT_SOURCE_NGRAM;
    case engine::DraftSourceTag::kAssistant:
      return v1::DRAFT_SOURCE_ASSISTANT;
    case engine::DraftSourceTag::kUnknown:
      break;
  }
  return v1::DRAFT_SOURCE_UNSPECIFIED;
}

v1::FinishReason FinishToProto(FinishReason finish) {
  switch (finish) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kStopString:
      return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kNone:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

v1::GenerateResponse ResponseFromOutput(const GenerationOutput& out) {
  v1::GenerateResponse response;
  response.set_text(out.text);
  *response.mutable_token_ids() = {out.token_ids.begin(), out.token_ids.end()};
  response.set_accepted(static_cast<int32_t>(out.token_ids.size()));
  for (const engine::ChoiceLogprobs& l : out.logprobs) {
    v1::TokenLogprobs* token = response.add_logprobs();
    token->set_token_id(l.chosen.token);
    token->set_logprob(l.chosen.logprob);
    for (const engine::TokenLogprob& t : l.top) {
      v1::TokenLogprob* top = token->add_top_logprobs();
      top->set_token_id(t.token);
      top->set_logprob(t.logprob);
    }
  }
  if (out.usage.has_value()) {
    const Usage& u = *out.usage;
    v1::Usage* usage = response.mutable_usage();
    usage->set_prompt_tokens(u.prompt_tokens);
    usage->set_output_tokens(u.output_tokens);
    usage->set_decoding_steps(u.decoding_steps);
    usage->set_edl(u.edl);
    usage->set_time_to_first_token_seconds(u.time_to_first_token_seconds);
    usage->set_total_seconds(u.total_seconds);
    usage->set_tokens_per_second(u.tokens_per_second);
    usage->set_finish_reason(FinishToProto(u.finish_reason));
    usage->set_draft_tokens(u.draft_tokens);
    usage->set_accepted_draft_tokens(u.accepted_draft_tokens);
    usage->set_queue_seconds(u.queue_seconds);
    usage->set_cached_prompt_tokens(u.cached_prompt_tokens);
    for (const SourceUsage& su : u.sources) {
      v1::SourceUsage* source = usage->add_sources();
      source->set_source(SourceToProto(su.source));
      source->set_draft_tokens(su.draft_tokens);
      source->set_accepted_draft_tokens(su.accepted_draft_tokens);
    }
  }
  return response;
}

v1::GenerationStatsResponse StatsToProto(const SchedulerStats& s) {
  v1::GenerationStatsResponse stats;
  stats.set_running_sequences(s.running_sequences);
  stats.set_queued_sequences(s.queued_sequences);
  stats.set_requests_admitted(s.requests_admitted);
  stats.set_requests_finished(s.requests_finished);
  stats.set_requests_cancelled(s.requests_cancelled);
  stats.set_requests_rejected(s.requests_rejected);
  stats.set_requests_failed(s.requests_failed);
  stats.set_forward_passes(s.forward_passes);
  stats.set_forward_sequences(s.forward_sequences);
  stats.set_max_forward_sequences(s.max_forward_sequences);
  stats.set_forward_tokens(s.forward_tokens);
  stats.set_decoding_steps(s.decoding_steps);
  stats.set_output_tokens(s.output_tokens);
  stats.set_draft_tokens(s.draft_tokens);
  stats.set_accepted_draft_tokens(s.accepted_draft_tokens);
  stats.set_draftsvc_available(s.drafts_available);
  stats.set_draft_step_failures(s.draft_failures);
  stats.set_draft_sessions_reopened(s.draft_sessions_reopened);
  stats.set_kv_cache_tokens(s.kv_cache_tokens);
  return stats;
}

}  // namespace

// Starts gRPC stream writes on a thread of its own. The callback API's
// StartWrite sends inline on the thread that calls it (~0.1 ms a write
// over loopback on the 2-core VM, 3% of a SmolLM2 decode step, and once
// per stream in a batched step); the scheduler thread only queues the
// write here and goes on, while this thread sends it on a core the pass
// has left idle. Each stream still has one write in flight, in order.
class StreamWriter {
 public:
  // Something with a write queued: Post(w) calls w->StartQueued() once.
  class Writable {
   public:
    virtual void StartQueued() = 0;

   protected:
    ~Writable() = default;
  };

  StreamWriter() : thread_([this] { Loop(); }) {}
  // Starts every write still queued, then joins.
  ~StreamWriter() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  void Post(Writable* w) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(w);
  }

 private:
  void Loop() {
    while (true) {
      Writable* w = nullptr;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](StreamWriter* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
              return self->stop_ || !self->queue_.empty();
            },
            this));
        if (queue_.empty()) return;  // stopping, nothing left
        w = queue_.front();
        queue_.pop_front();
      }
      w->StartQueued();
    }
  }

  absl::Mutex mu_;
  std::deque<Writable*> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

namespace {

// Streams a scheduler's output to one client, each GenerateResponse
// serialized as the generated handler would. Writes go out one at a time
// (the callback API allows one in flight); the rest wait in `pending_`.
// The first of a burst is started by `writer` (Send only queues it), the
// next ones by OnWriteDone on gRPC's thread. Deletes itself when gRPC is
// done with the call (after Finish, which waits while a write is queued or
// in flight, so a queued reactor is never deleted).
class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                              public GenerationSink,
                              public StreamWriter::Writable {
 public:
  explicit GenerateReactor(StreamWriter* writer) : writer_(writer) {}

  // Ends the call now with `status` (a request that never reached the
  // scheduler).
  void Reject(const absl::Status& status) { FinishCall(ToGrpcStatus(status)); }

  void Send(GenerationOutput output) override {
    grpc::ByteBuffer response = SerializeResponse(ResponseFromOutput(output));
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) return;
      pending_.push_back(std::move(response));
      if (writing_) return;
      writing_ = true;
    }
    writer_->Post(this);
  }

  // On the writer's thread: the write Send queued (`pending_` holds it:
  // only OnWriteDone, after a write, pops).
  void StartQueued() override {
    const grpc::ByteBuffer* first = nullptr;
    {
      absl::MutexLock lock(&mu_);
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
    const grpc::ByteBuffer* next = nullptr;
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
    grpc::ServerWriteReactor<grpc::ByteBuffer>::Finish(status);
  }

  StreamWriter* const writer_;
  mutable absl::Mutex mu_;
  // std::deque keeps the element being written in place while more arrive.
  std::deque<grpc::ByteBuffer> pending_ ABSL_GUARDED_BY(mu_);
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

// Tokenize's answer: the input's byte limit first, then the tokenizer.
absl::StatusOr<std::vector<int32_t>> TokenizeIds(
    v1::TokenizeRequest request, const engine::Tokenizer& tokenizer,
    const RequestLimits& limits) {
  RawPrompt input;
  switch (request.input_case()) {
    case v1::TokenizeRequest::kText:
      input.kind = RawPrompt::Kind::kText;
      input.text = std::move(*request.mutable_text());
      break;
    case v1::TokenizeRequest::kChat:
      input.kind = RawPrompt::Kind::kChat;
      input.chat = ChatFromProto(request.chat());
      break;
    case v1::TokenizeRequest::INPUT_NOT_SET:
      return absl::InvalidArgumentError("no input: set text or chat");
  }
  RETURN_IF_ERROR(CheckTokenizeBytes(input, limits));
  if (input.kind == RawPrompt::Kind::kText) {
    engine::EncodeOptions options;
    options.add_special = request.add_special();
    return tokenizer.Encode(input.text, options);
  }
  RETURN_IF_ERROR(ValidateChat(input.chat));
  return tokenizer.EncodeChat(input.chat, true);
}

}  // namespace

RawRequest RawRequestFromProto(const v1::GenerateRequest& request) {
  RawRequest raw;
  raw.prompt = PromptFromProto(request);
  // proto3's 0 is unset: the server's default.
  if (request.max_new_tokens() != 0) {
    raw.max_new_tokens = request.max_new_tokens();
  }
  raw.temperature = request.sampling().temperature();
  raw.top_p = request.sampling().top_p();
  raw.top_k = request.sampling().top_k();
  raw.seed = request.sampling().seed();
  raw.stop.assign(request.stop().begin(), request.stop().end());
  raw.draft = DraftFromProto(request.draft());
  if (request.has_logprobs()) raw.logprobs = request.logprobs();
  return raw;
}

absl::StatusOr<std::optional<KeyGrant>> GenerationServiceImpl::Authorize(
    grpc::CallbackServerContext* context) {
  if (api_keys_ == nullptr) return std::nullopt;
  absl::string_view authorization;
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  absl::Duration retry_after = absl::ZeroDuration();
  absl::StatusOr<KeyGrant> grant =
      api_keys_->Authorize(authorization, &retry_after);
  if (!grant.ok()) {
    if (absl::IsResourceExhausted(grant.status())) {
      // Whole seconds, rounded up, as HTTP's Retry-After.
      context->AddTrailingMetadata(
          "retry-after", absl::StrCat(absl::ToInt64Seconds(
                             absl::Ceil(retry_after, absl::Seconds(1)))));
    }
    return grant.status();
  }
  return *std::move(grant);
}

GenerationServiceImpl::GenerationServiceImpl(const engine::Tokenizer* tokenizer,
                                             Scheduler* scheduler,
                                             RequestLimits limits,
                                             v1::ModelInfoResponse info,
                                             ApiKeys* api_keys)
    : tokenizer_(tokenizer),
      scheduler_(scheduler),
      limits_(FitLimitsToTokenizer(limits, *tokenizer)),
      info_(std::move(info)),
      api_keys_(api_keys),
      writer_(std::make_unique<StreamWriter>()) {}

GenerationServiceImpl::~GenerationServiceImpl() = default;

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationServiceImpl::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* wire) {
  auto* reactor = new GenerateReactor(writer_.get());
  v1::GenerateRequest request;
  absl::StatusOr<std::optional<KeyGrant>> grant = Authorize(context);
  absl::Status parsed =
      grant.ok() ? ParseWireRequest(*wire, &request) : grant.status();
  if (!parsed.ok() && grant.ok()) {
    wire_rejections_.Log(
        absl::StrCat("rejected a Generate request: ", parsed.message()));
  }
  if (parsed.ok() && grant->has_value()) {
    parsed = ApplyGrant(**grant, request.mutable_draft()->mutable_namespace_());
  }
  absl::StatusOr<GenerationRequest> built =
      parsed.ok()
          ? BuildRequest(RawRequestFromProto(request), *tokenizer_, limits_)
          : parsed;
  absl::Status submitted = built.status();
  if (submitted.ok()) {
    submitted = scheduler_->Submit(*std::move(built), reactor);  // Counts.
  } else {
    scheduler_->CountRejected();
  }
  if (!submitted.ok()) reactor->Reject(submitted);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Tokenize(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* wire,
    grpc::ByteBuffer* response) {
  absl::StatusOr<std::optional<KeyGrant>> grant = Authorize(context);
  if (!grant.ok()) return FinishUnary(context, grant.status());
  v1::TokenizeRequest request;
  absl::Status parsed = ParseWireRequest(*wire, &request);
  if (!parsed.ok()) {
    wire_rejections_.Log(
        absl::StrCat("rejected a Tokenize request: ", parsed.message()));
    return FinishUnary(context, parsed);
  }
  absl::StatusOr<std::vector<int32_t>> ids =
      TokenizeIds(std::move(request), *tokenizer_, limits_);
  if (ids.ok()) {
    v1::TokenizeResponse tokens;
    *tokens.mutable_ids() = {ids->begin(), ids->end()};
    *response = SerializeResponse(tokens);
  }
  return FinishUnary(context, ids.status());
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Detokenize(
    grpc::CallbackServerContext* context, const v1::DetokenizeRequest* request,
    v1::DetokenizeResponse* response) {
  absl::StatusOr<std::optional<KeyGrant>> grant = Authorize(context);
  if (!grant.ok()) return FinishUnary(context, grant.status());
  // No sequence this server holds is longer than its context, so a longer
  // list is not ours to decode (and would cost up to the vocabulary's
  // longest token in output bytes per id).
  if (request->ids_size() > limits_.max_context_tokens) {
    return FinishUnary(
        context, FieldError("ids", absl::StrCat(" has ", request->ids_size(),
                                                " ids; use at most ",
                                                limits_.max_context_tokens,
                                                " (--max_context_tokens)")));
  }
  std::vector<int32_t> ids(request->ids().begin(), request->ids().end());
  absl::Status checked = CheckTokenIds(ids, limits_.vocab_size, "ids");
  if (checked.ok()) {
    absl::StatusOr<std::string> text = tokenizer_->Decode(ids);
    if (text.ok()) {
      // Valid UTF-8 on the wire: a cut character becomes U+FFFD.
      response->set_text(engine::SanitizeUtf8(*text));
    }
    checked = text.status();
  }
  return FinishUnary(context, checked);
}

grpc::ServerUnaryReactor* GenerationServiceImpl::ModelInfo(
    grpc::CallbackServerContext* context, const v1::ModelInfoRequest*,
    v1::ModelInfoResponse* response) {
  absl::StatusOr<std::optional<KeyGrant>> grant = Authorize(context);
  if (!grant.ok()) return FinishUnary(context, grant.status());
  *response = info_;
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Stats(
    grpc::CallbackServerContext* context, const v1::GenerationStatsRequest*,
    v1::GenerationStatsResponse* response) {
  absl::StatusOr<std::optional<KeyGrant>> grant = Authorize(context);
  if (!grant.ok()) return FinishUnary(context, grant.status());
  *response = StatsToProto(scheduler_->Stats());
  return FinishUnary(context, absl::OkStatus());
}

}  // namespace lookahead::verifysvc
