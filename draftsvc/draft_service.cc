#include "draftsvc/draft_service.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/grpc_status.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "common/wire_request.h"
#include "draftsvc/draft_mix.h"
#include "engine/model/sampler.h"
#include "proto/draft.grpc.pb.h"
#include "proto/draft.pb.h"

namespace lookahead::draftsvc {
namespace {

namespace v1 = ::lookahead::v1;

// Longest session id a Step entry echoes back: the longest the index opens.
constexpr size_t kMaxEchoedSessionIdBytes = 256;

// Feeds a full store scan into the index.
class IndexRestorer : public TrieScanVisitor {
 public:
  explicit IndexRestorer(DraftIndex& index) : index_(index) {}

  absl::Status OnNamespace(absl::string_view name_space,
                           int32_t vocab_size) override {
    ++stats.namespaces;
    return index_.RestoreNamespace(name_space, vocab_size);
  }
  absl::Status OnNode(absl::string_view name_space,
                      absl::Span<const int32_t> path, int64_t count) override {
    ++stats.nodes;
    return index_.RestoreNode(name_space, path, count);
  }
  absl::Status OnNgram(absl::string_view name_space,
                       absl::Span<const int32_t> key,
                       absl::Span<const int32_t> continuation,
                       int64_t count) override {
    ++stats.ngram_entries;
    return index_.RestoreNgram(name_space, key, continuation, count);
  }

  RebuildStats stats;

 private:
  DraftIndex& index_;
};

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

v1::DraftSource ToProto(DraftSource source) {
  switch (source) {
    case DraftSource::kPrompt:
      return v1::DRAFT_SOURCE_PROMPT;
    case DraftSource::kOutput:
      return v1::DRAFT_SOURCE_OUTPUT;
    case DraftSource::kNgram:
      return v1::DRAFT_SOURCE_NGRAM;
    case DraftSource::kAssistant:
      return v1::DRAFT_SOURCE_ASSISTANT;
  }
  return v1::DRAFT_SOURCE_UNSPECIFIED;
}

const char* SourceLabel(DraftSource source) {
  switch (source) {
    case DraftSource::kPrompt:
      return "prompt";
    case DraftSource::kOutput:
      return "output";
    case DraftSource::kNgram:
      return "ngram";
    case DraftSource::kAssistant:
      return "assistant";
  }
  return "unknown";
}

void ToProto(const TrieDraft& tree, v1::DraftTree* out) {
  const int n = static_cast<int>(tree.nodes.size());
  out->mutable_tokens()->Reserve(n);
  out->mutable_parents()->Reserve(n);
  out->mutable_depths()->Reserve(n);
  out->mutable_sources()->Reserve(n);
  out->mutable_scores()->Reserve(n);
  out->mutable_source_sets()->Reserve(n);
  for (const DraftNode& node : tree.nodes) {
    out->add_tokens(node.token);
    out->add_parents(node.parent);
    out->add_depths(node.depth);
    out->add_sources(ToProto(node.source));
    out->add_scores(node.score);
    const uint32_t set =
        node.source_set != 0 ? node.source_set : SourceBit(node.source);
    uint32_t wire = 0;
    for (int s = 0; s < kNumDraftSources; ++s) {
      if ((set >> s & 1) != 0) {
        wire |= uint32_t{1} << ToProto(static_cast<DraftSource>(s));
      }
    }
    out->add_source_sets(wire);
  }
}

// The SourceBits a wire DraftSource selects (PROMPT and OUTPUT: both
// tries); 0 for a value this server does not know.
uint32_t SourceBitsOf(int source) {
  switch (source) {
    case v1::DRAFT_SOURCE_PROMPT:
    case v1::DRAFT_SOURCE_OUTPUT:
      return SourceBit(DraftSource::kPrompt) | SourceBit(DraftSource::kOutput);
    case v1::DRAFT_SOURCE_NGRAM:
      return SourceBit(DraftSource::kNgram);
    case v1::DRAFT_SOURCE_ASSISTANT:
      return SourceBit(DraftSource::kAssistant);
    default:
      return 0;
  }
}

// SessionStep.withheld_sources as a SourceBit set; values this server does
// not know are ignored (withholding them changes nothing).
uint32_t WithheldSources(const google::protobuf::RepeatedField<int>& sources) {
  uint32_t out = 0;
  for (int source : sources) out |= SourceBitsOf(source);
  return out;
}

// The entry's retrieval sources as a SourceBit set (empty: `defaults`):
// INVALID_ARGUMENT for values this server does not know, FAILED_PRECONDITION
// naming the flag for sources it does not run.
absl::StatusOr<uint32_t> SourcesFromProto(
    const google::protobuf::RepeatedField<int>& sources, uint32_t defaults,
    bool ngram_enabled, bool assistant_enabled) {
  if (sources.empty()) return defaults;
  uint32_t out = 0;
  for (int i = 0; i < sources.size(); ++i) {
    const uint32_t bits = SourceBitsOf(sources[i]);
    if (bits == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sources[", i, "] is ", sources[i],
                       ", not a DraftSource this server knows (1..4)"));
    }
    if ((bits & SourceBit(DraftSource::kNgram)) != 0 && !ngram_enabled) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sources[", i,
          "] is DRAFT_SOURCE_NGRAM, which this server does not run "
          "(started with --ngram_pool=false)"));
    }
    if ((bits & SourceBit(DraftSource::kAssistant)) != 0 &&
        !assistant_enabled) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sources[", i,
          "] is DRAFT_SOURCE_ASSISTANT, which this server does not run "
          "(start it with --assistant_model or --self_draft)"));
    }
    out |= bits;
  }
  return out;
}

