// SequenceDrafter: one decoding sequence's drafting policy. It decides, step
// by step, how much draft the sequence wants (two DraftPacers, for steps
// whose context repeats and the rest), which of the mechanisms that cost
// time of their own run (a CostGate each: the Jacobi window's scratch rows,
// the assistant's passes), what its sources are asked for, and after the
// verify pass what they are told (recycled predictions, the window's
// n-grams, the emitted tokens). It is the one place that counts the
// sequence's draft tokens verified and accepted, per source.
//
// The scheduler never drives a source itself: DraftPlanner (draft_planner.h)
// opens a SequenceDrafter per sequence and asks every sequence's drafter in
// one step; the scheduler then calls, per step of the sequence, in order:
//   AppendScratchRows (building the pass), Verified (after it), Emitted.
// Before the first token: AwaitingOpen and Failure.
//
// Thread-compatible: used by the scheduler thread only.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_SEQUENCE_DRAFTER_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_SEQUENCE_DRAFTER_H_

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/model/batch.h"
#include "engine/model/draft_tree.h"
#include "engine/model/sampler.h"
#include "verifysvc/drafts/cost_gate.h"
#include "verifysvc/drafts/draft_budget.h"
#include "verifysvc/drafts/draft_fanout.h"
#include "verifysvc/drafts/draft_observer.h"
#include "verifysvc/drafts/draft_pacer.h"
#include "verifysvc/drafts/draft_policy.h"
#include "verifysvc/drafts/drafter_options.h"
#include "verifysvc/drafts/draft_trim.h"
#include "verifysvc/drafts/jacobi_window.h"
#include "verifysvc/drafts/suffix_repeat.h"

namespace lookahead::verifysvc {

// What every SequenceDrafter of one scheduler shares. Owned by the
// DraftPlanner, which outlives its drafters.
struct DraftingContext {
  DraftFanout* fanout = nullptr;          // the sources (not owned)
  const StepCostModel* cost = nullptr;  // the pass's cost (not owned)
  DraftObserver* observer = nullptr;    // not owned; never null
  int32_t vocab_size = 0;
  // cost->Seconds(1) when drafting started (draftsvc times the assistant's
  // pass at its start too, at a short context).
  double startup_plain_seconds = 0;
  DrafterOptions options;
};

// What the step's economy says a token is worth, for the gates.
struct TokenPrice {
  // What a token costs at the current throughput (> 0).
  double seconds_per_token = 0;
  // DraftCost::assistant_seconds_per_token of the sources (0: unknown).
  double assistant_seconds_per_token = 0;
};

class SequenceDrafter {
 public:
  // Scratch rows a sequence drafted under `policy` may add to its pass
  // beyond its tree (the Jacobi window's W * (N - 1)); 0: none.
  static int ScratchRowsOf(const DraftPolicy& policy);

  // `handle`: the sequence's handle from context->fanout->Open (!= 0), which
  // this drafter closes. `opened`: when the open was sent.
  SequenceDrafter(const DraftingContext* context, const DraftPolicy& policy,
                  const engine::SamplingParams& sampling,
                  absl::Span<const int32_t> prompt, int64_t handle,
                  absl::Time opened);
  ~SequenceDrafter();

  SequenceDrafter(const SequenceDrafter&) = delete;
  SequenceDrafter& operator=(const SequenceDrafter&) = delete;

  // True iff the sequence named its sources, they have not yet answered
  // its open, and options.open_answer_wait since `opened` has not passed:
  // its first token waits (Failure then tells whether they refused it).
  // Never blocks.
  bool AwaitingOpen(absl::Time now) const;
  // OK, or why the sources can never draft the sequence as its policy asks
  // (DraftSource::Failure): the request ends with this status.
  absl::Status Failure() const;

  // The step's planning, called by DraftPlanner in this order.
  // The budget's candidate for this step: at most `room` tokens (the room
  // left in the sequence's cache).
  DraftCandidate Candidate(int room);
  // Whether the scratch rows run this step (their gate), making the window
  // on first use; returns the rows they add (0: none). `base_rows`: rows
  // the pass holds before them.
  int ScratchRows(int base_rows, const TokenPrice& price);
  // The ask of the sources for a step the budget gives `budget` tokens of
  // at most `cap` (the candidate's): a scored tree of draft_ask_tokens
  // when it gives any (the planner cuts it by its scores), none when it
  // gives none, a probe for a probe; the sources the gates withhold.
  DraftAsk Ask(int budget, int cap, const TokenPrice& price);
  // `tree` as TrimByScore sees it: its scores, the sequence's correction
  // of them, a probe's floor. REQUIRES: tree has scores; outlives the result.
  ScoredDraft Scored(const engine::DraftTree& tree) const;

