#include "verifysvc/config.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/listen_host.h"
#include "common/status_macros.h"
#include "common/tls_files.h"
#include "engine/gguf/model_files.h"
#include "engine/model/device_options.h"
#include "verifysvc/serving/step_cost.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address to listen on (gRPC, HTTP and /metrics). A non-loopback "
          "address needs --api_keys_file or --allow_unauthenticated.");
ABSL_FLAG(int, port, 50051, "Port to listen on; 0 picks a free one.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here once serving.");
ABSL_FLAG(std::string, model, "",
          "GGUF model file; empty = the default model in the model cache "
          "(tools/setup.sh puts SmolLM2-135M-Instruct there).");
ABSL_FLAG(std::string, draftsvc, "127.0.0.1:50061",
          "draftsvc shards: comma-separated gRPC targets (host:port), one "
          "per draftsvc pod; each namespace drafts on one of them, chosen by "
          "rendezvous hashing of (address, namespace), so every replica "
          "must list the same addresses (any order). List a StatefulSet's "
          "pods by their stable names (draftsvc-0.draftsvc:50061,...), not "
          "a headless Service's name, which resolves to all pods at once. "
          "Empty = no drafts (plain decoding).");
ABSL_FLAG(std::string, replica_id, "",
          "Prefix of this replica's draftsvc session ids; empty = "
          "<hostname>-<pid>-<start time>.");
ABSL_FLAG(bool, parse_special_in_content, false,
          "Chat message content that spells a control token "
          "(\"<|im_start|>\") becomes that token, as in HF transformers' "
          "apply_chat_template: a user can then open a turn with any role. "
          "Off: content is plain text and only the chat template places "
          "control tokens. Generate and Tokenize both follow it; text "
          "prompts are always plain text.");
ABSL_FLAG(int, max_running, 16, "Sequences decoded together (batch slots).");
ABSL_FLAG(int, max_queued, 64,
          "Requests waiting for a slot; beyond it RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_context_tokens, 2048,
          "Most prompt + output tokens per request (0 = the model's context "
          "length).");
ABSL_FLAG(int, max_prompt_tokens, 0,
          "Most prompt tokens per request; 0 = max_context_tokens - 1. Text "
          "is rejected unread past this many times the vocabulary's longest "
          "token in bytes (a chat's messages together; Tokenize's input past "
          "--max_context_tokens times it): it could not fit.");
ABSL_FLAG(int, default_max_new_tokens, 256,
          "Output limit of a request that sets max_new_tokens = 0.");
ABSL_FLAG(int, decoding_length, 32,
          "Draft tokens per sequence per step at most (requests may ask for "
          "up to --max_decoding_length); the scheduler gives fewer when they "
          "do not pay for their cost in the forward pass.");
ABSL_FLAG(int, max_decoding_length, 64, "Largest decoding_length allowed.");
ABSL_FLAG(int, max_stop_strings, 16, "Most stop strings per request.");
ABSL_FLAG(int, max_stop_bytes, 1024,
          "Most bytes per stop string. Every step scans each stop string "
          "against the text held back (shorter than the longest one), on the "
          "scheduler's thread.");
ABSL_FLAG(int, branch_length, 16,
          "Draft branch depth: most draft tokens one step can accept "
          "(bench/results: RAG decode speedup 1.64x at 8, 1.77x at 16, 1.81x "
          "at 24, with decoding_length 32).");
ABSL_FLAG(std::string, draft_sources, "",
          "Draft sources of a request that names none, comma-separated: "
          "trie (the prompt and output tries; prompt and output are its "
          "aliases), ngram (the n-gram pool), assistant (draftsvc's "
          "assistant model). Empty = draftsvc's --draft_sources.");
ABSL_FLAG(int, prediction_k, 4,
          "Token Recycling: the model's top-k predictions at every verified "
          "draft node (and the root) go to draftsvc's n-gram pool for "
          "sequences that may draft from it; 0 = off. One top-k over each "
          "sequence's verify logits per step. At most draftsvc's "
          "--max_prediction_k (8), which refuses larger entries.");
ABSL_FLAG(int, draft_ask_tokens, 8,
          "Draft tokens asked of draftsvc for a sequence the step budget "
          "gives any (at most its decoding length); the scored, best-first "
          "tree that comes back is cut to the prefix whose nodes' own "
          "acceptance estimates pay for their rows. 0 = ask exactly the "
          "budget and verify the whole tree.");