// The entry's predictions and n-grams as the index's neutral input (spans
// into `step`, which must outlive it).
StepInput ToStepInput(const v1::SessionStep& step) {
  StepInput input;
  input.accepted = step.accepted_tokens();
  input.predictions.reserve(step.predictions_size());
  for (const v1::PredictionTree& tree : step.predictions()) {
    PredictionInput p;
    p.root_after = tree.root_after();
    p.tokens = tree.tokens();
    p.parents = tree.parents();
    p.k = tree.k();
    p.top_tokens = tree.top_tokens();
    input.predictions.push_back(p);
  }
  input.ngrams.reserve(step.ngrams_size());
  for (const v1::Ngram& ngram : step.ngrams()) {
    input.ngrams.push_back(ngram.tokens());
  }
  return input;
}

// Maps the wire mode; INVALID_ARGUMENT for values this server does not know.
absl::StatusOr<DraftMode> FromProto(int mode) {
  switch (mode) {
    case v1::DRAFT_MODE_UNSPECIFIED:
    case v1::DRAFT_MODE_TRIE_HIERARCHICAL:
      return DraftMode::kHierarchical;
    case v1::DRAFT_MODE_TRIE_PARALLEL:
      return DraftMode::kParallel;
    case v1::DRAFT_MODE_OFF:
      return DraftMode::kOff;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown draft mode ", mode));
  }
}

// OpenSessionRequest.sampling as the engine's; INVALID_ARGUMENT naming the
// field. Unset fields mean greedy, no top-k, no nucleus cut (top_p 0 is
// proto3's unset, read as 1).
absl::StatusOr<engine::SamplingParams> SamplingFromProto(
    const v1::DraftSampling& sampling) {
  if (!std::isfinite(sampling.temperature()) || sampling.temperature() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.temperature ", sampling.temperature(),
                     " must be finite and >= 0 (0 = greedy)"));
  }
  if (sampling.top_k() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.top_k ", sampling.top_k(), " must be >= 0 (0 = off)"));
  }
  if (!(sampling.top_p() >= 0 && sampling.top_p() <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_p ", sampling.top_p(),
                     " must be in [0, 1] (0 = unset = 1 = off)"));
  }
  engine::SamplingParams params;
  params.temperature = sampling.temperature();
  params.top_k = sampling.top_k();
  params.top_p = sampling.top_p() == 0 ? 1.0f : sampling.top_p();
  params.seed = sampling.seed();
  RETURN_IF_ERROR(engine::ValidateSamplingParams(params));
  return params;
}

}  // namespace

