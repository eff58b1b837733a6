// AssistantSource: a small model with the target's vocabulary (the
// "assistant", e.g. Qwen2.5-Coder-0.5B for the 1.5B) drafting in the
// verifier's process, in series with the verify pass: on the step's
// planning, before the pass, on the verifier's own threads. No RPC and no
// second stream of weights competing with the target's for the memory bus:
// on a CPU whose cores the verifier uses, a pass beside the target's slows
// both (bench/results/qwen_assistant/), so it runs between them.
//
// Per sequence it keeps the assistant's KV cache over the prompt's last
// `prompt_tokens` and the output, catching up lazily: only where it drafts
// does it run the tokens emitted since its last pass (with the pass that
// drafts the first node), and a cache whose tail holds rejected drafts is
// truncated to the common prefix first.
//
// It drafts only where it can pay: where the sources before it (the
// sequence's own text, draftsvc, recycled predictions) proposed no first
// node scored `covered_below` or more (DraftAsk::covered_score), and only
// while the sequence's measured rate of accepted first nodes times what an
// accepted token saves now exceeds the assistant's pass plus the draft row
// it adds (DraftAsk::token_seconds, row_seconds). A chain grows past its
// first node while the assistant's own probability of the path, times that
// rate, pays for another pass and row the same way. Nodes are scored by
// that estimate and tagged kAssistant. It gates itself, so the verifier's
// assistant gate (draftsvc's assistant, DraftAsk::withheld) does not apply.
//
// It drafts for sequences whose policy may use the assistant source
// (requests that name no sources, or name it).
//
// A sequence whose assistant pass fails (its KV cache cannot grow) is not
// drafted by it again; the request goes on with its other sources.
//
// Its passes are not draft calls (Propose never sets *called): the gate
// above charges them to the steps it runs in, and Stats() counts them and
// its decisions for the metrics (lookahead_assistant_seconds_total).
//
// Thread-compatible: used by the scheduler thread, as every DraftSource;
// Stats() may be called from any thread.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_ASSISTANT_SOURCE_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_ASSISTANT_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "engine/model/kv_cache.h"
#include "engine/model/llama_model.h"
#include "verifysvc/drafts/draft_source.h"

namespace lookahead::verifysvc {

struct AssistantSourceOptions {
  // The prompt's last tokens the assistant reads (its prefill cost: ~2.3 ms
  // a token for Qwen2.5-Coder-0.5B on two cores).
  int prompt_tokens = 64;
  // Longest chain drafted a step.
  int max_chain = 3;
  // Drafts only where the sources before it proposed no first node scored
  // at least this.
  float covered_below = 0.3f;
  // The rate of accepted first nodes a sequence starts from, and its weight
  // in steps.
  double prior_rate = 0.6;
  double prior_steps = 4;
  // false: draft every step it is asked (the first rule still applies; for
  // tests and ablations, as --cost_gates=false).
  bool gate = true;
};

class AssistantSource : public DraftSource {
 public:
  // `model` (not owned) must outlive the source; its vocabulary must be the
  // target's (the caller checks).
  AssistantSource(const engine::LlamaModel* model,
                  const AssistantSourceOptions& options);
  ~AssistantSource() override;

  std::string name() const override { return "assistant"; }
  int64_t Open(const DraftPolicy& policy,
               absl::Span<const int32_t> prompt) override;
  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override;
  std::vector<engine::DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                         bool* called) override;
  void Close(int64_t handle) override;
  DraftCost cost() const override;
  DraftSourceStats Stats() const override;

  // A one-token pass of the assistant, as last measured (moving average; 0
  // until one ran or was set).
  double seconds_per_pass() const { return pass_seconds_; }
  // Sets it before any sequence runs (the verifier times the assistant at
  // start as it times its own passes), so that an assistant that cannot
  // pay is never run, not even once.
  void set_seconds_per_pass(double seconds) { pass_seconds_ = seconds; }

 private:
  struct Sequence;

  // Catches the cache up with the context and returns the logits after its
  // last token.
  absl::Status Sync(Sequence* s);
  // Runs `tokens` through the cache; sets s->logits.
  absl::Status Run(Sequence* s, absl::Span<const int32_t> tokens);
  engine::DraftTree Draft(Sequence* s, const DraftAsk& ask);

  const engine::LlamaModel* const model_;
  const AssistantSourceOptions options_;
  std::unordered_map<int64_t, std::unique_ptr<Sequence>> sequences_;
  int64_t next_handle_ = 1;
  // A one-token pass's seconds (moving average; 0 until one ran).
  double pass_seconds_ = 0;
  // For Stats.
  std::atomic<int64_t> open_{0};
  std::atomic<int64_t> failures_{0};
  std::atomic<int64_t> pass_nanos_{0};
  std::atomic<int64_t> passes_{0};
  std::atomic<int64_t> gate_runs_{0};
  std::atomic<int64_t> gate_skips_{0};
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_ASSISTANT_SOURCE_H_