ABSL_FLAG(double, free_ask_min_pass_ms, 20,
          "A sequence the step budget gives no draft still asks its text "
          "sources and draftsvc (never draftsvc's assistant) for "
          "--draft_ask_tokens, "
          "cut by score as any tree, while a one-token pass takes at least "
          "this many ms: an ask costs ~0.5 ms of the cores, little next to "
          "such a pass. 0 = never.");
ABSL_FLAG(bool, cost_gates, true,
          "Run the draft mechanisms that cost time of their own (the Jacobi "
          "window's rows, the assistant's passes) for a sequence only while "
          "what they add pays for what they cost, probing them again at "
          "doubling intervals when they do not. false: every mechanism a "
          "request asks for runs every step.");
ABSL_FLAG(bool, charge_draft_calls, true,
          "Count the measured time of a call to the draft sources (the "
          "draftsvc round trip) as part of a drafted step's cost when "
          "deciding whether a step asks for drafts, so sequences whose drafts "
          "stopped paying stop asking until their next probe. false: asking "
          "is free; only the rows the drafts add are charged.");
ABSL_FLAG(bool, inherit_draft_pacing, true,
          "When the last request of a namespace had none of its drafts "
          "accepted, start the next one's draft pacing (quality, probe "
          "interval) where that one left it, so a namespace whose drafts "
          "do not hold (random text, a high temperature) stops paying the "
          "prior's asks and early probes on every request. false: every "
          "request starts from the prior quality.");
ABSL_FLAG(bool, pace_repeats, true,
          "Learn a sequence's draft quality separately for steps whose last 3 "
          "tokens occur earlier in its prompt or output (where copied drafts "
          "tend to hold) and for the rest, so drafts that fail in free text "
          "are still asked for where the text repeats. false: one quality "
          "per sequence.");
ABSL_FLAG(double, assistant_cost_share, 1.0,
          "Share of draftsvc's assistant pass seconds (reported per session) "
          "charged against the assistant's accepted tokens by its cost gate, "
          "in [0, 1]: 1 when draftsvc runs on this verifier's cores (its "
          "passes take them from the verify pass), 0 when it has cores of "
          "its own (then only its Step latency counts). The assistant drafts "
          "for a sequence only while it pays.");
ABSL_FLAG(int, lookahead_window, 0,
          "Jacobi lookahead window W of a request that leaves it unset (a "
          "request's explicit 0 turns it off); 0 = no window unless the "
          "request asks for one. Where it runs, its cost gate (--cost_gates) "
          "still skips it on steps it cannot pay for. Off by default: on a "
          "CPU its "
          "W x (N - 1) extra rows per step cost more than its n-grams gain "
          "(bench/results: 0.2-0.5x of plain decoding alone); worth trying "
          "where a pass of ~16-64 rows costs what one row does (a GPU).");
ABSL_FLAG(int, lookahead_ngram, 3,
          "Jacobi lookahead n-gram size N of a request that sets 0 (>= 2).");
ABSL_FLAG(int, lookahead_guess, 5,
          "Most n-grams G a Jacobi window harvests per step, for a request "
          "that sets 0.");
ABSL_FLAG(int, max_lookahead_window, 16, "Largest lookahead_window allowed.");
ABSL_FLAG(int, max_lookahead_ngram, 8, "Largest lookahead_ngram allowed.");
ABSL_FLAG(int, max_lookahead_guess, 16, "Largest lookahead_guess allowed.");
ABSL_FLAG(int, max_step_tokens, 64,
          "Most tokens (roots + drafts + prefill) in one forward pass.");
ABSL_FLAG(int, prefill_chunk_tokens, 64,
          "Prompt tokens prefilled per step while other sequences decode.");
ABSL_FLAG(int, draft_deadline_ms, 20,
          "Deadline of each step's draftsvc call; later drafts are skipped.");
ABSL_FLAG(bool, local_drafts, true,
          "Draft from each sequence's own prompt and output in this process "
          "(no round trip), beside draftsvc's trees; with no --draftsvc, "
          "the only drafts.");
ABSL_FLAG(bool, recycled_drafts, true,
          "Token Recycling in this process: draft the chain of the model's "
          "top-1 predictions last seen after each pair of tokens (or token) "
          "(every verify pass's top-k at every row it verified), fresh for "
          "the token the last pass emitted, where --local_drafts and "
          "draftsvc had no first node it rates higher; for requests that "
          "may use the ngram source. Needs --prediction_k >= 1 "
          "(bench/results/recycled_drafts).");
