#include "draftsvc/service/rpc_handlers.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/grpc_status.h"
#include "common/quote.h"
#include "common/wire_request.h"
#include "draftsvc/service/proto_conversion.h"
#include "proto/draft.grpc.pb.h"
#include "proto/draft.pb.h"

namespace lookahead::draftsvc {
namespace {

namespace v1 = ::lookahead::v1;

// Longest session id a Step entry echoes back: the longest the index opens.
constexpr size_t kMaxEchoedSessionIdBytes = 256;

// One unary RPC of a method registered raw (grpc::ByteBuffer in and out,
// so that common/wire_request.h checks the request's UTF-8 before it is
// parsed): the request, the response being built, and Finish, which
// serializes the response (if OK) into gRPC's buffer before finishing the
// reactor. Shared by the handler and the callbacks that may finish it.
template <typename Request, typename Response>
class UnaryCall {
 public:
  UnaryCall(grpc::CallbackServerContext* context, grpc::ByteBuffer* out)
      : reactor_(context->DefaultReactor()), out_(out) {}

  Request request;
  Response response;

  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  // Exactly once.
  void Finish(grpc::Status status) {
    if (status.ok()) *out_ = SerializeResponse(response);
    reactor_->Finish(std::move(status));
  }
  // A function that finishes this call, keeping it alive until then.
  static std::function<void(grpc::Status)> Finisher(
      std::shared_ptr<UnaryCall> call) {
    return [call = std::move(call)](grpc::Status s) {
      call->Finish(std::move(s));
    };
  }

 private:
  grpc::ServerUnaryReactor* const reactor_;
  grpc::ByteBuffer* const out_;
};

// Counts down the durability callbacks of one RPC plus the RPC's own
// arrival; the last arrival builds the final status and finishes the
// reactor, so it is finished exactly once and only after its response is
// complete. Shared by the RPC handler and the callbacks.
class FinishLatch {
 public:
  // `finish` gets every non-OK arrival as (entry, status), in arrival order.
  using FinishFn = std::function<grpc::Status(
      absl::Span<const std::pair<int, absl::Status>> failures)>;

  // `reactor_finish` finishes the RPC (UnaryCall::Finish).
  FinishLatch(std::function<void(grpc::Status)> reactor_finish,
              FinishFn finish)
      : reactor_finish_(std::move(reactor_finish)),
        finish_(std::move(finish)) {}

  // One more arrival to wait for.
  void Expect() {
    absl::MutexLock lock(&mu_);
    ++pending_;
  }
  // A callback for entry `entry` reports `status`.
  void Arrive(int entry, absl::Status status) {
    std::vector<std::pair<int, absl::Status>> failures;
    {
      absl::MutexLock lock(&mu_);
      if (!status.ok()) failures_.emplace_back(entry, std::move(status));
      if (--pending_ > 0) return;
      failures.swap(failures_);
    }
    reactor_finish_(finish_(failures));
  }

 private:
  const std::function<void(grpc::Status)> reactor_finish_;
  const FinishFn finish_;
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 1;  // The RPC's own arrival.
  std::vector<std::pair<int, absl::Status>> failures_ ABSL_GUARDED_BY(mu_);
};

absl::Status NotPersisted(const absl::Status& s) {
  return absl::Status(
      s.code(),
      absl::StrCat("applied in memory but not persisted: ", s.message()));
}

// Append names a Step entry's fields relative to the entry; the answer
// names accepted_offset in the request: steps[i].accepted_offset.
absl::Status NameOffsetField(int entry, const absl::Status& s) {
  if (!absl::StartsWith(s.message(), "accepted_offset")) return s;
  return absl::Status(s.code(),
                      absl::StrCat("steps[", entry, "].", s.message()));
}

grpc::Status FirstFailureOrOk(
    absl::Span<const std::pair<int, absl::Status>> failures) {
  if (failures.empty()) return grpc::Status::OK;
  return ToGrpcStatus(NotPersisted(failures.front().second));
}

void SetEntryError(const absl::Status& s, v1::SessionDraft* draft) {
  draft->set_persistence(v1::PERSISTENCE_UNSPECIFIED);
  draft->set_code(static_cast<int32_t>(s.code()));
  draft->set_message(std::string(s.message()));
  draft->clear_tree();
}

// Every method is registered raw: a request with invalid UTF-8 in a string
// field is INVALID_ARGUMENT naming the field (logged at most once a
// minute), never gRPC's bare UNIMPLEMENTED and a libprotobuf ERROR line.
using RawDraftService = v1::DraftService::WithRawCallbackMethod_OpenSession<
    v1::DraftService::WithRawCallbackMethod_Step<
        v1::DraftService::WithRawCallbackMethod_CloseSession<
            v1::DraftService::WithRawCallbackMethod_Stats<
                v1::DraftService::WithRawCallbackMethod_Prune<
                    v1::DraftService::WithRawCallbackMethod_Flush<
                        v1::DraftService::CallbackService>>>>>>;

class DraftRpcService final : public RawDraftService {
 public:
  DraftRpcService(const DraftServerOptions& options, DraftIndex& index,
                  TrieStore& store, const RebuildStats& rebuild,
                  ServiceMetrics metrics)
      : options_(options),
        index_(index),
        store_(store),
        rebuild_(rebuild),
        metrics_(metrics) {}

  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* wire, grpc::ByteBuffer* out) override {
    return Serve<v1::OpenSessionRequest, v1::OpenSessionResponse>(
        context, wire, out, "OpenSession", &DraftRpcService::HandleOpenSession);
  }

