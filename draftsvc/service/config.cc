// draftsvc's flags, read into a DraftsvcConfig (config.h).
#include "draftsvc/service/config.h"

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/listen_host.h"
#include "common/status_macros.h"
#include "common/tls_files.h"
#include "draftsvc/storage/wal_recovery.h"
#include "engine/gguf/model_files.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address to listen on (gRPC and /metrics). A non-loopback address "
          "needs --tls_client_ca_file or --allow_unauthenticated.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain; with --tls_key_file the gRPC port serves "
          "TLS only. Empty = plaintext.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA: clients must present a certificate it signed (mutual TLS; "
          "verifysvc's --draftsvc_client_cert_file). Needs --tls_cert_file.");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "Serve a non-loopback --host without --tls_client_ca_file: anyone "
          "who can reach the port may read and write every namespace.");
ABSL_FLAG(int, port, 50061, "Port to listen on; 0 picks a free one.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here (atomically) once serving.");
ABSL_FLAG(std::string, db_path, "",
          "RocksDB directory of the global tries. Default: "
          "$HOME/.cache/lookahead/draftsvc-db.");
ABSL_FLAG(bool, sync, false,
          "fsync every write batch and answer Step/CloseSession/Prune only "
          "once their changes are durable. Else the WAL is fsynced every "
          "--sync_interval_ms (a power loss may lose that much).");
ABSL_FLAG(int, sync_interval_ms, 100,
          "WAL fsync period without --sync; 0 = only on Flush/shutdown.");
ABSL_FLAG(int, max_group_mutations, 65536,
          "Most trie mutations one group commit writes.");
ABSL_FLAG(std::string, wal_recovery, "tolerate",
          "What a start does when RocksDB's WAL recovery lost writes it had "
          "acknowledged (a damaged or truncated WAL): 'tolerate' starts with "
          "what survived and reports the loss (log, Stats, metric "
          "lookahead_store_wal_dropped_records); 'strict' refuses to start "
          "with one error line and leaves the directory unchanged.");
ABSL_FLAG(int, store_resume_interval_ms, 2000,
          "While the store is degraded (disk full, I/O error, read-only "
          "disk), the first wait before it tries to write again.");
ABSL_FLAG(int, store_max_resume_interval_ms, 30000,
          "While degraded, the resume attempts back off (doubling) up to "
          "this period.");
ABSL_FLAG(int64_t, store_resume_min_free_mib, 64,
          "While degraded, writing resumes only once the store's volume has "
          "this much free space (0: no check), so a nearly full disk does "
          "not flap between degraded and healthy.");
ABSL_FLAG(int64_t, store_max_backlog_mib, 256,
          "Most MiB of trie updates kept in memory while the store is "
          "degraded, written when the disk works again; past it they are "
          "dropped and the store stays degraded until restart.");
ABSL_FLAG(int64_t, capacity_nodes, int64_t{4} << 20,
          "Nodes a namespace's global trie may hold before it is pruned.");
ABSL_FLAG(double, low_water, 0.75,
          "Pruning keeps this fraction of --capacity_nodes.");
ABSL_FLAG(bool, prune_halves_counts, true,
          "Halve survivors' counts on each prune (decay).");
ABSL_FLAG(int, branch_length, 8,
          "Default window length - 1 (and draft depth) for sessions that "
          "ask for 0.");
ABSL_FLAG(int, max_branch_length, 32, "Largest branch_length allowed.");
ABSL_FLAG(double, prompt_boost, 4.0,
          "Score multiplier of prompt-trie evidence.");
ABSL_FLAG(int, max_prompt_tokens, 32768, "Most prompt tokens per session.");
ABSL_FLAG(int, max_step_tokens, 4096, "Most accepted tokens per Step entry.");
ABSL_FLAG(int, max_decoding_length, 256, "Largest draft tree budget.");
ABSL_FLAG(int, max_vocab_size, 1 << 22, "Largest vocab_size accepted.");
ABSL_FLAG(int64_t, max_sessions, 16384,
          "Most open sessions in all (RESOURCE_EXHAUSTED beyond).");
ABSL_FLAG(int64_t, max_sessions_per_namespace, 4096,
          "Most open sessions in one namespace (RESOURCE_EXHAUSTED beyond).");
ABSL_FLAG(double, session_lease_s, 300,
          "A session nobody opened or stepped for this many seconds "
          "expires: it is closed as CloseSession would close it and its "
          "prompt trie is freed (a dead verifier's sessions go). Live "
          "verifiers step every few tokens and reopen an expired session. "
          "0 = never expire.");
