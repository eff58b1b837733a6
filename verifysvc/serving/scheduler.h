// Scheduler: continuous batching of generation requests over one model.
//
// One thread owns the model. Each step it (1) plans: which sequences decode
// and which prompt chunks prefill; (2) drafts: gives each decoding sequence
// a draft budget (AllocateDraftTokens over DraftPacer candidates) and asks
// the DraftMixer for every tree in ONE call; (3) runs ONE forward pass over
// every sequence's [root, draft tree] plus the prefill chunks; (4) accepts
// the longest verified path per sequence; (5) emits the tokens through each
// sequence's OutputProcessor to its sink. Requests join between steps; a
// long prompt is prefilled in chunks so it does not stall the running
// sequences. Output is token for token that of plain decoding.
//
// With a prefix cache, a new sequence starts from the K/V of the longest
// cached whole-block prefix of its prompt (a copy into its own cache) and
// prefills the rest; a fully prefilled prompt's new blocks are cached. The
// output is the same with and without it.
//
// The scheduler talks only to the engine and the mixer; it emits neutral
// GenerationOutputs and reports through a SchedulerObserver.
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
#include "verifysvc/drafts/cost_gate.h"
#include "verifysvc/drafts/draft_budget.h"
#include "verifysvc/drafts/draft_mixer.h"
#include "verifysvc/drafts/draft_pacer.h"
#include "verifysvc/drafts/suffix_repeat.h"
#include "verifysvc/serving/output.h"
#include "verifysvc/serving/request.h"
#include "verifysvc/serving/scheduler_observer.h"