// The assistant model and its drafter, with the index sessions' drafter
// sessions: each index session (by its serial) may have a drafter session
// named by that serial, so a reopened id never meets its predecessor's.
// Drafter sessions open lazily, at the first Step entry that asks for the
// assistant (with the prompt and every token accepted until then), so
// sessions that never use it cost no model work (the drafter prefills every
// session it knows in the background). Sessions whose vocabulary is not
// the model's never get one and say why.
//
// Thread-safety: all methods are safe to call concurrently.
class AssistantSource {
 public:
  static absl::StatusOr<std::unique_ptr<AssistantSource>> Load(
      const AssistantServingOptions& options) {
    if (options.step_deadline < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "assistant step deadline (--assistant_deadline_ms) ",
          absl::FormatDuration(options.step_deadline), " is negative"));
    }
    AssistantEngineFactory factory = options.factory;
    if (factory == nullptr) {
      ASSIGN_OR_RETURN(factory, LoadAssistantPlugin(options.plugin_path));
    }
    ASSIGN_OR_RETURN(
        std::unique_ptr<AssistantEngine> engine,
        factory(options.model_path, options.model, options.drafter));
    return std::unique_ptr<AssistantSource>(
        new AssistantSource(std::move(engine), options.step_deadline));
  }

  const AssistantEngine& engine() const { return *drafter_; }
  absl::Duration step_deadline() const { return step_deadline_; }
  AssistantDrafterStats stats() const { return drafter_->stats(); }
  // What a drafted token costs at least: one one-token pass.
  double seconds_per_token() const { return drafter_->seconds_per_pass(); }
  // The same, timed again first if no pass was timed for a minute (an
  // assistant the verifiers stopped asking runs none).
  double RecentSecondsPerToken() {
    return drafter_->RecentSecondsPerPass(absl::Minutes(1));
  }

  // After the index opened `id` as `serial`: remembers its context and
  // sampling for a drafter session, or why the session cannot use the
  // assistant (another vocabulary). Never fails the session.
  void Open(absl::string_view id, int64_t serial, int32_t vocab_size,
            absl::Span<const int32_t> prompt,
            const engine::SamplingParams& sampling) {
    Entry entry;
    entry.serial = serial;
    entry.unusable = drafter_->CheckVocabulary(vocab_size);
    if (entry.unusable.ok()) {
      entry.context.assign(prompt.begin(), prompt.end());
      entry.sampling = sampling;
    }
    absl::MutexLock lock(&mu_);
    if (retired_early_.erase(serial) > 0) return;
    auto it = sessions_.find(id);
    // A newer session of the same id (two racing opens) wins.
    if (it == sessions_.end() || it->second.serial < serial) {
      sessions_[std::string(id)] = std::move(entry);
    }
  }

  // The index retired session `id` `serial`: closes its drafter session.
  void Retired(absl::string_view id, int64_t serial) {
    {
      absl::MutexLock lock(&mu_);
      auto it = sessions_.find(id);
      if (it != sessions_.end() && it->second.serial == serial) {
        sessions_.erase(it);
      } else if (it == sessions_.end() || it->second.serial < serial) {
        // Retired before Open registered it (a racing CloseSession).
        retired_early_.insert(serial);
      }
    }
    // NOT_FOUND: it had none (another vocabulary).
    drafter_->Close(DrafterId(serial)).IgnoreError();
  }

  // Whether session `id` can draft from the assistant: the vocabulary's
  // FAILED_PRECONDITION (or a drafter error) if not, NOT_FOUND if the
  // session is unknown here.
  absl::Status Check(absl::string_view id) const {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(
          absl::StrCat("session ", QuoteInput(id), " is not open"));
    }
    return it->second.unusable;
  }

  // The drafter session of `id`, opened now with the context so far if it
  // has none yet; Check's errors otherwise.
  absl::StatusOr<std::string> Acquire(absl::string_view id) {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(
          absl::StrCat("session ", QuoteInput(id), " is not open"));
    }
    Entry& entry = it->second;
    RETURN_IF_ERROR(entry.unusable);
    const std::string drafter_id = DrafterId(entry.serial);
    if (!entry.opened) {
      // Cheap (a copy and a queued pre-draft), so under mu_: an Advance of
      // the same session cannot slip between the copy and the open.
      entry.unusable =
          drafter_->Open(drafter_id, entry.context, entry.sampling);
      RETURN_IF_ERROR(entry.unusable);
      entry.opened = true;
      entry.context = {};
    }
    return drafter_id;
  }

  // The Step's accepted tokens, after the index appended them. A drafter
  // that refuses them (it cannot: the index checked the ids) would draft
  // for the wrong position, so the session stops using the assistant.
  void Advance(absl::string_view id, absl::Span<const int32_t> accepted) {
    if (accepted.empty()) return;
    std::string drafter_id;
    {
      absl::MutexLock lock(&mu_);
      auto it = sessions_.find(id);
      if (it == sessions_.end() || !it->second.unusable.ok()) return;
      Entry& entry = it->second;
      if (!entry.opened) {
        entry.context.insert(entry.context.end(), accepted.begin(),
                             accepted.end());
        return;
      }
      drafter_id = DrafterId(entry.serial);
    }
    absl::Status advanced = drafter_->Advance(drafter_id, accepted);
    if (advanced.ok()) return;
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end() && DrafterId(it->second.serial) == drafter_id) {
      it->second.unusable = absl::InternalError(
          absl::StrCat("the assistant lost session ", QuoteInput(id),
                       "'s context: ", advanced.message()));
    }
  }

  // Seconds of assistant passes for session `id` since the last call
  // (AssistantDrafter::TakeSeconds); 0 if it has no drafter session.
  double TakeSeconds(absl::string_view id) {
    std::string drafter_id;
    {
      absl::MutexLock lock(&mu_);
      auto it = sessions_.find(id);
      if (it == sessions_.end() || !it->second.opened) return 0;
      drafter_id = DrafterId(it->second.serial);
    }
    return drafter_->TakeSeconds(drafter_id);
  }

  // The assistant's candidates (at most `budget` nodes, drafted until
  // `deadline`) below the session's last token; none on any error.
  CandidateTree Draft(const std::string& drafter_id, int budget,
                      absl::Time deadline) {
    CandidateTree out;
    out.source = DraftSource::kAssistant;
    absl::StatusOr<AssistantDraft> draft =
        drafter_->Draft(drafter_id, budget, deadline);
    if (!draft.ok() || draft->tree.empty()) return out;
    return RankedCandidates(DraftSource::kAssistant, draft->tree.tokens,
                            draft->tree.parents, draft->probabilities);
  }

 private:
  struct Entry {
    int64_t serial = 0;
    // OK iff the session may use the assistant.
    absl::Status unusable;
    // Whether DrafterId(serial) is open in the drafter. Until it is, the
    // prompt and accepted tokens so far (then empty) and the sampling.
    bool opened = false;
    std::vector<int32_t> context;
    engine::SamplingParams sampling;
  };

  AssistantSource(std::unique_ptr<AssistantEngine> drafter,
                  absl::Duration step_deadline)
      : drafter_(std::move(drafter)), step_deadline_(step_deadline) {}

  static std::string DrafterId(int64_t serial) { return absl::StrCat(serial); }

  const std::unique_ptr<AssistantEngine> drafter_;
  const absl::Duration step_deadline_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> retired_early_ ABSL_GUARDED_BY(mu_);
};