ABSL_FLAG(int, max_step_sessions, 1024, "Most entries in one Step request.");
ABSL_FLAG(std::string, draft_sources, "trie,ngram",
          "Sources of a Step entry that names none: comma-separated trie "
          "(the prompt and output tries), ngram (the n-gram pools), "
          "assistant.");
ABSL_FLAG(bool, ngram_pool, true,
          "Keep per-namespace n-gram pools of the verifiers' recycled top-k "
          "predictions and Jacobi n-grams (DRAFT_SOURCE_NGRAM). false: they "
          "are validated and dropped, and entries asking for ngram fail.");
ABSL_FLAG(int, ngram_max_key_tokens, 4,
          "Longest n-gram pool key (context suffix), in [1, 8].");
ABSL_FLAG(int, ngram_max_continuation_tokens, 4,
          "Longest continuation an n-gram pool stores, in [1, 32].");
ABSL_FLAG(int, ngram_continuations_per_key, 8,
          "Continuations an n-gram pool keeps per key, in [1, 1024].");
ABSL_FLAG(int64_t, ngram_capacity_entries, int64_t{1} << 20,
          "Entries a namespace's n-gram pool holds before it is pruned "
          "(~100-150 bytes each).");
ABSL_FLAG(int64_t, session_ngram_capacity_entries, 4096,
          "Entries a session's private n-gram pool (predictions whose key "
          "reaches into its prompt or its unverified drafts) holds before it "
          "is pruned (~0.5 MiB per session at 4096, estimated).");
ABSL_FLAG(int, max_prediction_trees, 8,
          "Most PredictionTrees in one Step entry.");
ABSL_FLAG(int, max_prediction_k, 8,
          "Largest k (top-k predictions per row) of a PredictionTree.");
ABSL_FLAG(int, max_step_ngrams, 64, "Most Jacobi n-grams in one Step entry.");
ABSL_FLAG(int, ngram_max_tokens, 8, "Longest Jacobi n-gram accepted (>= 2).");
ABSL_FLAG(std::string, assistant_model, "",
          "Drafts from this GGUF too (DRAFT_SOURCE_ASSISTANT): a small "
          "Llama-family model with the target's vocabulary, run on the CPU "
          "in --assistant_layers form. Sessions of another vocab_size "
          "cannot use it. A missing, corrupt or unsupported file stops the "
          "start. Exclusive with --self_draft.");
ABSL_FLAG(bool, self_draft, false,
          "Drafts with the target's own GGUF (--self_draft_model) as the "
          "assistant (DRAFT_SOURCE_ASSISTANT), in --assistant_layers form: "
          "the one flag that turns model-based drafts on.");
ABSL_FLAG(std::string, self_draft_model, "",
          "The target's GGUF for --self_draft. Default: the embedded model "
          "verifysvc loads by default ($LOOKAHEAD_MODEL_DIR or "
          "~/.cache/lookahead/models/SmolLM2-135M-Instruct.Q4_1.gguf).");
ABSL_FLAG(std::string, assistant_activations, "int8",
          "The assistant's matmul activations: int8 (default; integer dot "
          "products with Q4_0/Q4_1/Q8_0 weights, ~2x cheaper with AVX-512 "
          "VNNI) or f32 (the verifier's exact arithmetic). Drafts only need "
          "to be likely: the verifier decides what is kept.");
ABSL_FLAG(std::string, assistant_layers, "all",
          "Layers of the assistant's file to run: all, first:K (early "
          "exit), every:S (layer skipping), skip:A-B (middle skip). 'all' "
          "on one thread measured best on SmolLM2-135M (this model's "
          "intermediate layers do not predict its output).");
ABSL_FLAG(int64_t, assistant_head_tokens, 0,
          "If > 0: the assistant's LM head scores only token ids below "
          "this, and never drafts the others. BPE vocabularies put frequent "
          "tokens at low ids, and the LM head is a large share of a small "
          "model's bytes (Qwen2.5-0.5B: 145 of 395 MB read per pass), so "
          "a cut head makes each memory-bound pass cheaper. 0 (default): "
          "every id.");
ABSL_FLAG(int, assistant_threads, 1,
          "Matmul threads of one assistant pass. Keep it small: draftsvc "
          "shares the CPU with the verifier.");
ABSL_FLAG(std::string, assistant_plugin, "",
          "The shared library that runs --assistant_model and --self_draft "
          "(the only part of draftsvc that links the engine and LibTorch, "
          "loaded only when an assistant is asked for). Default: "
          "libdraftsvc_assistant.so in sources/assistant/ below the "
          "draftsvc binary's folder (as Bazel builds it), else beside the "
          "binary.");