ABSL_FLAG(bool, draft_cascade, true,
          "Ask draftsvc only for the steps where --local_drafts found nothing "
          "in the sequence's own text (its round trips cost the pass CPU "
          "time on shared cores); false: ask both every drafted step.");
ABSL_FLAG(std::string, assistant_model, "",
          "A GGUF model with the target's vocabulary (e.g. "
          "Qwen2.5-Coder-0.5B for the 1.5B) drafting in process, in series "
          "with the verify pass, where the other sources proposed no first "
          "node scored 0.3 or more and its measured acceptance pays for its "
          "pass (docs/drafting.md). It serves the assistant source, which "
          "draftsvc is then not asked for. Empty: none.");
ABSL_FLAG(int, assistant_prompt_tokens, 64,
          "The prompt's last tokens --assistant_model reads (its prefill "
          "costs about a pass per 4-5 tokens).");
ABSL_FLAG(int, assistant_max_chain, 3,
          "Longest chain --assistant_model drafts a step.");
ABSL_FLAG(int64_t, assistant_head_tokens, 0,
          "--assistant_model's LM head scores ids below this only (BPE "
          "vocabularies put frequent tokens first; 32768 cuts the 0.5B "
          "Qwen's pass by ~30%). 0: every id.");
ABSL_FLAG(bool, draft_sync, false,
          "Each drafted step waits for draftsvc's answer (up to "
          "--draft_deadline_ms) instead of drafting from the answer that "
          "arrived during the previous step's pass: slower, for comparisons.");
ABSL_FLAG(int, metrics_port, 9090,
          "Port of the Prometheus /metrics HTTP endpoint; 0 picks a free one, "
          "-1 turns it off.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "If set, the bound metrics port is written here.");
ABSL_FLAG(int, log_every_steps, 0,
          "Print a scheduler line every this many steps; 0 = never.");
ABSL_FLAG(int, blas_threads, lookahead::engine::DefaultBlasThreads(),
          "OpenBLAS threads (default: 1 where the packed matmul kernel runs, "
          "else one per available core).");
ABSL_FLAG(int, intra_op_threads, 1, "LibTorch intra-op threads.");
ABSL_FLAG(int, matmul_threads, 0,
          "Threads sharing the packed AVX2/AVX-512 matmuls (default 0: one "
          "per available core; set the CPU limit in a container).");
ABSL_FLAG(std::string, weights, "native",
          "native: on CPU in float32, matmul weights stay in their GGUF types "
          "(Q4_1, Q8_0, K-quants, ...) and the forward pass runs on our own "
          "kernels (fast, ~6x less memory); f32: dequantized to --dtype and "
          "run through LibTorch (the reference; always the form on CUDA).");
ABSL_FLAG(std::string, activations, "auto",
          "The matmuls' activations. auto (default): int8 where --weights="
          "native on the CPU, else f32. int8 quantizes them (per 32 values, "
          "per 256 for K-quants) for integer dot products with every "
          "quantized GGUF type (llama.cpp's form; AVX-512 VNNI or AVX2): "
          "2.5-3.5x cheaper matmuls, a slightly different model (its quality "
          "gate: engine/model/int8_quality_test). f32 is the exact form, "
          "HF transformers' tokens. Drafting is lossless against plain "
          "decoding in either form.");
ABSL_FLAG(std::string, kv_cache, "auto",
          "The KV cache's element type: f32, or f16 (llama.cpp's default: "
          "half the cache's memory, but its attention is slower from ~1000 "
          "tokens of context on our CPU kernels; needs --weights=native on "
          "the CPU). auto (default) is f32.");
ABSL_FLAG(bool, packed_linear, true,
          "Packed matmul kernel where the CPU has AVX2 or AVX-512 (false: "
          "OpenBLAS).");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, cuda or cuda:N (CUDA needs the build of tools/cuda_build.sh).");
ABSL_FLAG(std::string, dtype, "float32",
          "Weights, activations and KV cache: float32, bfloat16 or float16 "
          "(logits are float32). Lossless against plain decoding at the same "
          "dtype; bfloat16 suits GPUs.");
ABSL_FLAG(bool, cuda_kernels, true,
          "On CUDA: tree attention through kernels/cuda (false: LibTorch "
          "attention).");
ABSL_FLAG(int, prefix_cache_mib, 512,
          "Most MiB of prompt-prefix K/V kept so a repeated system prompt or "
          "RAG document is not prefilled again (shared across namespaces, "
          "least recently used evicted); 0 = off. SmolLM2-135M in float32 "
          "needs 45 KiB per token: 512 MiB holds ~11K tokens.");
ABSL_FLAG(int, prefix_cache_block_tokens, 32,
          "Prefix cache granularity: a prefix is reused up to its last whole "
          "block of this many tokens.");
// --- keys and TLS ---
ABSL_FLAG(std::string, api_keys_file, "",
          "API keys, one \"<key> <namespace> [<requests_per_second>]\" per "
          "line ('#' comments): every gRPC and HTTP request then needs "
          "\"authorization: Bearer <key>\" and may use only its key's "
          "namespace. Empty = no keys (loopback only, see "
          "--allow_unauthenticated).");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "Serve a non-loopback --host without --api_keys_file: anyone who "
          "can reach the port may use every namespace.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain of the gRPC and HTTP fronts; with "
          "--tls_key_file they serve TLS only. Empty = plaintext.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, draftsvc_ca_file, "",
          "PEM CA that signed draftsvc's certificate: the draftsvc channels "
          "use TLS. Empty (and no client certificate) = plaintext.");