  // Appends this step's scratch rows (if they run) after the pass's rows
  // of the sequence ([root, tree...]). An error (a bug) drops them for this
  // step.
  void AppendScratchRows(engine::SequenceRows* rows);

  // After the pass: `tree` was verified after `root`; `logits` are the
  // sequence's rows of the pass ((1 + tree.size() + scratch rows, vocab):
  // root, tree nodes, then the scratch rows); `path` and `tokens` what
  // AcceptLongestPath accepted (engine::AcceptResult). Updates the pacer
  // and gates and hands the sources the verified predictions and the
  // window's n-grams. Adds the seconds the predictions took to
  // *prediction_seconds. Call before Emitted of the step's tokens.
  void Verified(const engine::DraftTree& tree, int32_t root,
                const torch::Tensor& logits, absl::Span<const int32_t> path,
                absl::Span<const int32_t> tokens, double* prediction_seconds);

  // The sequence emitted the step's `tokens` (its first token, or a decoding
  // step's accepted tokens and bonus), of which the output kept `output` (a
  // prefix: up to its end); the first `hits` were accepted nodes
  // path[1..hits] - 1 of `tree` (null for the first token). Counts the
  // step's draft tokens verified and accepted (a draft token counts as
  // accepted iff it reached the output), in total and per source, reports
  // them, and passes `output` to the sources.
  void Emitted(absl::Span<const int32_t> tokens,
               absl::Span<const int32_t> output, int hits,
               const engine::DraftTree* tree, absl::Span<const int32_t> path);

  // Totals so far: draft tokens verified and accepted.
  int64_t draft_tokens() const { return draft_tokens_; }
  int64_t accepted_draft_tokens() const { return accepted_draft_tokens_; }
  // Per engine::DraftSourceTag: draft tokens verified and accepted (a node
  // several sources proposed counts for each).
  const std::array<int64_t, engine::kNumDraftSourceTags>& source_drafts()
      const {
    return source_drafts_;
  }
  const std::array<int64_t, engine::kNumDraftSourceTags>& source_accepted()
      const {
    return source_accepted_;
  }

 private:
  friend class DraftPlanner;  // inherits and keeps namespace verdicts

  DraftPacer& pacer() { return pacers_[pace_]; }
  const DraftPacer& pacer() const { return pacers_[pace_]; }
  bool AssistantRuns(int ask, int cap, const TokenPrice& price);
  void RecordAssistant(const engine::DraftTree& tree,
                       absl::Span<const int32_t> path, int hits);
  void RecyclePredictions(const engine::DraftTree& tree,
                          const torch::Tensor& tree_logits,
                          double* prediction_seconds);
  bool MakeWindow();
  void AdvanceWindow(const torch::Tensor& logits, int32_t root,
                     absl::Span<const int32_t> emitted);
  void CountVerified(const engine::DraftTree& tree, int kept_hits,
                     absl::Span<const int32_t> path);

  const DraftingContext* const context_;
  const DraftPolicy policy_;
  const engine::SamplingParams sampling_;
  const absl::Time opened_;
  int64_t handle_;  // 0 once closed

  // Pacing: pacers_[1] for steps whose context's last tokens repeat
  // (SuffixRepeat, fed the prompt and every emitted token), pacers_[0] for
  // the rest; pace_ picks this step's.
  DraftPacer pacers_[2];
  SuffixRepeat repeats_;
  int pace_ = 0;
  int asked_ = 0;  // this step's ask of the sources
  // Recent accepted draft tokens and what the trees' scores predicted for
  // them (moving averages over drafted steps): the sequence's correction
  // of its namespace-wide calibration, for TrimByScore.
  double predicted_hits_ = 0;
  double actual_hits_ = 0;

  // The Jacobi lookahead window, made at its first run (ScratchRows); null
  // while none ran. window_context_: the prompt and the output so far, kept
  // until then. window_runs_: its rows are in this step's pass.
  std::unique_ptr<JacobiWindow> window_;
  std::vector<int32_t> window_context_;
  bool window_failed_ = false;
  bool window_runs_ = false;
  // The window's recent n-grams, for its credit.
  std::vector<JacobiNgram> window_ngrams_;
  // Whether the window and the assistant run this step (CostGate).
  CostGate window_gate_;
  CostGate assistant_gate_;
  bool assistant_runs_ = false;
  // The policy names the assistant, or its drafts or costs have shown up
  // (a sequence on default sources may or may not have one).
  bool assistant_seen_ = false;

  // Accounting.
  int steps_ = 0;  // Emitted calls
  int64_t draft_tokens_ = 0;
  int64_t accepted_draft_tokens_ = 0;
  std::array<int64_t, engine::kNumDraftSourceTags> source_drafts_{};
  std::array<int64_t, engine::kNumDraftSourceTags> source_accepted_{};
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_SEQUENCE_DRAFTER_H_