namespace lookahead::verifysvc {

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
  // Draft quality prior, moving average and probing (DraftPacerOptions).
  DraftPacerOptions pacing;
  // Pace a sequence's steps whose last tokens repeat its context apart from
  // the others (SuffixRepeat): one DraftPacer for each kind of step.
  bool pace_repeats = true;
  // Charge the measured time of a call to the draft sources (a draftsvc
  // round trip: ~1 ms on the 2-core VM, a quarter of a one-token step) when
  // deciding whether a step asks for drafts at all, so a sequence whose
  // drafts stopped paying stops asking instead of asking for ever smaller
  // gains. Trees are still cut by what their rows cost once they arrive.
  bool charge_draft_calls = true;
  // A new sequence's pacers start from where the last sequence of its
  // namespace left them (DraftPacer::Inherit) if that sequence's drafts
  // never held (none accepted in at least 2 * pacing.probe_interval steps):
  // a namespace whose drafts do not hold (random text, sampling at a high
  // temperature) stops paying the prior's first asks and the early probes
  // on every request. After a sequence whose drafts held at all, the next
  // starts from pacing.prior_quality again (a shorter sequence with none
  // accepted changes nothing); false: every sequence starts from it.
  bool inherit_pacing = true;
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
  // Token Recycling: the model's top-k predictions at every verified row
  // (root and draft nodes) are handed to the draft sources that want them
  // (DraftSource::ObserveVerified); 0 = off. One top-k over the sequence's
  // verify logits per step.
  int prediction_k = 4;
  // Draft tokens asked of the sources for a sequence the budget gives any
  // (at most its decoding length): the tree then comes back scored and best
  // first, and TrimByScore (verifysvc/drafts/draft_trim.h) keeps the prefix
  // whose nodes' own estimates pay for their rows. 0 = ask exactly the
  // budget and keep the whole tree.
  int draft_ask_tokens = 8;
  // The gates of the mechanisms that cost time of their own (the Jacobi
  // window's rows, the assistant's passes): each runs for a sequence only
  // while what it adds pays for what it costs (verifysvc/drafts/cost_gate.h).
  CostGateOptions gate;
  // Share of the assistant's pass seconds (reported by draftsvc per
  // session) charged to the verifier: 1 when draftsvc runs on the
  // verifier's cores (its passes take them from the verify pass), 0 when it
  // has cores of its own (then only its Step latency counts, through the
  // throughput).
  double assistant_cost_share = 1.0;
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
      DraftMixer* drafts, StepCostModel cost, SchedulerOptions options);
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
            DraftMixer* drafts, StepCostModel cost, SchedulerOptions options);

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
  // Cuts each scored tree to what pays for its rows (TrimByScore).
  void TrimDrafts(StepPlan* plan, int window_rows);
  // Ends, with its source's status, every request its draft sources can
  // never serve as asked (a requested source that draftsvc does not run):
  // a client configuration error, not something to hide behind no drafts.
  // Drops them from `plan`, keeping the others' trees in order.
  void EndUnservable(StepPlan* plan);
  // Rows of the Jacobi lookahead window `policy` asks for (0: none).
  static int WindowRowsOf(const DraftPolicy& policy);
  // Makes the sequence's window on first use and marks it to run in this
  // step's pass; returns the rows it adds (0: none runs).
  // `base`: tokens the pass holds before the window's rows.
  int WindowRows(Sequence* seq, int base);
  // After the sequence accepted `emitted`: the window's Jacobi update (its
  // n-grams to the draft sources) if it ran, else it moves along.
  // The window's gate is credited with the accepted tokens after `root`
  // that its recent n-grams foresaw.
  void AdvanceWindow(Sequence* seq, const torch::Tensor& logits, int32_t root,
                     absl::Span<const int32_t> emitted);
  // The assistant's gate: whether it drafts for `seq` this step (the
  // draftsvc entry withholds it otherwise), and after the step its credit
  // (accepted tokens only it proposed) and cost (its reported seconds).
  // ask: the tokens the step asks draftsvc for; cap: the most the
  // sequence's drafts may hold; pass_seconds:
  // DraftCost::assistant_seconds_per_token.
  bool AssistantRuns(Sequence* seq, int ask, int cap, double pass_seconds);
  void RecordAssistant(Sequence* seq, const engine::DraftTree& tree,
                       absl::Span<const int32_t> path, int hits);
  // What a token costs at the current throughput (for the gates).
  double SecondsPerToken() const;
  // Hands the top-k of the verified rows to the sources that want them, on
  // steps that `asked` for drafts (> 0).
  void RecyclePredictions(Sequence* seq, int asked,
                          const engine::DraftTree& tree,
                          const torch::Tensor& logits, StepPlan* plan);
  // Keeps the sequence's measured gates (and pacers) as its namespace's
  // verdict.
  void KeepGateVerdict(const Sequence& seq);
  Usage UsageOf(const Sequence& seq, FinishReason finish) const;
  void End(Sequence* seq, absl::Status status);
  void CountOutcome(RequestOutcome outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const engine::LlamaModel* const model_;
  const engine::Tokenizer* const tokenizer_;
  DraftMixer* const drafts_;  // null: no drafts
  const SchedulerOptions options_;
  SchedulerObserver* const observer_;  // options_.observer or own_observer_
  const std::unique_ptr<SchedulerObserver> own_observer_;

  // Owned by the scheduler thread.
  StepCostModel cost_;  // Calibrated at start, then follows observed passes.
  // cost_.Seconds(1) as calibrated at start (a short context, like the
  // assistant's pass draftsvc times at its start).
  double startup_plain_seconds_ = 0;
  std::vector<std::unique_ptr<Sequence>> running_;
  int64_t steps_run_ = 0;
  int64_t prefix_evictions_seen_ = 0;  // prefix cache evictions reported
  double seconds_per_token_ = 0;       // moving average; 0 until a step emits
  // Moving average of the draft calls that asked for tokens; 0 until one.
  double draft_call_seconds_ = 0;
  // Per namespace, the cost gates of the last sequence that measured them
  // and the pacers of the last if its drafts never held: a new sequence
  // starts from their verdict (CostGate::Inherit, DraftPacer::Inherit).
  struct GateVerdict {
    CostGate window;
    CostGate assistant;
    std::optional<DraftPacer> pacers[2];  // as Sequence::pacers
  };
  std::map<std::string, GateVerdict> gate_verdicts_;

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