ABSL_FLAG(std::string, draftsvc_client_cert_file, "",
          "PEM client certificate presented to draftsvc (mutual TLS; draftsvc "
          "--tls_client_ca_file must trust its CA).");
ABSL_FLAG(std::string, draftsvc_client_key_file, "",
          "PEM private key of --draftsvc_client_cert_file.");
// --- end keys and TLS ---
ABSL_FLAG(int, shutdown_grace_ms, 10000,
          "On SIGTERM/SIGINT, running requests get this long to finish.");
// --- the OpenAI-compatible HTTP front ---
ABSL_FLAG(int, http_port, 8000,
          "Port of the OpenAI-compatible HTTP API (POST /v1/chat/completions, "
          "POST /v1/completions, GET /v1/models, GET /health) on --host; 0 "
          "picks a free one, -1 turns it off. HTTPS with --tls_cert_file/"
          "--tls_key_file; Bearer keys with --api_keys_file. Serves 503 "
          "while the model loads and while draining.");
ABSL_FLAG(std::string, http_port_file, "",
          "If set, the bound HTTP port is written here (before the model "
          "loads).");
ABSL_FLAG(int64_t, http_max_body_bytes, 4 << 20,
          "Largest HTTP request body; larger is 413 (from Content-Length, "
          "unread).");
ABSL_FLAG(int, http_max_connections, 1024,
          "Open HTTP connections at most; more are closed at once.");
ABSL_FLAG(int, http_read_timeout_ms, 30000,
          "An HTTP request's head and body must arrive within this, and one "
          "write to a client may take at most this (idle keep-alive "
          "connections close after it too).");
ABSL_FLAG(int64_t, http_max_stream_buffer_bytes, 1 << 20,
          "Bytes of server-sent events queued for one client that is not "
          "reading; past it its generation is cancelled and the connection "
          "closed.");
ABSL_FLAG(int, http_send_buffer_bytes, 0,
          "SO_SNDBUF of HTTP connections; 0 = the system's.");
ABSL_FLAG(std::string, served_model_name, "",
          "The model id of the HTTP API (GET /v1/models; a request's "
          "\"model\" must equal it). Empty: the model file's name without "
          "\".gguf\" (e.g. SmolLM2-135M-Instruct.Q4_1).");
// --- end the OpenAI-compatible HTTP front ---