// Logs the store's degraded/recovered transitions and mirrors them into the
// gRPC health service as kStorageHealthService. Called from the store's
// writer thread; thread-safe.
class StorageHealthReporter {
 public:
  explicit StorageHealthReporter(std::string db_path)
      : db_path_(std::move(db_path)) {}

  void OnChange(const StoreHealth& h) {
    absl::MutexLock lock(&mu_);
    if (h.degraded) {
      std::fprintf(stderr,
                   "draftsvc: storage DEGRADED (read-only): serving drafts "
                   "from memory, trie updates are not persisted until %s can "
                   "be written again (retrying): %s\n",
                   db_path_.c_str(), h.error.c_str());
    } else {
      std::fprintf(
          stderr,
          "draftsvc: storage writable again (recovery %lld): "
          "re-persisted %lld trie mutations accepted while "
          "degraded\n",
          static_cast<long long>(h.recoveries),
          static_cast<long long>(h.repersisted_mutations - repersisted_));
      repersisted_ = h.repersisted_mutations;
    }
    std::fflush(stderr);
    if (health_ != nullptr) {
      health_->SetServingStatus(kStorageHealthService, !h.degraded);
    }
  }
  // `health` (may be null: detach) gets the state from now on, starting
  // with `store`'s (read under the lock, so that a transition racing with
  // this call is reported after it, never lost). Once this returns with
  // null, no call reaches the previous `health`.
  void Attach(grpc::HealthCheckServiceInterface* health,
              const TrieStore* store) {
    absl::MutexLock lock(&mu_);
    health_ = health;
    if (health_ != nullptr) {
      health_->SetServingStatus(kStorageHealthService,
                                store == nullptr || !store->degraded());
    }
  }

 private:
  const std::string db_path_;
  absl::Mutex mu_;
  grpc::HealthCheckServiceInterface* health_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t repersisted_ ABSL_GUARDED_BY(mu_) = 0;
};

// The series the service itself updates (the rest are scrape-time
// callbacks); null members when metrics are off.
struct ServiceMetrics {
  metrics::Counter* inserted_tokens = nullptr;
  metrics::Histogram* retrieval_seconds = nullptr;
  metrics::Histogram* assistant_draft_seconds = nullptr;  // With an assistant.
};

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

