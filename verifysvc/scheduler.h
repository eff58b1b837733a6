// Scheduler: continuous batching of generation requests over one model.
//
// One thread owns the model. Each step it (1) asks draftsvc, in ONE batched
// RPC, for the draft trees of all decoding sequences while reporting their
// newly accepted tokens (DraftSessions), with draft budgets chosen by
// AllocateDraftTokens; (2) runs ONE forward pass over every sequence's
// [root, draft tree] plus chunks of prompts being prefilled; (3) accepts the
// longest verified path per sequence; (4) streams the tokens. Requests join
// between steps; a long prompt is prefilled in chunks so it does not stall
// the running sequences. Output is token for token that of plain decoding.
//
// Thread-safety: Submit, Shutdown and Stats are safe to call concurrently.
#ifndef LOOKAHEAD_VERIFYSVC_SCHEDULER_H_
#define LOOKAHEAD_VERIFYSVC_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/generation.pb.h"
#include "verifysvc/draft_budget.h"
#include "verifysvc/draft_sessions.h"
#include "verifysvc/llama_model.h"
#include "verifysvc/sampler.h"
#include "verifysvc/tokenizer.h"
#include "verifysvc/verifier_metrics.h"

namespace lookahead::verifysvc {

// A validated request.
struct SequenceSpec {
  std::vector<int32_t> prompt;  // >= 1 ids in [0, vocab)
  int max_new_tokens = 1;       // >= 1
  SamplingParams sampling;
  std::vector<std::string> stop;  // ValidateStopStrings holds
  // DRAFT_MODE_OFF, _TRIE_HIERARCHICAL or _TRIE_PARALLEL.
  lookahead::v1::DraftMode draft_mode = lookahead::v1::DRAFT_MODE_OFF;
  int decoding_length = 0;  // Most draft tokens per step; 0 = no drafts.
  int branch_length = 0;    // 0 = draftsvc's default.
  std::string name_space;   // A valid draftsvc namespace.
  absl::Time arrival = absl::Now();
};

// Where a sequence's stream goes.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // Streams one message. Called from the scheduler thread.
  virtual void Send(lookahead::v1::GenerateResponse response) = 0;
  // Ends the stream. The last call: the scheduler forgets the sink after it.
  virtual void Finish(absl::Status status) = 0;
  // True once the client cancelled or its deadline passed. Thread-safe.
  virtual bool Cancelled() const = 0;
};

struct SchedulerOptions {
  // Sequences decoded together (each holds a KV cache), and requests that
  // may wait for a slot; beyond both Submit returns RESOURCE_EXHAUSTED.
  int max_running = 16;
  int max_queued = 64;
  // Most tokens in one forward pass: roots, drafts and prefill chunks.
  // Drafts get what roots and prefill leave, if they pay for themselves.
  int max_step_tokens = 64;
  // Prompt tokens prefilled per step while other sequences decode: a new
  // prompt delays them by about the cost of this many tokens per step. A
  // prompt alone is prefilled in the model's (larger) prefill chunks.
  int prefill_chunk_tokens = 64;
  // A sequence that got no drafts for this many steps gets a probe of
  // probe_tokens; each probe accepting nothing doubles its interval up to
  // max_probe_interval. A 1-token probe costs a CPU ~0.6 of a step (a
  // 2-row pass): failing drafts cost ~1% over 128 steps.
  int probe_interval = 8;
  int max_probe_interval = 128;
  int probe_tokens = 1;
  // Where to export the Prometheus series (not owned; null: nowhere).
  // Create with VerifierMetrics::Create(registry, model, 32).
  VerifierMetrics* metrics = nullptr;
  // Print one line per this many steps (batch, tokens, drafts requested,
  // verified and accepted, forward time) to stdout; 0 = never.
  int log_every_steps = 0;
};

// Times one forward pass of a chain of n tokens after `context` cached
// tokens, for each n in `sizes` (ascending), best of `repeats`.
absl::StatusOr<StepCostModel> MeasureStepCost(const LlamaModel& model,
                                              const std::vector<int>& sizes,
                                              int context, int repeats);

class Scheduler {
 public:
  // `model`, `tokenizer` and `drafts` (may be null: no draftsvc) are not
  // owned and must outlive the scheduler. Starts the scheduler thread.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const LlamaModel* model, const Tokenizer* tokenizer,
      DraftSessions* drafts, StepCostModel cost, SchedulerOptions options);
  // Shutdown(ZeroDuration()).
  ~Scheduler();

  // Queues `spec`; the scheduler then streams to `sink` (which must stay
  // valid until its Finish). RESOURCE_EXHAUSTED (naming the limits) if
  // max_running + max_queued sequences are admitted already; UNAVAILABLE
  // after Shutdown. On error the sink is not used.
  absl::Status Submit(SequenceSpec spec, GenerationSink* sink);

  // Stops admitting, lets running and queued sequences finish for up to
  // `grace`, then ends the rest with UNAVAILABLE and stops the thread.
  void Shutdown(absl::Duration grace);

  lookahead::v1::GenerationStatsResponse Stats() const;
  // Counts a request turned away before Submit (invalid).
  void CountRejected();

 private:
  struct Sequence;
  struct Pending {
    SequenceSpec spec;
    GenerationSink* sink;
  };

  Scheduler(const LlamaModel* model, const Tokenizer* tokenizer,
            DraftSessions* drafts, StepCostModel cost,
            SchedulerOptions options);

  void Loop();
  // Moves queued requests into free slots; ends cancelled sequences.
  void Admit();
  void Step();
  // Appends one step's tokens to `seq` up to its end (EOS, stop string,
  // length) and streams them; returns how many it kept.
  int Emit(Sequence* seq, absl::Span<const int32_t> tokens);
  void End(Sequence* seq, absl::Status status);

  const LlamaModel* const model_;
  const Tokenizer* const tokenizer_;
  DraftSessions* const drafts_;
  const SchedulerOptions options_;
  VerifierMetrics* const m_;  // options_.metrics or own_metrics_
  std::unique_ptr<metrics::Registry> own_registry_;
  std::unique_ptr<VerifierMetrics> own_metrics_;

  // Owned by the scheduler thread.
  StepCostModel cost_;  // Calibrated at start, then follows observed passes.
  std::vector<std::unique_ptr<Sequence>> running_;
  int64_t steps_run_ = 0;

  mutable absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  int admitted_ ABSL_GUARDED_BY(mu_) = 0;  // running + queued
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  lookahead::v1::GenerationStatsResponse stats_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;  // Last: starts once the members above exist.
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SCHEDULER_H_