namespace lookahead::verifysvc {
namespace {

std::string DefaultReplicaId() {
  char host[256] = "verifysvc";
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "-", getpid(), "-",
                      absl::ToUnixMillis(absl::Now()));
}

RequestLimits LimitsFromFlags() {
  RequestLimits limits;
  limits.max_context_tokens = absl::GetFlag(FLAGS_max_context_tokens);
  limits.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  limits.default_max_new_tokens = absl::GetFlag(FLAGS_default_max_new_tokens);
  limits.default_decoding_length = absl::GetFlag(FLAGS_decoding_length);
  limits.max_decoding_length = absl::GetFlag(FLAGS_max_decoding_length);
  limits.default_branch_length = absl::GetFlag(FLAGS_branch_length);
  limits.max_stop_strings = absl::GetFlag(FLAGS_max_stop_strings);
  limits.max_stop_bytes = absl::GetFlag(FLAGS_max_stop_bytes);
  limits.default_lookahead_window = absl::GetFlag(FLAGS_lookahead_window);
  limits.default_lookahead_ngram = absl::GetFlag(FLAGS_lookahead_ngram);
  limits.default_lookahead_guess = absl::GetFlag(FLAGS_lookahead_guess);
  limits.max_lookahead_window = absl::GetFlag(FLAGS_max_lookahead_window);
  limits.max_lookahead_ngram = absl::GetFlag(FLAGS_max_lookahead_ngram);
  limits.max_lookahead_guess = absl::GetFlag(FLAGS_max_lookahead_guess);
  return limits;
}

// Keys, TLS files and the loopback rule: checked here, before the model
// loads, so a bad file or host fails the start at once.
absl::Status SecurityFromFlags(VerifysvcConfig* c) {
  const std::string keys_file = absl::GetFlag(FLAGS_api_keys_file);
  if (!keys_file.empty()) {
    ASSIGN_OR_RETURN(c->api_keys, ApiKeys::Load(keys_file));
  }
  c->allow_unauthenticated = absl::GetFlag(FLAGS_allow_unauthenticated);
  RETURN_IF_ERROR(CheckListenHost(c->host, c->api_keys != nullptr,
                                  c->allow_unauthenticated, "--api_keys_file"));
  c->tls.cert.path = absl::GetFlag(FLAGS_tls_cert_file);
  c->tls.key.path = absl::GetFlag(FLAGS_tls_key_file);
  ASSIGN_OR_RETURN(c->grpc_credentials, MakeServerCredentials(c->tls));
  ClientTlsFiles& d = c->draftsvc_tls;
  d.ca = {"--draftsvc_ca_file", absl::GetFlag(FLAGS_draftsvc_ca_file)};
  d.cert = {"--draftsvc_client_cert_file",
            absl::GetFlag(FLAGS_draftsvc_client_cert_file)};
  d.key = {"--draftsvc_client_key_file",
           absl::GetFlag(FLAGS_draftsvc_client_key_file)};
  ASSIGN_OR_RETURN(c->draft_client.credentials, MakeChannelCredentials(d));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<engine::DraftSourceSet> ParseDraftSources(
    absl::string_view list) {
  engine::DraftSourceSet set = 0;
  for (absl::string_view name :
       absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    name = absl::StripAsciiWhitespace(name);
    if (name == "trie" || name == "prompt" || name == "output") {
      set |= engine::SourceBit(engine::DraftSourceTag::kTrie);
    } else if (name == "ngram") {
      set |= engine::SourceBit(engine::DraftSourceTag::kNgram);
    } else if (name == "assistant") {
      set |= engine::SourceBit(engine::DraftSourceTag::kAssistant);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--draft_sources: unknown source \"", name,
                       "\"; use trie, ngram, assistant (comma-separated)"));
    }
  }
  return set;
}

namespace {

// The HTTP front's options; HttpFront::Start checks their ranges.
void HttpFromFlags(VerifysvcConfig* c) {
  c->http_port = absl::GetFlag(FLAGS_http_port);
  c->http.host = c->host;
  c->http.port = c->http_port;
  c->http.port_file = absl::GetFlag(FLAGS_http_port_file);
  c->http.max_body_bytes = absl::GetFlag(FLAGS_http_max_body_bytes);
  c->http.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  c->http.read_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_http_read_timeout_ms));
  c->http.max_stream_buffer_bytes =
      absl::GetFlag(FLAGS_http_max_stream_buffer_bytes);
  c->http.send_buffer_bytes = absl::GetFlag(FLAGS_http_send_buffer_bytes);
  c->http.tls_cert_file = c->tls.cert.path;
  c->http.tls_key_file = c->tls.key.path;
  c->http.api_keys = c->api_keys.get();
}

}  // namespace