class DraftServer::Service final : public RawDraftService {
 public:
  // `assistant` may be null (none runs).
  Service(const DraftServerOptions& options, DraftIndex& index,
          TrieStore& store, AssistantSource* assistant,
          const RebuildStats& rebuild, ServiceMetrics metrics)
      : options_(options),
        index_(index),
        store_(store),
        assistant_(assistant),
        rebuild_(rebuild),
        metrics_(metrics) {}

  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* wire, grpc::ByteBuffer* out) override {
    return Serve<v1::OpenSessionRequest, v1::OpenSessionResponse>(context, wire, out, "OpenSession",
                                       &Service::HandleOpenSession);
  }

  void HandleOpenSession(std::shared_ptr<UnaryCall<v1::OpenSessionRequest, v1::OpenSessionResponse>> call) {
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
    absl::StatusOr<uint32_t> sources =
        SourcesFromProto(request->sources(), options_.default_sources,
                         options_.index.ngram_enabled, assistant_ != nullptr);
    if (sources.ok() && !request->sources().empty() &&
        (*sources & SourceBit(DraftSource::kAssistant)) != 0) {
      absl::Status vocabulary =
          assistant_->engine().CheckVocabulary(request->vocab_size());
      if (!vocabulary.ok()) sources = vocabulary;
    }
    if (!sources.ok()) {
      call->Finish(ToGrpcStatus(sources.status()));
      return;
    }
    absl::StatusOr<OpenResult> opened = index_.OpenSession(
        request->session_id(), request->namespace_(), request->vocab_size(),
        request->prompt_tokens(), request->branch_length());
    if (!opened.ok()) {
      call->Finish(ToGrpcStatus(opened.status()));
      return;
    }
    if (assistant_ != nullptr) {
      assistant_->Open(request->session_id(), opened->serial,
                       request->vocab_size(), request->prompt_tokens(),
                       *sampling);
    }
    response->set_namespace_(opened->name_space);
    response->set_prompt_nodes(opened->prompt_nodes);
    if (assistant_ != nullptr &&
        assistant_->engine().CheckVocabulary(request->vocab_size()).ok()) {
      response->set_assistant_seconds_per_token(
          assistant_->RecentSecondsPerToken());
    }
    call->Finish(grpc::Status::OK);
    return;
  }

  grpc::ServerUnaryReactor* Step(grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* wire, grpc::ByteBuffer* out) override {
    return Serve<v1::StepRequest, v1::StepResponse>(context, wire, out, "Step",
                                       &Service::HandleStep);
  }

  void HandleStep(std::shared_ptr<UnaryCall<v1::StepRequest, v1::StepResponse>> call) {
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
        assistant_ != nullptr ? absl::Now() + assistant_->step_deadline()
                              : absl::InfinitePast();
    // Entries that succeed say what became of their tokens: in sync mode
    // DURABLE iff the store fsynced them; a degraded store's UNAVAILABLE
    // keeps the entry (and its draft) OK but NOT_PERSISTED.
    const v1::Persistence ok_persistence =
        sync ? v1::PERSISTENCE_DURABLE
             : (store_.degraded() ? v1::PERSISTENCE_NOT_PERSISTED
                                  : v1::PERSISTENCE_QUEUED);
    auto latch = std::make_shared<FinishLatch>(
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
      absl::StatusOr<uint32_t> sources =
          SourcesFromProto(step.sources(), options_.default_sources,
                           options_.index.ngram_enabled, assistant_ != nullptr);
      if (sources.ok()) *sources &= ~WithheldSources(step.withheld_sources());
      // Whether this entry drafts from the assistant.
      bool use_assistant = false;
      if (sources.ok() && (*sources & SourceBit(DraftSource::kAssistant))) {
        const absl::Status usable = assistant_->Check(step.session_id());
        if (usable.ok()) {
          use_assistant = true;
        } else if (!step.sources().empty() && !absl::IsNotFound(usable)) {
          // Asked for by name: say why not (another vocabulary).
          sources = usable;
        } else {
          // A default source, or an unknown session (Append says so).
          *sources &= ~SourceBit(DraftSource::kAssistant);
        }
      }
      if (!sources.ok()) {
        if (sync) latch->Arrive(i, absl::OkStatus());  // Will not run.
        SetEntryError(sources.status(), draft);
        continue;
      }
      absl::Status appended = index_.Append(
          step.session_id(), ToStepInput(step), std::move(on_durable));
      if (!appended.ok()) {
        if (sync) latch->Arrive(i, absl::OkStatus());  // Will not run.
        SetEntryError(appended, draft);
        continue;
      }
      if (metrics_.inserted_tokens != nullptr) {
        metrics_.inserted_tokens->Increment(step.accepted_tokens_size());
      }
      // Every session's drafter follows its tokens, in Step order, whether
      // or not this entry drafts from it.
      if (assistant_ != nullptr) {
        assistant_->Advance(step.session_id(), step.accepted_tokens());
      }
      // The first entry that asks for the assistant opens its session (and
      // starts its background prefill) even if it drafts nothing now.
      absl::StatusOr<std::string> assistant_session =
          use_assistant ? assistant_->Acquire(step.session_id())
                        : absl::NotFoundError("not asked for");
      // Whether or not this entry drafts: the passes run for it since the
      // last Step (its drafting then, pre-drafts and catch-up since).
      if (assistant_ != nullptr) {
        draft->set_assistant_seconds(
            assistant_->TakeSeconds(step.session_id()));
      }
      if (*mode == DraftMode::kOff || step.decoding_length() == 0) continue;
      const absl::Time start = absl::Now();
      RetrieveRequest retrieve;
      retrieve.decoding_length = step.decoding_length();
      retrieve.branch_length = step.branch_length();
      retrieve.mode = *mode;
      retrieve.sources = *sources;
      if (assistant_session.ok()) {
        const absl::Time drafting = absl::Now();
        retrieve.extra.push_back(assistant_->Draft(
            *assistant_session, step.decoding_length(), assistant_deadline));
        if (metrics_.assistant_draft_seconds != nullptr) {
          metrics_.assistant_draft_seconds->Observe(
              absl::ToDoubleSeconds(absl::Now() - drafting));
        }
      }
      absl::StatusOr<TrieDraft> tree =
          index_.Retrieve(step.session_id(), retrieve);
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
        continue;
      }
      ToProto(*tree, draft->mutable_tree());
    }
    latch->Arrive(-1, absl::OkStatus());
    return;
  }

  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* wire, grpc::ByteBuffer* out) override {
    return Serve<v1::CloseSessionRequest, v1::CloseSessionResponse>(context, wire, out, "CloseSession",
                                       &Service::HandleCloseSession);
  }

  void HandleCloseSession(std::shared_ptr<UnaryCall<v1::CloseSessionRequest, v1::CloseSessionResponse>> call) {
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
    return Serve<v1::StatsRequest, v1::StatsResponse>(context, wire, out, "Stats",
                                       &Service::HandleStats);
  }

  void HandleStats(std::shared_ptr<UnaryCall<v1::StatsRequest, v1::StatsResponse>> call) {
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
    return Serve<v1::PruneRequest, v1::PruneResponse>(context, wire, out, "Prune",
                                       &Service::HandlePrune);
  }

  void HandlePrune(std::shared_ptr<UnaryCall<v1::PruneRequest, v1::PruneResponse>> call) {
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
    return Serve<v1::FlushRequest, v1::FlushResponse>(context, wire, out, "Flush",
                                       &Service::HandleFlush);
  }

  void HandleFlush(std::shared_ptr<UnaryCall<v1::FlushRequest, v1::FlushResponse>> call) {
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
      void (Service::*handle)(std::shared_ptr<UnaryCall<Request, Response>>)) {
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
  AssistantSource* const assistant_;  // Null: none runs.
  const RebuildStats& rebuild_;
  const ServiceMetrics metrics_;
  RateLimitedLog wire_rejections_{"draftsvc", absl::Minutes(1)};
};

