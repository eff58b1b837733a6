// DraftServer: draftsvc's serving state and its gRPC face. Owns the RocksDB
// TrieStore, the in-memory DraftIndex that persists into it, and the
// lookahead.v1.DraftService implementation (gRPC callback API) over both.
// Open() rebuilds the index from a full scan of the store and times it.
//
// With an assistant model it also owns the AssistantDrafter, whose sessions
// follow the index's: opened at a session's first Step entry that asks for
// the assistant (with the prompt, the tokens accepted so far and
// OpenSessionRequest.sampling), advanced by each Step's accepted tokens,
// closed when the index session closes or expires (DraftIndex's retire
// listener; a CloseSession may wait for one assistant pass in progress).
//
// Thread-safety: the service handles RPCs concurrently; no reaction blocks
// on disk (in sync mode an RPC that changed the trie finishes from the
// store's durability callback); a Step waits for the assistant's drafts at
// most AssistantServingOptions::step_deadline. Close() and destruction require
// that the grpc::Server using service() has been shut down.
#ifndef LOOKAHEAD_DRAFTSVC_SERVICE_DRAFT_SERVICE_H_
#define LOOKAHEAD_DRAFTSVC_SERVICE_DRAFT_SERVICE_H_

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/service_type.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "draftsvc/index/draft_index.h"
#include "draftsvc/sources/assistant/assistant_engine.h"
#include "draftsvc/storage/trie_store.h"

namespace lookahead::draftsvc {

// The assistant-model draft source (CandidateSource::kAssistant): a GGUF that
// draftsvc runs itself and drafts from per session, through the assistant
// plugin (assistant_engine.h).
struct AssistantServingOptions {
  // The GGUF to load (flags --assistant_model, or --self_draft with
  // --self_draft_model: the target's own file). Empty (default): no
  // assistant runs (nor is the plugin loaded), and entries asking for it
  // get FAILED_PRECONDITION.
  std::string model_path;
  // Which layers, which compute form, how many threads (defaults: every
  // layer, int8, one thread: the measured best).
  AssistantModelOptions model;
  AssistantDrafterOptions drafter;
  // Where the factory comes from: `factory` if set (tests link
  // CreateAssistantEngine in), else the plugin at `plugin_path` (flag
  // --assistant_plugin; "": in sources/assistant/ below the binary's
  // folder, else beside the binary).
  AssistantEngineFactory factory = nullptr;
  std::string plugin_path;
  // How long one Step may wait for the assistant's drafts, for all of its
  // entries together (flag --assistant_deadline_ms): the verifier waits for
  // the Step, so this bounds what the assistant adds to a decoding step. An
  // entry answered from a pre-draft costs nothing; one whose pre-draft is
  // behind drafts only while the deadline allows (possibly nothing).
  // Default 2 ms: about one one-token pass of the 135M model on one core.
  absl::Duration step_deadline = absl::Milliseconds(2);
};

struct DraftServerOptions {
  // RocksDB directory of the global tries (created if missing).
  std::string db_path;
  // Durability: store.sync = true makes Step/CloseSession/Prune answer only
  // after their trie mutations are fsynced. While the store is degraded a
  // sync-mode Step entry still answers OK with its draft, but says
  // PERSISTENCE_NOT_PERSISTED (never DURABLE); CloseSession/Prune, which
  // have no such field, answer UNAVAILABLE "applied in memory but not
  // persisted".
  TrieStoreOptions store;
  IndexOptions index;
  // Most entries in one Step request (INVALID_ARGUMENT beyond). Default 1024:
  // far above a verifier's batch, small enough to bound one RPC's work.
  int32_t max_step_sessions = 1024;
  // Sources of a Step entry that names none (CandidateSourceBit set; flag
  // --draft_sources). Must be ones the server runs.
  uint32_t default_sources = CandidateSourceBit(CandidateSource::kPrompt) |
                             CandidateSourceBit(CandidateSource::kOutput) |
                             CandidateSourceBit(CandidateSource::kNgram);
  // The assistant model (CandidateSource::kAssistant), if model_path is set.
  // Sessions whose vocab_size is not the model's cannot use it: an entry
  // that names it gets FAILED_PRECONDITION naming both sizes; one that
  // takes it from default_sources drafts from the other sources.
  AssistantServingOptions assistant;
  // If set, the server exports its series here (not owned; must outlive the
  // server; scrape it only while the server lives): lookahead_draft_sessions,
  // lookahead_draft_sessions_expired_total,
  // lookahead_draft_retrieval_duration_seconds, lookahead_trie_nodes,
  // lookahead_trie_capacity_nodes, lookahead_trie_inserted_tokens_total,
  // lookahead_trie_prunes_total, lookahead_store_disk_bytes,
  // lookahead_store_pending_batches, lookahead_store_rebuild_seconds,
  // lookahead_store_degraded, lookahead_store_write_errors_total,
  // lookahead_store_unpersisted_mutations, lookahead_store_recoveries_total,
  // lookahead_store_wal_dropped_records, lookahead_store_wal_dropped_bytes,
  // lookahead_draft_proposed_tokens_total{source},
  // lookahead_draft_accepted_tokens_total{source} (as inferred from the
  // next Step), lookahead_ngram_pool_entries,
  // lookahead_ngram_pool_prunes_total; with an assistant also
  // lookahead_assistant_drafted_tokens_total,
  // lookahead_assistant_draft_duration_seconds,
  // lookahead_assistant_seconds_per_token,
  // lookahead_assistant_predraft_hits_total,
  // lookahead_assistant_predraft_misses_total,
  // lookahead_assistant_deadline_cuts_total,
  // lookahead_assistant_cached_tokens, lookahead_assistant_evictions_total,
  // lookahead_assistant_sessions.
  metrics::Registry* metrics = nullptr;
};

// What Open() found on disk.
struct RebuildStats {
  int64_t namespaces = 0;
  int64_t nodes = 0;
  int64_t ngram_entries = 0;  // N-gram pool rows restored.
  double seconds = 0;         // Wall time of the scan and restore.
};

// Parses --draft_sources: comma-separated "trie" (or "prompt", "output":
// both tries), "ngram", "assistant". Returns the CandidateSourceBit set, or
// INVALID_ARGUMENT naming the unknown or missing name.
absl::StatusOr<uint32_t> ParseDraftSources(absl::string_view list);

// The gRPC health service name that follows the store: SERVING while it
// writes, NOT_SERVING while it is degraded (trie updates not persisted). The
// server's overall health ("") is not touched: drafts are still served.
inline constexpr char kStorageHealthService[] =
    "lookahead.v1.DraftService.storage";

class StorageHealthReporter;
class AssistantSource;

class DraftServer {
 public:
  // Loads the assistant model (if options.assistant.model_path is set),
  // opens the store at options.db_path, rebuilds the index from it and
  // prepares the service. The assistant's load errors come first and name
  // the path (NOT_FOUND missing, DATA_LOSS / INVALID_ARGUMENT corrupt,
  // UNIMPLEMENTED another architecture, INVALID_ARGUMENT bad layers or
  // drafter options); the store is not touched then. Store errors pass
  // through (UNAVAILABLE when the directory is locked, FAILED_PRECONDITION
  // when corrupt); a store whose content the index rejects gives
  // FAILED_PRECONDITION naming the path.
  static absl::StatusOr<std::unique_ptr<DraftServer>> Open(
      const DraftServerOptions& options);

