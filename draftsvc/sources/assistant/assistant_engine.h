// AssistantEngine: what draftsvc needs from an assistant model, behind an
// interface that names no engine or LibTorch type. The model and its drafter
// (AssistantModel, AssistantDrafter) live in a plugin, the shared library
// libdraftsvc_assistant.so beside the draftsvc binary: the only part of
// draftsvc that links the engine and LibTorch, loaded (dlopen) only when
// --assistant_model or --self_draft asks for an assistant. Without one,
// draftsvc maps neither: it starts in milliseconds instead of about a
// second, and idles at ~30 MiB instead of ~175 (LibTorch's static
// initializers, OpenBLAS's buffers and ~340 shared libraries that Debian's
// LibTorch pulls in).
//
// Thread-safety: an AssistantEngine's methods are safe to call concurrently
// (they are AssistantDrafter's; see assistant_drafter.h for each one's
// contract).
#ifndef LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_ENGINE_H_
#define LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "engine/model/sampler.h"

namespace lookahead::draftsvc {

struct AssistantDrafterOptions {
  // --assistant_max_cached_tokens: KV-cache token slots of all sessions
  // together (a slot costs 2 * kept layers * kv_heads * head_dim floats:
  // 45 KiB for all 30 layers of SmolLM2-135M, so the default 8192 is 360
  // MiB). A session's cache holds its context plus 2 * max_chain_tokens +
  // 2 slots, grown by half when full. Crossing the limit evicts whole
  // sessions' caches, least recently used first (an evicted session is
  // prefilled again from its context when next drafted); a session that
  // alone exceeds it drafts nothing.
  int64_t max_cached_tokens = 8192;
  // --assistant_predraft_threads: background workers that draft ahead
  // after each Draft and Advance. 0 disables pre-drafting (every Draft
  // drafts within its deadline). Default 1.
  int predraft_threads = 1;
  // Longest chain a Draft returns and a pre-draft runs ahead of the
  // context, in tokens. Default 8.
  int max_chain_tokens = 8;
  // Stairs shape: one runner-up sibling leaf per level for the first
  // min(top2_levels, budget / top2_budget_per_level) levels; the chain gets
  // the rest of the budget (capped by max_chain_tokens). Defaults 2 and 4:
  // budget 1-3 is a pure chain, 4-7 adds the runner-up at level 1, 8+ at
  // levels 1 and 2.
  int top2_levels = 2;
  int top2_budget_per_level = 4;
};

// One Draft's answer.
struct AssistantDraft {
  // The candidate tree below the session's last context token, in
  // topological order: chain nodes 0..k-1 (node i's parent is i - 1), then
  // the runner-up leaves (level j's parent is chain node j - 1). Every
  // node's source is kAssistant. Empty when nothing could be drafted
  // within the deadline.
  engine::DraftTree tree;
  // probabilities[i]: the assistant's probability of tree.tokens[i] given
  // its parent's path: softmax(logits / T) at the session's temperature T
  // (T = 1 for greedy sessions) over the whole vocabulary.
  std::vector<float> probabilities;
  // True iff the answer came whole from a pre-draft (no model work in this
  // call).
  bool predrafted = false;
};

struct AssistantDrafterStats {
  int64_t sessions = 0;
  int64_t drafted_tokens = 0;   // tokens chosen by the assistant
  int64_t forward_passes = 0;   // model passes (catch-up and drafting)
  int64_t tokens_run = 0;       // tokens those passes ran
  double forward_seconds = 0;   // time in those passes
  int64_t predraft_hits = 0;    // Drafts answered whole from pre-drafts
  int64_t predraft_misses = 0;  // Drafts that needed model work
  int64_t deadline_cuts = 0;    // Drafts that stopped short at the deadline
  int64_t cached_tokens = 0;    // KV slots allocated now
  int64_t evictions = 0;        // sessions whose cache was evicted
  // forward_seconds / drafted_tokens (0 if none): the cost per draft token.
  double seconds_per_drafted_token() const {
    return drafted_tokens == 0 ? 0 : forward_seconds / drafted_tokens;
  }
};

// How the assistant model runs (flags --assistant_layers,
// --assistant_activations, --assistant_threads,
// --assistant_head_tokens); AssistantOptions in
// assistant_model.h has the measurements behind the defaults.
struct AssistantModelOptions {
  // ParseAssistantLayers text: "all", first:N, every:S, skip:A-B.
  std::string layers = "all";
  // "int8" (the cheapest compute form: a draft only needs to be likely) or
  // "f32".
  std::string activations = "int8";
  // Matmul threads; one, because draftsvc shares the CPU with the verifier.
  int threads = 1;
  // The LM head scores only ids below this (engine::ModelOptions::
  // head_tokens); 0: every id.
  int64_t head_tokens = 0;
};

class AssistantEngine {
 public:
  virtual ~AssistantEngine() = default;

  // "SmolLM2.gguf: layers first:8 (8 of 30), 1 thread, native Q4_1 ..."
  virtual const std::string& description() const = 0;
  // OK iff the model's vocabulary has exactly `vocab_size` ids;
  // FAILED_PRECONDITION naming both sizes and the path otherwise.
  virtual absl::Status CheckVocabulary(int32_t vocab_size) const = 0;

  // AssistantDrafter's session methods.
  virtual absl::Status Open(absl::string_view session_id,
                            absl::Span<const int32_t> prompt,
                            const engine::SamplingParams& sampling) = 0;
  virtual absl::Status Advance(absl::string_view session_id,
                               absl::Span<const int32_t> accepted) = 0;
  virtual absl::StatusOr<AssistantDraft> Draft(absl::string_view session_id,
                                               int budget,
                                               absl::Time deadline) = 0;
  virtual absl::Status Close(absl::string_view session_id) = 0;
  virtual double TakeSeconds(absl::string_view session_id) = 0;
  virtual AssistantDrafterStats stats() const = 0;
  virtual double seconds_per_pass() const = 0;
  virtual double RecentSecondsPerPass(absl::Duration max_age) = 0;
};

// Loads the GGUF at `model_path` and starts its drafter: AssistantModel::
// Load's and AssistantDrafter::Create's errors, prefixed as DraftServer
// reports them.
using AssistantEngineFactory =
    absl::StatusOr<std::unique_ptr<AssistantEngine>> (*)(
        const std::string& model_path, const AssistantModelOptions& model,
        const AssistantDrafterOptions& drafter);

// The factory in the plugin at `plugin_path` ("" : libdraftsvc_assistant.so
// in sources/assistant/ below the running binary's directory, where Bazel
// builds it, else beside the binary). FAILED_PRECONDITION naming the
// file and dlopen's reason (a missing LibTorch, say) if it cannot be loaded.
// The plugin stays loaded for the life of the process.
absl::StatusOr<AssistantEngineFactory> LoadAssistantPlugin(
    const std::string& plugin_path);

// The name of the factory the plugin exports (extern "C"), and its type.
inline constexpr char kAssistantFactorySymbol[] =
    "lookahead_draftsvc_assistant_factory";
using AssistantFactoryGetter = AssistantEngineFactory (*)();

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_ENGINE_H_