namespace {

// Registers the scrape-time series of `index`/`store` and creates the ones
// the service updates.
// `assistant` may be null (its series are then not registered).
absl::StatusOr<ServiceMetrics> RegisterMetrics(metrics::Registry* registry,
                                               DraftIndex* index,
                                               TrieStore* store,
                                               const AssistantSource* assistant,
                                               const RebuildStats* rebuild) {
  using metrics::LabeledValue;
  auto per_namespace = [index](int64_t NamespaceStats::*field) {
    return [index, field] {
      std::vector<LabeledValue> values;
      for (const NamespaceStats& s : index->Stats("")) {
        values.push_back({{s.name_space}, double(s.*field)});
      }
      return values;
    };
  };
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_draft_sessions", "Open draft sessions.", [index] {
        int64_t open = 0;
        for (const NamespaceStats& s : index->Stats("")) {
          open += s.open_sessions;
        }
        return double(open);
      }));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_draft_sessions_expired_total",
      "Draft sessions closed by draftsvc because nobody used them for "
      "--session_lease_s (their verifier died, stalled or lost the network).",
      [index] { return double(index->ExpiredSessions()); }));
  RETURN_IF_ERROR(registry->AddLabeledGaugeCallback(
      "lookahead_trie_nodes", "Nodes in the namespace's global trie.",
      {"trie_namespace"}, per_namespace(&NamespaceStats::output_nodes)));
  RETURN_IF_ERROR(registry->AddLabeledGaugeCallback(
      "lookahead_trie_capacity_nodes",
      "Node capacity of the namespace's global trie (pruning starts above).",
      {"trie_namespace"}, per_namespace(&NamespaceStats::capacity)));
  RETURN_IF_ERROR(registry->AddLabeledCounterCallback(
      "lookahead_trie_prunes_total", "Prunes of the namespace's global trie.",
      {"trie_namespace"}, per_namespace(&NamespaceStats::prunes)));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_disk_bytes", "RocksDB's estimate of live data on disk.",
      [store] { return double(store->DiskBytes()); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_pending_batches",
      "Trie write batches queued but not yet written.",
      [store] { return double(store->PendingBatches()); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_rebuild_seconds",
      "Time the last start spent rebuilding the tries from RocksDB.",
      [rebuild] { return rebuild->seconds; }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_degraded",
      "1 while the trie store cannot write (disk full, I/O error, read-only "
      "disk): drafts come from memory, trie updates are not persisted.",
      [store] { return store->degraded() ? 1.0 : 0.0; }));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_store_write_errors_total",
      "Failed trie store writes and failed reopen attempts.",
      [store] { return double(store->Health().write_errors); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_unpersisted_mutations",
      "Trie mutations applied in memory while degraded and not yet on disk "
      "(kept or, past the backlog limit, lost at restart).",
      [store] {
        const StoreHealth h = store->Health();
        return double(h.unpersisted_mutations + h.lost_mutations);
      }));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_store_recoveries_total",
      "Times the trie store became writable again after being degraded.",
      [store] { return double(store->Health().recoveries); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_wal_dropped_records",
      "Acknowledged write records the last start's WAL recovery dropped.",
      [store] { return double(store->wal_recovery().dropped_records); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_wal_dropped_bytes",
      "Acknowledged WAL bytes the last start's WAL recovery dropped.",
      [store] { return double(store->wal_recovery().dropped_bytes); }));
  // Per source, summed over namespaces.
  auto per_source = [index](int64_t SourceStatsRow::*field) {
    return [index, field] {
      double totals[kNumDraftSources] = {};
      for (const NamespaceStats& s : index->Stats("")) {
        for (const SourceStatsRow& row : s.sources) {
          totals[static_cast<int>(row.source)] += double(row.*field);
        }
      }
      std::vector<LabeledValue> values;
      for (int i = 0; i < kNumDraftSources; ++i) {
        values.push_back(
            {{SourceLabel(static_cast<DraftSource>(i))}, totals[i]});
      }
      return values;
    };
  };
  RETURN_IF_ERROR(registry->AddLabeledCounterCallback(
      "lookahead_draft_proposed_tokens_total",
      "Draft nodes sent to verifiers, per source (a node several sources "
      "proposed counts for each).",
      {"source"}, per_source(&SourceStatsRow::proposed)));
  RETURN_IF_ERROR(registry->AddLabeledCounterCallback(
      "lookahead_draft_accepted_tokens_total",
      "Of lookahead_draft_proposed_tokens_total, the nodes the verifier "
      "accepted (as draftsvc infers from the next Step's tokens).",
      {"source"}, per_source(&SourceStatsRow::accepted)));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_ngram_pool_entries",
      "(key, continuation) entries in the namespaces' n-gram pools, summed.",
      [index] {
        int64_t entries = 0;
        for (const NamespaceStats& s : index->Stats("")) {
          entries += s.ngram_entries;
        }
        return double(entries);
      }));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_ngram_pool_prunes_total",
      "Automatic prunes of the namespaces' n-gram pools, summed.", [index] {
        int64_t prunes = 0;
        for (const NamespaceStats& s : index->Stats("")) {
          prunes += s.ngram_prunes;
        }
        return double(prunes);
      }));
  ServiceMetrics out;
  ASSIGN_OR_RETURN(out.inserted_tokens,
                   registry->AddCounter(
                       "lookahead_trie_inserted_tokens_total",
                       "Accepted tokens reported by verifiers (inserted into "
                       "the global trie)."));
  ASSIGN_OR_RETURN(
      out.retrieval_seconds,
      registry->AddHistogram(
          "lookahead_draft_retrieval_duration_seconds",
          "Time to retrieve one session's draft tree in a Step.",
          metrics::ExponentialBuckets(1e-6, 2, 16)));  // 1 us .. 33 ms
  if (assistant == nullptr) return out;
  auto stat = [assistant](int64_t AssistantDrafterStats::*field) {
    return [assistant, field] { return double(assistant->stats().*field); };
  };
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_assistant_drafted_tokens_total",
      "Tokens the assistant model chose for drafts (before the mixer's "
      "budget; lookahead_draft_proposed_tokens_total{source=\"assistant\"} "
      "counts those sent).",
      stat(&AssistantDrafterStats::drafted_tokens)));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_assistant_seconds_per_token",
      "The assistant's model time per drafted token, since start.",
      [assistant] { return assistant->stats().seconds_per_drafted_token(); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_assistant_pass_seconds",
      "What one token the assistant drafts costs at least, as verifiers are "
      "told at each OpenSession: its one-token pass, measured at load and "
      "averaged over its passes since. A verifier whose own token costs "
      "less never asks the assistant.",
      [assistant] { return assistant->seconds_per_token(); }));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_assistant_predraft_hits_total",
      "Assistant drafts answered whole from a background pre-draft.",
      stat(&AssistantDrafterStats::predraft_hits)));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_assistant_predraft_misses_total",
      "Assistant drafts that needed model work within the Step's deadline.",
      stat(&AssistantDrafterStats::predraft_misses)));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_assistant_deadline_cuts_total",
      "Assistant drafts cut short by --assistant_deadline_ms.",
      stat(&AssistantDrafterStats::deadline_cuts)));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_assistant_cached_tokens",
      "KV-cache token slots the assistant's sessions hold (bounded by "
      "--assistant_max_cached_tokens).",
      stat(&AssistantDrafterStats::cached_tokens)));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_assistant_evictions_total",
      "Sessions whose assistant KV cache was evicted for room (recomputed "
      "from their context when next drafted).",
      stat(&AssistantDrafterStats::evictions)));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_assistant_sessions",
      "Sessions the assistant drafts for (opened at their first Step entry "
      "that asks for it).",
      stat(&AssistantDrafterStats::sessions)));
  ASSIGN_OR_RETURN(
      out.assistant_draft_seconds,
      registry->AddHistogram(
          "lookahead_assistant_draft_duration_seconds",
          "Time one Step entry waited for the assistant's draft (bounded by "
          "--assistant_deadline_ms plus one model pass at most).",
          metrics::ExponentialBuckets(1e-6, 2, 18)));  // 1 us .. 131 ms
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DraftServer>> DraftServer::Open(
    const DraftServerOptions& options) {
  if (options.max_step_sessions < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_step_sessions must be >= 1, got ", options.max_step_sessions));
  }
  // Bad index options fail here, before the store is opened or touched.
  RETURN_IF_ERROR(DraftIndex::ValidateOptions(options.index));
  if (options.default_sources == 0) {
    return absl::InvalidArgumentError(
        "default_sources (flag --draft_sources) is empty; name at least one "
        "of trie, ngram, assistant");
  }
  if ((options.default_sources & SourceBit(DraftSource::kNgram)) != 0 &&
      !options.index.ngram_enabled) {
    return absl::InvalidArgumentError(
        "--draft_sources names ngram but --ngram_pool=false");
  }
  if ((options.default_sources & SourceBit(DraftSource::kAssistant)) != 0 &&
      options.assistant.model_path.empty()) {
    return absl::InvalidArgumentError(
        "--draft_sources names assistant but no assistant runs (start with "
        "--assistant_model or --self_draft)");
  }
  auto server = std::unique_ptr<DraftServer>(new DraftServer());
  server->options_ = options;
  // First, so that a bad model file fails before the store is touched.
  if (!options.assistant.model_path.empty()) {
    ASSIGN_OR_RETURN(server->assistant_,
                     AssistantSource::Load(options.assistant));
  }
  server->health_reporter_ =
      std::make_shared<StorageHealthReporter>(options.db_path);
  TrieStoreOptions store_options = options.store;
  store_options.on_health_change =
      [reporter = server->health_reporter_,
       chained = options.store.on_health_change](const StoreHealth& h) {
        reporter->OnChange(h);
        if (chained) chained(h);
      };
  absl::StatusOr<std::unique_ptr<TrieStore>> store =
      TrieStore::Open(options.db_path, store_options);
  if (!store.ok()) return store.status();
  server->store_ = std::move(*store);
  server->index_ =
      std::make_unique<DraftIndex>(options.index, server->store_.get());
  if (server->assistant_ != nullptr) {
    server->index_->SetRetireListener(
        [assistant = server->assistant_.get()](absl::string_view id,
                                               int64_t serial) {
          assistant->Retired(id, serial);
        });
  }

  const absl::Time start = absl::Now();
  IndexRestorer restorer(*server->index_);
  absl::Status scanned = server->store_->Scan(restorer);
  if (!scanned.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot rebuild the tries from trie store ",
                     options.db_path, ": ", scanned.message()));
  }
  server->index_->FinishRestore();
  server->rebuild_ = restorer.stats;
  server->rebuild_.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ServiceMetrics service_metrics;
  if (options.metrics != nullptr) {
    ASSIGN_OR_RETURN(
        service_metrics,
        RegisterMetrics(options.metrics, server->index_.get(),
                        server->store_.get(), server->assistant_.get(),
                        &server->rebuild_));
  }
  server->service_ = std::make_unique<Service>(
      server->options_, *server->index_, *server->store_,
      server->assistant_.get(), server->rebuild_, service_metrics);
  return server;
}