ABSL_FLAG(int64_t, assistant_max_cached_tokens, 8192,
          "KV-cache token slots of all assistant sessions together (45 KiB "
          "each for SmolLM2-135M: 8192 = 360 MiB); least recently used "
          "sessions are evicted beyond it.");
ABSL_FLAG(int, assistant_predraft_threads, 1,
          "Background threads that draft ahead after each Step (0: draft "
          "only within --assistant_deadline_ms).");
ABSL_FLAG(int, assistant_max_chain_tokens, 8,
          "Longest chain the assistant drafts and pre-drafts ahead.");
ABSL_FLAG(double, assistant_deadline_ms, 2,
          "Most time one Step waits for the assistant's drafts, all entries "
          "together (the verifier waits for the Step); drafts answered from "
          "pre-drafts cost nothing.");
ABSL_FLAG(int, metrics_port, 9091,
          "Port of the Prometheus /metrics HTTP endpoint; 0 picks a free one, "
          "-1 turns it off.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "If set, the bound metrics port is written here.");
ABSL_FLAG(int, shutdown_grace_ms, 5000,
          "On SIGTERM/SIGINT, in-flight RPCs get this long before they are "
          "cancelled.");

namespace lookahead::draftsvc {
namespace {

std::string DefaultDbPath() {
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : ".",
                      "/.cache/lookahead/draftsvc-db");
}

// The store's flags: --db_path, durability, WAL recovery, degraded mode.
absl::Status StoreFromFlags(DraftServerOptions* options) {
  options->db_path = absl::GetFlag(FLAGS_db_path);
  if (options->db_path.empty()) options->db_path = DefaultDbPath();
  TrieStoreOptions& store = options->store;
  store.sync = absl::GetFlag(FLAGS_sync);
  store.sync_interval_ms = absl::GetFlag(FLAGS_sync_interval_ms);
  store.max_group_mutations = absl::GetFlag(FLAGS_max_group_mutations);
  if (!ParseWalRecoveryMode(absl::GetFlag(FLAGS_wal_recovery),
                            &store.wal_recovery)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--wal_recovery=", absl::GetFlag(FLAGS_wal_recovery),
                     " must be 'tolerate' or 'strict'"));
  }
  store.resume_interval_ms = absl::GetFlag(FLAGS_store_resume_interval_ms);
  store.max_resume_interval_ms =
      absl::GetFlag(FLAGS_store_max_resume_interval_ms);
  store.resume_min_free_bytes = absl::GetFlag(FLAGS_store_resume_min_free_mib)
                                << 20;
  store.max_backlog_bytes = absl::GetFlag(FLAGS_store_max_backlog_mib) << 20;
  return absl::OkStatus();
}