absl::StatusOr<VerifysvcConfig> ConfigFromFlags() {
  VerifysvcConfig c;
  c.host = absl::GetFlag(FLAGS_host);
  c.port = absl::GetFlag(FLAGS_port);
  c.port_file = absl::GetFlag(FLAGS_port_file);
  c.model_path = absl::GetFlag(FLAGS_model);
  if (c.model_path.empty()) c.model_path = engine::DefaultModelPath();
  c.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  if (c.served_model_name.empty()) {
    absl::string_view file = c.model_path;
    file.remove_prefix(file.rfind('/') + 1);  // npos + 1 == 0
    absl::ConsumeSuffix(&file, ".gguf");
    c.served_model_name = std::string(file);
  }
  c.tokenizer.parse_special_in_content =
      absl::GetFlag(FLAGS_parse_special_in_content);
  c.draftsvc = absl::GetFlag(FLAGS_draftsvc);
  ASSIGN_OR_RETURN(c.draftsvc_shards, ParseDraftsvcAddresses(c.draftsvc));
  c.draft_client.step_deadline =
      absl::Milliseconds(absl::GetFlag(FLAGS_draft_deadline_ms));
  c.draft_sessions.synchronous = absl::GetFlag(FLAGS_draft_sync);
  c.local_drafts = absl::GetFlag(FLAGS_local_drafts);
  c.recycled_drafts = absl::GetFlag(FLAGS_recycled_drafts);
  c.draft_cascade = absl::GetFlag(FLAGS_draft_cascade);
  c.assistant_model = absl::GetFlag(FLAGS_assistant_model);
  c.scheduler.assistant_in_process = !c.assistant_model.empty();
  c.assistant.prompt_tokens = absl::GetFlag(FLAGS_assistant_prompt_tokens);
  c.assistant.max_chain = absl::GetFlag(FLAGS_assistant_max_chain);
  if (c.assistant.prompt_tokens < 1 || c.assistant.max_chain < 1 ||
      absl::GetFlag(FLAGS_assistant_head_tokens) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--assistant_prompt_tokens (", c.assistant.prompt_tokens,
        ") and --assistant_max_chain (", c.assistant.max_chain,
        ") must be at least 1, --assistant_head_tokens (",
        absl::GetFlag(FLAGS_assistant_head_tokens), ") at least 0"));
  }
  c.draft_sessions.replica_id = absl::GetFlag(FLAGS_replica_id);
  if (c.draft_sessions.replica_id.empty()) {
    c.draft_sessions.replica_id = DefaultReplicaId();
  }
  c.threads.blas_threads = absl::GetFlag(FLAGS_blas_threads);
  c.threads.intra_op_threads = absl::GetFlag(FLAGS_intra_op_threads);
  c.model.matmul_threads = absl::GetFlag(FLAGS_matmul_threads);
  c.model.packed_linear = absl::GetFlag(FLAGS_packed_linear);
  absl::StatusOr<engine::WeightFormat> weights =
      engine::ParseWeightFormat(absl::GetFlag(FLAGS_weights));
  if (!weights.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weights: ", weights.status().message()));
  }
  c.model.weights = *weights;
  c.model.cuda_kernels = absl::GetFlag(FLAGS_cuda_kernels);
  RETURN_IF_ERROR(engine::ParseDeviceOptions(
      absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_dtype), &c.model));
  const std::string activations_flag = absl::GetFlag(FLAGS_activations);
  if (activations_flag == "auto") {
    // int8 wherever it computes: our own CPU kernels in float32.
    const bool native_cpu = c.model.weights == engine::WeightFormat::kNative &&
                            c.model.device == torch::kCPU &&
                            c.model.dtype == torch::kFloat32;
    c.model.activations = native_cpu ? engine::LinearActivations::kInt8
                                     : engine::LinearActivations::kF32;
  } else {
    absl::StatusOr<engine::LinearActivations> activations =
        engine::ParseLinearActivations(activations_flag);
    if (!activations.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--activations: ", activations.status().message(), " (or auto)"));
    }
    c.model.activations = *activations;
  }
  const std::string kv_cache = absl::GetFlag(FLAGS_kv_cache);
  if (kv_cache == "auto") {
    // float16 costs attention speed at long context (it widens halves
    // with integer lane operations) and saves no peak memory while the
    // load's peak dominates (bench/results/llamacpp_qwen1.5b).
    c.model.kv_f16 = false;
  } else if (kv_cache == "f16" || kv_cache == "f32") {
    c.model.kv_f16 = kv_cache == "f16";
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv_cache: unknown \"", kv_cache, "\"; use auto, f32 or f16"));
  }
  // The assistant: the target's compute form, its own LM head cut.
  c.assistant_engine = c.model;
  c.assistant_engine.head_tokens = absl::GetFlag(FLAGS_assistant_head_tokens);
  c.limits = LimitsFromFlags();
  ASSIGN_OR_RETURN(c.limits.default_draft_sources,
                   ParseDraftSources(absl::GetFlag(FLAGS_draft_sources)));
  RETURN_IF_ERROR(CheckLookaheadLimits(c.limits));
  if (c.limits.default_decoding_length < 0 ||
      c.limits.default_decoding_length > c.limits.max_decoding_length ||
      c.limits.default_max_new_tokens < 1 ||
      c.limits.default_branch_length < 1 || c.limits.max_stop_strings < 0 ||
      c.limits.max_stop_bytes < 1) {
    return absl::InvalidArgumentError(
        "--decoding_length must be in [0, --max_decoding_length]; "
        "--default_max_new_tokens, --branch_length and --max_stop_bytes >= 1; "
        "--max_stop_strings >= 0");
  }
  c.scheduler.max_running = absl::GetFlag(FLAGS_max_running);
  c.scheduler.max_queued = absl::GetFlag(FLAGS_max_queued);
  c.scheduler.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  c.scheduler.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk_tokens);
  c.scheduler.log_every_steps = absl::GetFlag(FLAGS_log_every_steps);
  c.scheduler.prediction_k = absl::GetFlag(FLAGS_prediction_k);
  c.scheduler.draft_ask_tokens = absl::GetFlag(FLAGS_draft_ask_tokens);
  if (c.scheduler.draft_ask_tokens < 0 || c.scheduler.draft_ask_tokens > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("--draft_ask_tokens=", c.scheduler.draft_ask_tokens,
                     " is outside [0, 256]"));
  }
  const double free_ask_ms = absl::GetFlag(FLAGS_free_ask_min_pass_ms);
  if (!(free_ask_ms >= 0 && free_ask_ms <= 60000)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--free_ask_min_pass_ms=", free_ask_ms, " is outside [0, 60000]"));
  }
  c.scheduler.free_ask_min_pass_seconds = free_ask_ms / 1000;
  c.scheduler.gate.enabled = absl::GetFlag(FLAGS_cost_gates);
  c.assistant.gate = c.scheduler.gate.enabled;
  c.scheduler.pace_repeats = absl::GetFlag(FLAGS_pace_repeats);
  c.scheduler.charge_draft_calls = absl::GetFlag(FLAGS_charge_draft_calls);
  c.scheduler.inherit_pacing = absl::GetFlag(FLAGS_inherit_draft_pacing);
  c.scheduler.assistant_cost_share = absl::GetFlag(FLAGS_assistant_cost_share);
  if (!(c.scheduler.assistant_cost_share >= 0 &&
        c.scheduler.assistant_cost_share <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--assistant_cost_share=", c.scheduler.assistant_cost_share,
        " is outside [0, 1]"));
  }
  if (c.scheduler.prediction_k < 0 || c.scheduler.prediction_k > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prediction_k=", c.scheduler.prediction_k,
                     " is outside [0, 64] (0 = off)"));
  }
  c.prefix_cache.capacity_bytes = int64_t{absl::GetFlag(FLAGS_prefix_cache_mib)}
                                  << 20;
  c.prefix_cache.block_tokens = absl::GetFlag(FLAGS_prefix_cache_block_tokens);
  if (c.prefix_cache.capacity_bytes < 0 || c.prefix_cache.block_tokens < 1) {
    return absl::InvalidArgumentError(
        "--prefix_cache_mib must be >= 0 and --prefix_cache_block_tokens "
        ">= 1");
  }
  c.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  c.metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  c.shutdown_grace = absl::Milliseconds(absl::GetFlag(FLAGS_shutdown_grace_ms));
  RETURN_IF_ERROR(SecurityFromFlags(&c));
  HttpFromFlags(&c);
  return c;
}

