#include "draftsvc/service/draft_service.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "draftsvc/service/assistant_source.h"
#include "draftsvc/service/rpc_handlers.h"
#include "draftsvc/service/service_metrics.h"
#include "draftsvc/service/storage_health.h"

namespace lookahead::draftsvc {
namespace {

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
  if ((options.default_sources & CandidateSourceBit(CandidateSource::kNgram)) !=
          0 &&
      !options.index.ngram_enabled) {
    return absl::InvalidArgumentError(
        "--draft_sources names ngram but --ngram_pool=false");
  }
  if ((options.default_sources &
       CandidateSourceBit(CandidateSource::kAssistant)) != 0 &&
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
  // The index drives the assistant: one SessionSource (null: none runs).
  server->index_->SetSessionSource(server->assistant_.get());

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
  server->service_ =
      NewDraftRpcService(server->options_, *server->index_, *server->store_,
                         server->rebuild_, service_metrics);
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
      out |= CandidateSourceBit(CandidateSource::kPrompt) |
             CandidateSourceBit(CandidateSource::kOutput);
    } else if (name == "ngram") {
      out |= CandidateSourceBit(CandidateSource::kNgram);
    } else if (name == "assistant") {
      out |= CandidateSourceBit(CandidateSource::kAssistant);
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