// The index's flags: trie capacity and pruning, sessions, leases, the
// n-gram pools and the limits of one Step entry.
absl::Status IndexFromFlags(IndexOptions* index) {
  index->capacity_nodes = absl::GetFlag(FLAGS_capacity_nodes);
  index->low_water = absl::GetFlag(FLAGS_low_water);
  index->prune_halves_counts = absl::GetFlag(FLAGS_prune_halves_counts);
  index->default_branch_length = absl::GetFlag(FLAGS_branch_length);
  index->max_branch_length = absl::GetFlag(FLAGS_max_branch_length);
  index->prompt_boost = static_cast<float>(absl::GetFlag(FLAGS_prompt_boost));
  index->max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  index->max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  index->max_decoding_length = absl::GetFlag(FLAGS_max_decoding_length);
  index->max_vocab_size = absl::GetFlag(FLAGS_max_vocab_size);
  index->max_sessions = absl::GetFlag(FLAGS_max_sessions);
  index->max_sessions_per_namespace =
      absl::GetFlag(FLAGS_max_sessions_per_namespace);
  const double lease_s = absl::GetFlag(FLAGS_session_lease_s);
  if (!(lease_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--session_lease_s=%g must be >= 0", lease_s));
  }
  index->session_lease =
      lease_s == 0 ? absl::InfiniteDuration() : absl::Seconds(lease_s);
  index->ngram_enabled = absl::GetFlag(FLAGS_ngram_pool);
  index->ngram.max_key_tokens = absl::GetFlag(FLAGS_ngram_max_key_tokens);
  index->ngram.max_continuation_tokens =
      absl::GetFlag(FLAGS_ngram_max_continuation_tokens);
  index->ngram.max_continuations_per_key =
      absl::GetFlag(FLAGS_ngram_continuations_per_key);
  index->ngram.capacity_entries = absl::GetFlag(FLAGS_ngram_capacity_entries);
  index->ngram.low_water = index->low_water;
  index->ngram.prune_halves_counts = index->prune_halves_counts;
  index->session_ngram_capacity_entries =
      absl::GetFlag(FLAGS_session_ngram_capacity_entries);
  index->max_prediction_trees = absl::GetFlag(FLAGS_max_prediction_trees);
  index->max_prediction_k = absl::GetFlag(FLAGS_max_prediction_k);
  index->max_step_ngrams = absl::GetFlag(FLAGS_max_step_ngrams);
  index->ngram_max_tokens = absl::GetFlag(FLAGS_ngram_max_tokens);
  return absl::OkStatus();
}

// The assistant's flags: --assistant_model or --self_draft, its form, its
// drafter and the Step deadline. The model options are checked by the
// plugin when an assistant loads.
absl::Status AssistantFromFlags(AssistantServingOptions* assistant) {
  if (absl::GetFlag(FLAGS_self_draft) &&
      !absl::GetFlag(FLAGS_assistant_model).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--self_draft and --assistant_model=",
        absl::GetFlag(FLAGS_assistant_model),
        " are exclusive (one assistant per server)"));
  }
  assistant->model_path = absl::GetFlag(FLAGS_assistant_model);
  if (absl::GetFlag(FLAGS_self_draft)) {
    assistant->model_path = absl::GetFlag(FLAGS_self_draft_model);
    if (assistant->model_path.empty()) {
      assistant->model_path = engine::DefaultModelPath();
    }
  }
  assistant->model.layers = absl::GetFlag(FLAGS_assistant_layers);
  assistant->model.activations = absl::GetFlag(FLAGS_assistant_activations);
  assistant->model.threads = absl::GetFlag(FLAGS_assistant_threads);
  assistant->model.head_tokens = absl::GetFlag(FLAGS_assistant_head_tokens);
  assistant->plugin_path = absl::GetFlag(FLAGS_assistant_plugin);
  assistant->drafter.max_cached_tokens =
      absl::GetFlag(FLAGS_assistant_max_cached_tokens);
  assistant->drafter.predraft_threads =
      absl::GetFlag(FLAGS_assistant_predraft_threads);
  assistant->drafter.max_chain_tokens =
      absl::GetFlag(FLAGS_assistant_max_chain_tokens);
  const double deadline_ms = absl::GetFlag(FLAGS_assistant_deadline_ms);
  if (!(deadline_ms >= 0 && deadline_ms <= 1000)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--assistant_deadline_ms=%g must be in [0, 1000]", deadline_ms));
  }
  assistant->step_deadline = absl::Microseconds(deadline_ms * 1000);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
ServerCredentialsFromFlags() {
  ServerTlsFiles tls;
  tls.cert.path = absl::GetFlag(FLAGS_tls_cert_file);
  tls.key.path = absl::GetFlag(FLAGS_tls_key_file);
  tls.client_ca.path = absl::GetFlag(FLAGS_tls_client_ca_file);
  absl::Status host_ok = CheckListenHost(
      absl::GetFlag(FLAGS_host), !tls.client_ca.path.empty(),
      absl::GetFlag(FLAGS_allow_unauthenticated),
      "--tls_client_ca_file (with --tls_cert_file and --tls_key_file)");
  if (!host_ok.ok()) return host_ok;
  return MakeServerCredentials(tls);
}

absl::StatusOr<DraftsvcConfig> ConfigFromFlags() {
  DraftsvcConfig config;
  config.host = absl::GetFlag(FLAGS_host);
  config.port = absl::GetFlag(FLAGS_port);
  config.port_file = absl::GetFlag(FLAGS_port_file);
  config.transport = !absl::GetFlag(FLAGS_tls_client_ca_file).empty()
                         ? "mutual TLS"
                     : !absl::GetFlag(FLAGS_tls_cert_file).empty() ? "TLS"
                                                                   : "plaintext";
  DraftServerOptions& server = config.server;
  RETURN_IF_ERROR(StoreFromFlags(&server));
  RETURN_IF_ERROR(IndexFromFlags(&server.index));
  server.max_step_sessions = absl::GetFlag(FLAGS_max_step_sessions);
  absl::StatusOr<uint32_t> sources =
      ParseDraftSources(absl::GetFlag(FLAGS_draft_sources));
  if (!sources.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--draft_sources: ", sources.status().message()));
  }
  server.default_sources = *sources;
  RETURN_IF_ERROR(AssistantFromFlags(&server.assistant));
  config.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  config.metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  config.shutdown_grace =
      absl::Milliseconds(absl::GetFlag(FLAGS_shutdown_grace_ms));
  return config;
}

}  // namespace lookahead::draftsvc