absl::StatusOr<std::unique_ptr<HttpFront>> StartHttpFront(
    const VerifysvcConfig& config) {
  if (config.http_port < 0) return nullptr;
  ASSIGN_OR_RETURN(std::unique_ptr<HttpFront> http,
                   HttpFront::Start(config.http));
  std::printf("verifysvc: OpenAI API on %s://%s:%d/v1 (loading)\n",
              config.tls.enabled() ? "https" : "http", config.host.c_str(),
              http->port());
  std::fflush(stdout);
  return http;
}

absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> StartMetricsServer(
    const VerifysvcConfig& config, const metrics::Registry* registry) {
  ASSIGN_OR_RETURN(std::unique_ptr<metrics::MetricsServer> server,
                   metrics::ServeMetrics(config.host, config.metrics_port,
                                         config.metrics_port_file, registry));
  if (server != nullptr) {
    std::printf("verifysvc: metrics on http://%s:%d/metrics\n",
                config.host.c_str(), server->port());
  }
  return server;
}

absl::StatusOr<std::unique_ptr<engine::PrefixCache>> AttachPrefixCache(
    const engine::LlamaModel& model, VerifysvcConfig* config) {
  config->scheduler.prefix_cache = nullptr;
  if (config->prefix_cache.capacity_bytes == 0) return nullptr;
  ASSIGN_OR_RETURN(std::unique_ptr<engine::KvCache> probe, model.NewCache(1));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::PrefixCache> cache,
                   engine::PrefixCache::Create(
                       config->prefix_cache, probe->shape(),
                       model.KvDtype(), model.options().device));
  config->scheduler.prefix_cache = cache.get();
  return cache;
}