  void HandleOpenSession(
      std::shared_ptr<
          UnaryCall<v1::OpenSessionRequest, v1::OpenSessionResponse>>
          call) {
    [[maybe_unused]] const v1::OpenSessionRequest* request = &call->request;
    [[maybe_unused]] v1::OpenSessionResponse* response = &call->response;
    // Checked whether or not an assistant runs: bad input is bad input.
    absl::StatusOr<engine::SamplingParams> sampling =
        SamplingFromProto(request->sampling());
    if (!sampling.ok()) {
      call->Finish(ToGrpcStatus(sampling.status()));
      return;
    }
    // Sources named that this server cannot serve fail the open, before
    // anything is stored, as Step would fail every entry of the session:
    // the client hears it before its request produced a token.
    absl::StatusOr<uint32_t> sources = SourcesFromProto(
        request->sources(), options_.default_sources,
        options_.index.ngram_enabled, index_.has_session_source());
    if (sources.ok() && !request->sources().empty() &&
        (*sources & CandidateSourceBit(CandidateSource::kAssistant)) != 0) {
      absl::Status vocabulary =
          index_.CheckSourceVocabulary(request->vocab_size());
      if (!vocabulary.ok()) sources = vocabulary;
    }
    if (!sources.ok()) {
      call->Finish(ToGrpcStatus(sources.status()));
      return;
    }
    SessionSampling session_sampling;
    session_sampling.temperature = sampling->temperature;
    session_sampling.top_k = sampling->top_k;
    session_sampling.top_p = sampling->top_p;
    session_sampling.seed = sampling->seed;
    absl::StatusOr<OpenResult> opened = index_.OpenSession(
        request->session_id(), request->namespace_(), request->vocab_size(),
        request->prompt_tokens(), request->branch_length(),
        request->resumed_output_tokens(), session_sampling);
    if (!opened.ok()) {
      call->Finish(ToGrpcStatus(opened.status()));
      return;
    }
    response->set_namespace_(opened->name_space);
    response->set_prompt_nodes(opened->prompt_nodes);
    if (index_.CheckSourceVocabulary(request->vocab_size()).ok()) {
      response->set_assistant_seconds_per_token(index_.SourceSecondsPerToken());
    }
    call->Finish(grpc::Status::OK);
    return;
  }

  grpc::ServerUnaryReactor* Step(grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* wire, grpc::ByteBuffer* out) override {
    return Serve<v1::StepRequest, v1::StepResponse>(context, wire, out, "Step",
                                       &DraftRpcService::HandleStep);
  }

