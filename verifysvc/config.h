// VerifysvcConfig: every setting of the verifysvc binary, read from its
// flags in one place (config.cc defines the flags; `verifysvc --help`).
#ifndef LOOKAHEAD_VERIFYSVC_CONFIG_H_
#define LOOKAHEAD_VERIFYSVC_CONFIG_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/metrics_http.h"
#include "common/tls_files.h"
#include "engine/gguf/model_config.h"
#include "engine/model/draft_tree.h"
#include "engine/model/llama_model.h"
#include "engine/model/prefix_cache.h"
#include "engine/model/threading.h"
#include "engine/text/tokenizer.h"
#include "verifysvc/api/api_keys.h"
#include "verifysvc/api/http_front.h"
#include "verifysvc/drafts/assistant_source.h"
#include "verifysvc/drafts/local_source.h"
#include "verifysvc/drafts/recycled_source.h"
#include "verifysvc/draftsvc_client/draftsvc_client.h"
#include "verifysvc/draftsvc_client/draftsvc_sessions.h"
#include "verifysvc/draftsvc_client/sharded_draft_source.h"
#include "verifysvc/serving/request_builder.h"
#include "verifysvc/serving/scheduler.h"

namespace lookahead::verifysvc {

struct VerifysvcConfig {
  std::string host;
  int port = 0;
  std::string port_file;   // written once serving; empty = none
  std::string model_path;  // the GGUF file (default: the model cache's)
  std::string draftsvc;    // the --draftsvc flag as given
  // Its shard addresses (ParseDraftsvcAddresses); empty = no draftsvc.
  std::vector<std::string> draftsvc_shards;
  // Draft from each sequence's own prompt and output in process
  // (LocalSource), before and beside draftsvc's trees.
  bool local_drafts = true;
  // Draft from the model's recycled predictions in process
  // (RecycledSource), beside the other sources' trees.
  bool recycled_drafts = true;
  // draftsvc is asked only for steps the local source left without a tree
  // (DraftFanout's cascade).
  bool draft_cascade = true;
  // A small model with the target's vocabulary drafting in process
  // (AssistantSource); empty = none.
  std::string assistant_model;
  AssistantSourceOptions assistant;
  engine::ModelOptions assistant_engine;
  DraftClientOptions draft_client;
  DraftSessionsOptions draft_sessions;
  engine::ThreadOptions threads;
  engine::ModelOptions model;
  // Chat content as text or, with --parse_special_in_content, HF's way.
  engine::TokenizerOptions tokenizer;
  RequestLimits limits;  // completed by FitLimitsToModel
  SchedulerOptions scheduler;
  // capacity_bytes 0: no prefix cache.
  engine::PrefixCacheOptions prefix_cache;
  int metrics_port = 0;  // -1: no /metrics
  std::string metrics_port_file;
  absl::Duration shutdown_grace;
  // --- keys and TLS ---
  // --api_keys_file's keys, shared by the gRPC and HTTP fronts; null = no
  // keys (every request is served, in any namespace).
  std::shared_ptr<ApiKeys> api_keys;
  bool allow_unauthenticated = false;
  // --tls_cert_file/--tls_key_file: both fronts' server certificate; TLS
  // iff tls.enabled(). grpc_credentials: the gRPC front's (insecure when
  // TLS is off).
  ServerTlsFiles tls;
  std::shared_ptr<grpc::ServerCredentials> grpc_credentials;
  // --draftsvc_ca_file and the client certificate: the draftsvc channels'
  // TLS (draft_client.credentials is built from it).
  ClientTlsFiles draftsvc_tls;
  // --- end keys and TLS ---
  // The OpenAI-compatible HTTP front (--http_*; host, TLS files and keys
  // filled from the flags above). http_port -1: off.
  int http_port = 8000;
  HttpFrontOptions http;
  // The HTTP API's model id (--served_model_name; default: the model
  // file's name without ".gguf").
  std::string served_model_name;
};

// Reads the flags (after absl::ParseCommandLine). INVALID_ARGUMENT naming
// the flag for values out of range or an unknown --device/--dtype; loads
// --api_keys_file and the TLS files (their errors name the flag and path)
// and refuses a non-loopback --host without keys unless
// --allow_unauthenticated.
absl::StatusOr<VerifysvcConfig> ConfigFromFlags();

// A --draft_sources list ("trie,ngram"; prompt and output alias trie; empty:
// 0 = draftsvc's defaults) as a source set. INVALID_ARGUMENT naming an
// unknown name.
absl::StatusOr<engine::DraftSourceSet> ParseDraftSources(
    absl::string_view list);

// Returns the prefix cache of config->prefix_cache for `model`'s K/V and
// points config->scheduler.prefix_cache at it, or null iff its capacity is 0.
// The caller owns it; it must outlive the scheduler. INVALID_ARGUMENT as
// PrefixCache::Create.
absl::StatusOr<std::unique_ptr<engine::PrefixCache>> AttachPrefixCache(
    const engine::LlamaModel& model, VerifysvcConfig* config);

// "gRPC over TLS, API keys required, draftsvc over mutual TLS" or the
// plaintext / no-keys words: what a start log line says about security.
std::string DescribeSecurity(const VerifysvcConfig& config);

// The OpenAI HTTP front of config.http, started before the model loads (it
// answers 503 until HttpFront::Attach), its address printed; null iff
// --http_port=-1.
absl::StatusOr<std::unique_ptr<HttpFront>> StartHttpFront(
    const VerifysvcConfig& config);

// /metrics of `registry` on --metrics_port (metrics::ServeMetrics), its
// address printed; null iff --metrics_port=-1.
absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> StartMetricsServer(
    const VerifysvcConfig& config, const metrics::Registry* registry);

// The draft sources a config runs, in the fanout's order (`ordered`): the
// sequence's own text (--local_drafts), draftsvc's shards, recycled
// predictions (--recycled_drafts), the assistant (--assistant_model).
struct DraftSources {
  std::unique_ptr<ShardedDraftSource> draftsvc;  // null: no --draftsvc
  std::unique_ptr<LocalSource> local;
  std::unique_ptr<RecycledSource> recycled;
  std::unique_ptr<engine::LlamaModel> assistant_model;  // null: none
  std::unique_ptr<AssistantSource> assistant;
  std::vector<DraftSource*> ordered;
};

// Connects draftsvc (ConnectDraftsvcShards) and loads --assistant_model:
// its context capped at the target's, FAILED_PRECONDITION naming both sizes
// unless its vocabulary has `vocab_size` ids, its one-token pass timed as
// the target's is (so the source's gate compares like with like), and the
// assistant source served in process rather than asked of draftsvc. Errors
// of the connection and the load as is.
absl::StatusOr<DraftSources> MakeDraftSources(const VerifysvcConfig& config,
                                              int32_t vocab_size);

// Caps the context at the model's, defaults the prompt limit to the context
// less one, and sets the vocabulary size.
void FitLimitsToModel(const engine::ModelConfig& model, RequestLimits* limits);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_CONFIG_H_