std::string DescribeSecurity(const VerifysvcConfig& c) {
  const ClientTlsFiles& d = c.draftsvc_tls;
  return absl::StrCat(
      c.tls.enabled() ? "gRPC over TLS" : "gRPC plaintext", ", ",
      c.api_keys != nullptr ? "API keys required" : "no API keys",
      ", draftsvc ",
      !d.enabled()           ? "plaintext"
      : !d.cert.path.empty() ? "over mutual TLS"
                             : "over TLS");
}

absl::StatusOr<DraftSources> MakeDraftSources(const VerifysvcConfig& c,
                                              int32_t vocab_size) {
  DraftSources d;
  ASSIGN_OR_RETURN(d.draftsvc,
                   ConnectDraftsvcShards(c.draftsvc_shards, vocab_size,
                                         c.draft_client, c.draft_sessions));
  if (c.local_drafts) {  // first: free, fresh every step
    d.local = std::make_unique<LocalSource>();
    d.ordered.push_back(d.local.get());
  }
  if (d.draftsvc != nullptr) d.ordered.push_back(d.draftsvc.get());
  if (c.recycled_drafts) {  // fills where the others are weak
    d.recycled = std::make_unique<RecycledSource>();
    d.ordered.push_back(d.recycled.get());
  }
  const std::string& path = c.assistant_model;
  if (path.empty()) return d;
  // The assistant, last: it drafts where the free sources are weak.
  ASSIGN_OR_RETURN(std::unique_ptr<engine::GgufFile> file,
                   engine::OpenModelFile(path));
  ASSIGN_OR_RETURN(engine::ModelConfig config,
                   engine::ModelConfig::FromGguf(*file));
  if (config.vocab_size != vocab_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("--assistant_model ", path, " has ", config.vocab_size,
                     " token ids; the model has ", vocab_size,
                     ": an assistant must share the model's vocabulary"));
  }
  engine::ModelOptions options = c.assistant_engine;
  options.max_cache_tokens = c.limits.max_context_tokens;
  ASSIGN_OR_RETURN(d.assistant_model, engine::LlamaModel::Load(*file, options));
  file->ReleaseMappedPages();  // the model holds its own copy
  d.assistant =
      std::make_unique<AssistantSource>(d.assistant_model.get(), c.assistant);
  ASSIGN_OR_RETURN(StepCostModel cost, MeasureStepCost(*d.assistant_model, {1},
                                                       /*context=*/128,
                                                       /*repeats=*/5));
  d.assistant->set_seconds_per_pass(cost.Seconds(1));
  std::printf("verifysvc: assistant %s, weights %s, one-token pass %.1f ms\n",
              path.c_str(), d.assistant_model->DescribeWeights().c_str(),
              cost.Seconds(1) * 1e3);
  d.ordered.push_back(d.assistant.get());
  if (d.draftsvc != nullptr) {
    d.draftsvc->ServeInProcess(
        engine::SourceBit(engine::DraftSourceTag::kAssistant));
  }
  return d;
}

void FitLimitsToModel(const engine::ModelConfig& model, RequestLimits* limits) {
  if (limits->max_context_tokens <= 0 ||
      (model.context_length > 0 &&
       limits->max_context_tokens > model.context_length)) {
    limits->max_context_tokens = model.context_length;
  }
  if (limits->max_prompt_tokens <= 0 ||
      limits->max_prompt_tokens >= limits->max_context_tokens) {
    limits->max_prompt_tokens = limits->max_context_tokens - 1;
  }
  limits->vocab_size = model.vocab_size;
}

}  // namespace lookahead::verifysvc