  void HandleStep(
      std::shared_ptr<UnaryCall<v1::StepRequest, v1::StepResponse>> call) {
    [[maybe_unused]] const v1::StepRequest* request = &call->request;
    [[maybe_unused]] v1::StepResponse* response = &call->response;
    absl::Status valid = ValidateStepRequest(*request);
    if (!valid.ok()) {
      call->Finish(ToGrpcStatus(valid));
      return;
    }
    const int n = request->steps_size();
    // Every entry exists before any callback can run: callbacks only touch
    // the response through the latch's final arrival.
    response->mutable_drafts()->Reserve(n);
    for (const v1::SessionStep& step : request->steps()) {
      // An id longer than any session's is not echoed (its entry says why).
      v1::SessionDraft* draft = response->add_drafts();
      if (step.session_id().size() <= kMaxEchoedSessionIdBytes) {
        draft->set_session_id(step.session_id());
      }
    }
    const bool sync = options_.store.sync;
    // The assistant's time for the whole Step (the verifier waits for it).
    const absl::Time assistant_deadline =
        index_.has_session_source() ? absl::Now() + index_.SourceStepDeadline()
                                    : absl::InfinitePast();
    std::shared_ptr<FinishLatch> latch = NewStepLatch(call);
    for (int i = 0; i < n; ++i) {
      const v1::SessionStep& step = request->steps(i);
      v1::SessionDraft* draft = response->mutable_drafts(i);
      absl::StatusOr<DraftMode> mode = ValidateSessionStep(step);
      if (!mode.ok()) {
        SetEntryError(mode.status(), draft);
        continue;
      }
      std::function<void(absl::Status)> on_durable;
      if (sync) {
        latch->Expect();
        on_durable = [latch, i](absl::Status s) { latch->Arrive(i, s); };
      }
      // Whether this entry drafts from the assistant.
      bool use_assistant = false;
      absl::StatusOr<uint32_t> sources = EntrySources(step, &use_assistant);
      if (!sources.ok()) {
        if (sync) latch->Arrive(i, absl::OkStatus());  // Will not run.
        SetEntryError(sources.status(), draft);
        continue;
      }
      AppendResult applied;
      absl::Status appended =
          index_.Append(step.session_id(), ToStepInput(step),
                        std::move(on_durable), &applied);
      if (!appended.ok()) {
        if (sync) latch->Arrive(i, absl::OkStatus());  // Will not run.
        SetEntryError(NameOffsetField(i, appended), draft);
        continue;
      }
      // A retried report: DURABLE must cover the tokens an earlier Step
      // applied too (its batches may still be queued): a barrier after them.
      if (sync && applied.skipped_tokens > 0) {
        latch->Expect();
        store_.Flush([latch, i](absl::Status s) { latch->Arrive(i, s); });
      }
      // Only the tokens applied now: the rest reached the assistant before.
      const absl::Span<const int32_t> new_tokens =
          absl::MakeConstSpan(step.accepted_tokens())
              .subspan(static_cast<size_t>(applied.skipped_tokens));
      DraftEntry(step, new_tokens, *mode, *sources, use_assistant,
                 assistant_deadline, draft);
    }
    latch->Arrive(-1, absl::OkStatus());
    return;
  }

  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* wire, grpc::ByteBuffer* out) override {
    return Serve<v1::CloseSessionRequest, v1::CloseSessionResponse>(
        context, wire, out, "CloseSession",
        &DraftRpcService::HandleCloseSession);
  }