DraftServer::~DraftServer() {
  // The health service may be gone already; the store's last transitions
  // (its closing resume attempt, the writer thread until then) must not
  // reach it.
  if (health_reporter_ != nullptr) health_reporter_->Attach(nullptr, nullptr);
  // No expiry may write once the store is closed.
  if (index_ != nullptr) index_->StopExpiry();
  // Drain the store while the index its callbacks may refer to is alive.
  if (store_ != nullptr) store_->Close().IgnoreError();
}

grpc::Service* DraftServer::service() { return service_.get(); }

const AssistantEngine* DraftServer::assistant_engine() const {
  return assistant_ != nullptr ? &assistant_->engine() : nullptr;
}

AssistantDrafterStats DraftServer::assistant_stats() const {
  return assistant_ != nullptr ? assistant_->stats() : AssistantDrafterStats{};
}

absl::StatusOr<uint32_t> ParseDraftSources(absl::string_view list) {
  uint32_t out = 0;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (name == "trie" || name == "prompt" || name == "output") {
      out |= SourceBit(DraftSource::kPrompt) | SourceBit(DraftSource::kOutput);
    } else if (name == "ngram") {
      out |= SourceBit(DraftSource::kNgram);
    } else if (name == "assistant") {
      out |= SourceBit(DraftSource::kAssistant);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft source ", QuoteInput(name),
          " is not one of trie, prompt, output, ngram, assistant"));
    }
  }
  return out;
}

void DraftServer::ReportHealthTo(grpc::HealthCheckServiceInterface* health) {
  health_reporter_->Attach(health, store_.get());
}

absl::Status DraftServer::Close() {
  // Closing may still change the store's state (a last resume attempt): the
  // server using `health` is shut down, so that is only logged.
  health_reporter_->Attach(nullptr, nullptr);
  index_->StopExpiry();  // Its expiries write into the store.
  return store_->Close();
}

}  // namespace lookahead::draftsvc