  DraftServer(const DraftServer&) = delete;
  DraftServer& operator=(const DraftServer&) = delete;
  ~DraftServer();

  // The lookahead.v1.DraftService to register with a grpc::ServerBuilder.
  // Owned by this object.
  grpc::Service* service();

  const RebuildStats& rebuild_stats() const { return rebuild_; }
  // The assistant as loaded, or null when none runs.
  const AssistantEngine* assistant_engine() const;
  // The assistant drafter's counters (all 0 when none runs).
  AssistantDrafterStats assistant_stats() const;
  DraftIndex& index() { return *index_; }
  TrieStore& store() { return *store_; }

  // From now on `health` reports the store's state as kStorageHealthService
  // (not owned; used until Close(), destruction or ReportHealthTo(nullptr),
  // none of which returns while a call to it runs). Degraded/recovered
  // transitions are also logged to stderr, with or without it.
  void ReportHealthTo(grpc::HealthCheckServiceInterface* health);

  // Writes everything accepted so far durably and closes the store.
  // REQUIRES: the grpc::Server using service() is shut down.
  absl::Status Close();

 private:
  DraftServer() = default;

  DraftServerOptions options_;
  RebuildStats rebuild_;
  // Shared with the store's health callback.
  std::shared_ptr<StorageHealthReporter> health_reporter_;
  // Declaration order is destruction order in reverse: the service goes
  // first, then the index (whose retire listener reaches the assistant),
  // the store (the index's sink), the assistant last.
  std::unique_ptr<AssistantSource> assistant_;
  std::unique_ptr<TrieStore> store_;
  std::unique_ptr<DraftIndex> index_;
  std::unique_ptr<grpc::Service> service_;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SERVICE_DRAFT_SERVICE_H_