  void HandleCloseSession(
      std::shared_ptr<
          UnaryCall<v1::CloseSessionRequest, v1::CloseSessionResponse>>
          call) {
    [[maybe_unused]] const v1::CloseSessionRequest* request = &call->request;
    [[maybe_unused]] v1::CloseSessionResponse* response = &call->response;
    auto latch = std::make_shared<FinishLatch>(
        UnaryCall<v1::CloseSessionRequest, v1::CloseSessionResponse>::Finisher(
            call),
        FirstFailureOrOk);
    std::function<void(absl::Status)> on_durable;
    if (options_.store.sync) {
      latch->Expect();
      on_durable = [latch](absl::Status s) { latch->Arrive(0, s); };
    }
    absl::Status closed =
        index_.CloseSession(request->session_id(), std::move(on_durable));
    if (!closed.ok()) {
      call->Finish(ToGrpcStatus(closed));  // The latch never finishes.
      return;
    }
    latch->Arrive(-1, absl::OkStatus());
    return;
  }

  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* wire, grpc::ByteBuffer* out) override {
    return Serve<v1::StatsRequest, v1::StatsResponse>(
        context, wire, out, "Stats", &DraftRpcService::HandleStats);
  }

  void HandleStats(
      std::shared_ptr<UnaryCall<v1::StatsRequest, v1::StatsResponse>> call) {
    [[maybe_unused]] const v1::StatsRequest* request = &call->request;
    [[maybe_unused]] v1::StatsResponse* response = &call->response;
    if (!request->namespace_().empty()) {
      absl::StatusOr<std::string> ns =
          DraftIndex::CanonicalNamespace(request->namespace_());
      if (!ns.ok()) {
        call->Finish(ToGrpcStatus(ns.status()));
        return;
      }
    }
    std::vector<NamespaceStats> stats = index_.Stats(request->namespace_());
    if (!request->namespace_().empty() && stats.empty()) {
      call->Finish(ToGrpcStatus(absl::NotFoundError(absl::StrCat(
          "unknown namespace ", QuoteInput(request->namespace_())))));
      return;
    }
    for (const NamespaceStats& s : stats) {
      v1::NamespaceStats* out = response->add_namespaces();
      out->set_namespace_(s.name_space);
      out->set_vocab_size(s.vocab_size);
      out->set_output_nodes(s.output_nodes);
      out->set_capacity(s.capacity);
      out->set_open_sessions(s.open_sessions);
      out->set_prompt_nodes(s.prompt_nodes);
      out->set_prunes(s.prunes);
      out->set_ngram_entries(s.ngram_entries);
      out->set_ngram_keys(s.ngram_keys);
      out->set_ngram_prunes(s.ngram_prunes);
      for (const SourceStatsRow& row : s.sources) {
        v1::SourceStats* source = out->add_sources();
        source->set_source(ToProto(row.source));
        source->set_proposed_tokens(row.proposed);
        source->set_accepted_tokens(row.accepted);
        for (float rate : row.depth_acceptance) {
          source->add_depth_acceptance(rate);
        }
      }
    }
    response->set_bytes_per_node(index_.BytesPerNode());
    response->set_disk_bytes(store_.DiskBytes());
    response->set_pending_batches(store_.PendingBatches());
    response->set_rebuild_seconds(rebuild_.seconds);
    const StoreHealth health = store_.Health();
    v1::StoreStatus* store = response->mutable_store();
    store->set_degraded(health.degraded);
    store->set_error(health.error);
    store->set_write_errors(health.write_errors);
    store->set_unpersisted_mutations(health.unpersisted_mutations);
    store->set_lost_mutations(health.lost_mutations);
    store->set_recoveries(health.recoveries);
    const WalRecoveryReport& wal = store_.wal_recovery();
    v1::WalRecovery* recovery = store->mutable_wal_recovery();
    recovery->set_wal_file(wal.wal_file);
    recovery->set_dropped_records(wal.dropped_records);
    recovery->set_dropped_bytes(wal.dropped_bytes);
    recovery->set_dropped_updates(wal.dropped_updates);
    recovery->set_rocksdb_dropped_bytes(wal.rocksdb_dropped_bytes);
    recovery->set_summary(wal.Summary());
    call->Finish(grpc::Status::OK);
    return;
  }

  grpc::ServerUnaryReactor* Prune(grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* wire, grpc::ByteBuffer* out) override {
    return Serve<v1::PruneRequest, v1::PruneResponse>(
        context, wire, out, "Prune", &DraftRpcService::HandlePrune);
  }

  void HandlePrune(
      std::shared_ptr<UnaryCall<v1::PruneRequest, v1::PruneResponse>> call) {
    [[maybe_unused]] const v1::PruneRequest* request = &call->request;
    [[maybe_unused]] v1::PruneResponse* response = &call->response;
    auto latch = std::make_shared<FinishLatch>(
        UnaryCall<v1::PruneRequest, v1::PruneResponse>::Finisher(call),
        FirstFailureOrOk);
    std::function<void(absl::Status)> on_durable;
    if (options_.store.sync) {
      latch->Expect();
      on_durable = [latch](absl::Status s) { latch->Arrive(0, s); };
    }
    absl::StatusOr<PruneResult> pruned = index_.Prune(
        request->namespace_(), request->target_nodes(), std::move(on_durable));
    if (!pruned.ok()) {
      call->Finish(ToGrpcStatus(pruned.status()));
      return;
    }
    response->set_removed_nodes(pruned->removed_nodes);
    response->set_remaining_nodes(pruned->remaining_nodes);
    latch->Arrive(-1, absl::OkStatus());
    return;
  }

  grpc::ServerUnaryReactor* Flush(grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* wire, grpc::ByteBuffer* out) override {
    return Serve<v1::FlushRequest, v1::FlushResponse>(
        context, wire, out, "Flush", &DraftRpcService::HandleFlush);
  }

  void HandleFlush(
      std::shared_ptr<UnaryCall<v1::FlushRequest, v1::FlushResponse>> call) {
    [[maybe_unused]] const v1::FlushRequest* request = &call->request;
    [[maybe_unused]] v1::FlushResponse* response = &call->response;
    store_.Flush(
        [call](absl::Status s) { call->Finish(ToGrpcStatus(s)); });
    return;
  }

 private:
  // Parses the raw request (UTF-8 first) and runs `handle`, or finishes the
  // call with INVALID_ARGUMENT naming the bad field.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Serve(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* wire,
      grpc::ByteBuffer* out, absl::string_view method,
      void (DraftRpcService::*handle)(
          std::shared_ptr<UnaryCall<Request, Response>>)) {
    auto call = std::make_shared<UnaryCall<Request, Response>>(context, out);
    absl::Status parsed = ParseWireRequest(*wire, &call->request);
    if (!parsed.ok()) {
      wire_rejections_.Log(
          absl::StrCat("rejected a ", method, " request: ", parsed.message()));
      call->Finish(ToGrpcStatus(parsed));
      return call->reactor();
    }
    grpc::ServerUnaryReactor* reactor = call->reactor();
    (this->*handle)(std::move(call));
    return reactor;
  }

  // The latch that finishes a Step once every durability callback arrived.
  // Entries that succeed say what became of their tokens: in sync mode
  // DURABLE iff the store fsynced them; a degraded store's UNAVAILABLE
  // keeps the entry (and its draft) OK but NOT_PERSISTED.
  std::shared_ptr<FinishLatch> NewStepLatch(
      std::shared_ptr<UnaryCall<v1::StepRequest, v1::StepResponse>> call) {
    v1::StepResponse* response = &call->response;
    const v1::Persistence ok_persistence =
        options_.store.sync
            ? v1::PERSISTENCE_DURABLE
            : (store_.degraded() ? v1::PERSISTENCE_NOT_PERSISTED
                                 : v1::PERSISTENCE_QUEUED);
    return std::make_shared<FinishLatch>(
        UnaryCall<v1::StepRequest, v1::StepResponse>::Finisher(call),
        [response, ok_persistence](
            absl::Span<const std::pair<int, absl::Status>> failures) {
          for (v1::SessionDraft& draft : *response->mutable_drafts()) {
            if (draft.code() == 0) draft.set_persistence(ok_persistence);
          }
          for (const auto& [entry, status] : failures) {
            v1::SessionDraft* draft = response->mutable_drafts(entry);
            if (draft->code() != 0) continue;
            if (status.code() == absl::StatusCode::kUnavailable) {
              draft->set_persistence(v1::PERSISTENCE_NOT_PERSISTED);
            } else {
              SetEntryError(NotPersisted(status), draft);
            }
          }
          return grpc::Status::OK;
        });
  }

  // The sources a Step entry drafts from (SourcesFromProto less the
  // withheld ones); `*use_assistant` says whether the assistant is among
  // them. The assistant asked for by name but unusable for the session
  // (another vocabulary) fails the entry; as a default source, or for an
  // unknown session (Append says so), it is dropped.
  absl::StatusOr<uint32_t> EntrySources(const v1::SessionStep& step,
                                        bool* use_assistant) const {
    absl::StatusOr<uint32_t> sources = SourcesFromProto(
        step.sources(), options_.default_sources,
        options_.index.ngram_enabled, index_.has_session_source());
    if (sources.ok()) *sources &= ~WithheldSources(step.withheld_sources());
    if (sources.ok() &&
        (*sources & CandidateSourceBit(CandidateSource::kAssistant))) {
      const absl::Status usable = index_.CheckSessionSource(step.session_id());
      if (usable.ok()) {
        *use_assistant = true;
      } else if (!step.sources().empty() && !absl::IsNotFound(usable)) {
        // Asked for by name: say why not (another vocabulary).
        sources = usable;
      } else {
        // A default source, or an unknown session (Append says so).
        *sources &= ~CandidateSourceBit(CandidateSource::kAssistant);
      }
    }
    return sources;
  }

  // After the entry's tokens were appended (`new_tokens`: those the index
  // applied now, past what it held already; the index passed them on to
  // the session source), the entry's draft (if it asks for one) is
  // retrieved into `draft`, for the session's context now (a duplicate
  // report gets one too).
  void DraftEntry(const v1::SessionStep& step,
                  absl::Span<const int32_t> new_tokens, DraftMode mode,
                  uint32_t sources, bool use_assistant,
                  absl::Time assistant_deadline, v1::SessionDraft* draft) {
    if (metrics_.inserted_tokens != nullptr) {
      metrics_.inserted_tokens->Increment(new_tokens.size());
    }
    const bool drafts =
        mode != DraftMode::kOff && step.decoding_length() != 0;
    // The first entry that asks for the session source starts its state
    // (a model's background prefill) even if it drafts nothing now.
    if (use_assistant && !drafts) index_.WarmSessionSource(step.session_id());
    // Whether or not this entry drafts: the source's work for it since the
    // last Step (its drafting then, pre-drafts and catch-up since).
    if (index_.has_session_source()) {
      draft->set_assistant_seconds(
          index_.TakeSourceSeconds(step.session_id()));
    }
    if (!drafts) return;
    const absl::Time start = absl::Now();
    RetrieveRequest retrieve;
    retrieve.decoding_length = step.decoding_length();
    retrieve.branch_length = step.branch_length();
    retrieve.mode = mode;
    retrieve.sources = sources;
    double source_seconds = -1;
    if (use_assistant) {
      retrieve.source_deadline = assistant_deadline;
      retrieve.source_draft_seconds = &source_seconds;
    }
    absl::StatusOr<MixedDraft> tree =
        index_.Retrieve(step.session_id(), retrieve);
    if (source_seconds >= 0 && metrics_.assistant_draft_seconds != nullptr) {
      metrics_.assistant_draft_seconds->Observe(source_seconds);
    }
    if (metrics_.retrieval_seconds != nullptr) {
      metrics_.retrieval_seconds->Observe(
          absl::ToDoubleSeconds(absl::Now() - start));
    }
    if (!tree.ok()) {
      // The tokens are applied, so the entry is not NOT_FOUND even if the
      // session expired since: the verifier would report them again.
      // It just gets no draft, and its next Step finds the session gone.
      if (!absl::IsNotFound(tree.status())) {
        SetEntryError(tree.status(), draft);
      }
      return;
    }
    ToProto(*tree, draft->mutable_tree());
  }

  // Request-level checks: batch size and duplicate ids.
  absl::Status ValidateStepRequest(const v1::StepRequest& request) const {
    if (request.steps_size() > options_.max_step_sessions) {
      return absl::InvalidArgumentError(
          absl::StrCat("Step has ", request.steps_size(), " entries; at most ",
                       options_.max_step_sessions, " are allowed"));
    }
    absl::flat_hash_map<absl::string_view, int> first_entry;
    for (int i = 0; i < request.steps_size(); ++i) {
      auto [it, inserted] =
          first_entry.emplace(request.steps(i).session_id(), i);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            "session_id ", QuoteInput(request.steps(i).session_id()),
            " appears twice in one Step (entries ", it->second, " and ", i,
            ")"));
      }
    }
    return absl::OkStatus();
  }

  // Per-entry checks done before anything changes, so that a bad retrieval
  // argument never leaves the insertion half done.
  absl::StatusOr<DraftMode> ValidateSessionStep(
      const v1::SessionStep& step) const {
    const IndexOptions& limits = index_.options();
    if (step.decoding_length() < 0 ||
        step.decoding_length() > limits.max_decoding_length) {
      return absl::InvalidArgumentError(
          absl::StrCat("decoding_length ", step.decoding_length(),
                       " outside [0, ", limits.max_decoding_length, "]"));
    }
    if (step.branch_length() < 0 ||
        step.branch_length() > limits.max_branch_length) {
      return absl::InvalidArgumentError(
          absl::StrCat("branch_length ", step.branch_length(), " outside [0, ",
                       limits.max_branch_length, "]"));
    }
    return FromProto(step.mode());
  }

  const DraftServerOptions& options_;
  DraftIndex& index_;
  TrieStore& store_;
  const RebuildStats& rebuild_;
  const ServiceMetrics metrics_;
  RateLimitedLog wire_rejections_{"draftsvc", absl::Minutes(1)};
};

}  // namespace

std::unique_ptr<grpc::Service> NewDraftRpcService(
    const DraftServerOptions& options, DraftIndex& index, TrieStore& store,
    const RebuildStats& rebuild, ServiceMetrics metrics) {
  return std::make_unique<DraftRpcService>(options, index, store, rebuild,
                                           metrics);
}

}  // namespace lookahead::draftsvc
