// Scheduler: continuous batching of generation requests over one model.
//
// One thread owns the model. Each step it (1) plans: which sequences decode
// and which prompt chunks prefill; (2) drafts: the DraftPlanner gives every
// decoding sequence its draft tree (and any scratch rows) in one go; (3)
// runs ONE forward pass over every sequence's [root, draft tree] plus the
// prefill chunks; (4) accepts the longest verified path per sequence; (5)
// emits the tokens through each sequence's OutputProcessor to its sink,
// telling its SequenceDrafter what was verified and emitted. Requests join
// between steps; a long prompt is prefilled in chunks so it does not stall
// the running sequences. Output is token for token that of plain decoding.
//
// With a prefix cache, a new sequence starts from the K/V of the longest
// cached whole-block prefix of its prompt (a copy into its own cache) and
// prefills the rest; a fully prefilled prompt's new blocks are cached. The
// output is the same with and without it.
//
// The scheduler talks only to the engine and the drafting layer
// (verifysvc/drafts/draft_planner.h); it never waits on a draft source. It
// emits neutral GenerationOutputs and reports through a SchedulerObserver.
//
// Thread-safety: Submit, Shutdown, Stats and CountRejected are safe to call
// concurrently.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_SCHEDULER_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/model/llama_model.h"
#include "engine/model/prefix_cache.h"
#include "engine/text/tokenizer.h"
#include "verifysvc/drafts/draft_budget.h"
#include "verifysvc/drafts/draft_fanout.h"
#include "verifysvc/drafts/draft_planner.h"
#include "verifysvc/drafts/sequence_drafter.h"
#include "verifysvc/serving/output.h"
#include "verifysvc/serving/request.h"
#include "verifysvc/serving/scheduler_observer.h"

namespace lookahead::verifysvc {

// The drafting knobs (DrafterOptions: pacing, cost gates, asks, recycled
// predictions) are the drafting layer's, documented there.
struct SchedulerOptions : DrafterOptions {
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
  // Timed passes move the step cost model (StepCostModel::Observe), so it
  // follows the machine's load. false keeps the curve it was created with
  // (tests that count asks against a curve of their own).
  bool follow_step_costs = true;
  // Where to report (not owned; null: nowhere). PrometheusObserver exports
  // the series.
  SchedulerObserver* observer = nullptr;
  // K/V of recent prompt prefixes (not owned; may be shared by schedulers
  // of the same model; null: off). See the class comment.
  engine::PrefixCache* prefix_cache = nullptr;
  // Print one line per this many steps (batch, tokens, drafts requested,
  // verified and accepted, forward time) to stdout; 0 = never.
  int log_every_steps = 0;
};

class Scheduler {
 public:
  // `model`, `tokenizer` and `drafts` (may be null: no drafts) are not owned
  // and must outlive the scheduler. `cost`: the model's forward cost by
  // tokens (MeasureStepCost). Starts the scheduler thread. INVALID_ARGUMENT
  // naming the options if they are out of range.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const engine::LlamaModel* model, const engine::Tokenizer* tokenizer,
      DraftFanout* drafts, StepCostModel cost, SchedulerOptions options);
  // Shutdown(ZeroDuration()).
  ~Scheduler();

  // Queues `request`; the scheduler then streams to `sink` (which must stay
  // valid until its Finish). RESOURCE_EXHAUSTED (naming the limits) if
  // max_running + max_queued sequences are admitted already; UNAVAILABLE
  // after Shutdown. On error the sink is not used.
  absl::Status Submit(GenerationRequest request, GenerationSink* sink);

  // Stops admitting, lets running and queued sequences finish for up to
  // `grace`, then ends the rest with UNAVAILABLE and stops the thread.
  void Shutdown(absl::Duration grace);

  SchedulerStats Stats() const;
  // "N requests (F finished, C cancelled), P forward passes, ...": for logs.
  static std::string Describe(const SchedulerStats& stats);
  // Counts a request turned away before Submit (invalid).
  void CountRejected();

 private:
  struct Sequence;
  struct Pending {
    GenerationRequest request;
    GenerationSink* sink;
  };
  struct StepPlan;
  struct StepTally;

  Scheduler(const engine::LlamaModel* model, const engine::Tokenizer* tokenizer,
            DraftFanout* drafts, StepCostModel cost, SchedulerOptions options);

  void Loop();
  // Moves queued requests into free slots; ends cancelled sequences.
  void Admit();
  std::unique_ptr<Sequence> Start(Pending pending);
  // Prefix cache: restores the longest cached prefix of the prompt into the
  // new sequence's cache; caches the blocks of a fully prefilled prompt.
  void RestorePrefix(Sequence* seq);
  void CachePrompt(const Sequence& seq);
  void Step();
  // The stages of Step, in order.
  StepPlan Plan();
  void Draft(StepPlan* plan);
  absl::StatusOr<std::vector<torch::Tensor>> RunForward(StepPlan* plan);
  void AcceptDrafts(StepPlan* plan, const std::vector<torch::Tensor>& logits,
                    StepTally* tally);
  void CommitPrefill(const StepPlan& plan,
                     const std::vector<torch::Tensor>& logits,
                     StepTally* tally);
  void Record(const StepPlan& plan, const StepTally& tally);
  // Appends one step's tokens to `seq` up to its end (EOS, stop string,
  // length) and streams them with their `logprobs` (empty, or one per
  // token); the first `draft_hits` of them are accepted draft tokens, nodes
  // `path[1..draft_hits]` - 1 of `tree` (null with no hits). Returns how
  // many it kept.
  int Emit(Sequence* seq, absl::Span<const int32_t> tokens,
           std::vector<engine::ChoiceLogprobs> logprobs, int draft_hits,
           const engine::DraftTree* tree = nullptr,
           absl::Span<const int32_t> path = {});
  // The prefilled prompt's first token `first` (with its `logprobs`): ends
  // the sequence if its draft sources refused it, else emits the token.
  void EmitFirst(Sequence* seq, int32_t first,
                 std::vector<engine::ChoiceLogprobs> logprobs,
                 StepTally* tally);
  // Emits the first tokens held for their draft sources' answer
  // (SequenceDrafter::AwaitingOpen) once it came or the wait is over.
  // Returns true iff some first token is still held.
  bool ReleaseFirstTokens();
  // Drops from `plan` the sequences whose drafts failed, ending them with
  // their sources' status.
  void EndUnservable(StepPlan* plan, std::vector<SequenceDraft>* drafts);
  // What a token costs at the current throughput (for the gates).
  double SecondsPerToken() const;
  Usage UsageOf(const Sequence& seq, FinishReason finish) const;
  void End(Sequence* seq, absl::Status status);
  void CountOutcome(RequestOutcome outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const engine::LlamaModel* const model_;
  const engine::Tokenizer* const tokenizer_;
  const SchedulerOptions options_;
  SchedulerObserver* const observer_;  // options_.observer or own_observer_
  const std::unique_ptr<SchedulerObserver> own_observer_;

  // Owned by the scheduler thread.
  StepCostModel cost_;  // Calibrated at start, then follows observed passes.
  // The drafting layer over the draft sources; null: no drafts. Reads
  // cost_; before running_, whose drafters it outlives.
  const std::unique_ptr<DraftPlanner> drafting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  int64_t steps_run_ = 0;
  int64_t prefix_evictions_seen_ = 0;  // prefix cache evictions reported
  double seconds_per_token_ = 0;       // moving average; 0 until a step emits

  mutable absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  int admitted_ ABSL_GUARDED_BY(mu_) = 0;  // running + queued
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;  // Last: starts once the members above exist.
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_SCHEDULER_H_
