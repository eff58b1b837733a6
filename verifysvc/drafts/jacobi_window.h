// JacobiWindow: one sequence's Lookahead Decoding window (Fu et al. 2024,
// "Break the Sequential Dependency of LLM Inference Using Lookahead
// Decoding"): W columns x (N - 1) levels of guessed tokens evaluated as
// scratch rows of the sequence's verify pass, updated by the Jacobi rule, and
// the n-grams their trajectories complete, harvested for the n-gram pool.
// The window only proposes: its rows never change the verify tree's logits or
// what is committed, so decoding stays lossless whatever it guesses.
//
// Thread-compatible: one window per sequence, used by one thread at a time.
//
// Per step the caller (the scheduler):
//   rows = RowsFromTree(MakeVerifyInput(cache, root, draft));
//   window->AppendRows(&rows);                 // + rows_per_step() rows
//   logits = model.ForwardRows({rows});        // one pass
//   accept on the kept rows, commit, emit `emitted`;
//   ngrams = window->Update(logits[0], sampling, emitted);  // -> the pool
// and, on a step that runs without the window, window->Skip(emitted).
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_JACOBI_WINDOW_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_JACOBI_WINDOW_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/batch.h"
#include "engine/model/sampler.h"

namespace lookahead::verifysvc {

struct JacobiOptions {
  // W: columns (positions) of the window, in [1, kMaxWindow]. Each column
  // yields at most one n-gram per step; costs (N - 1) rows per column.
  int window = 0;
  // N: tokens of each harvested n-gram, in [2, kMaxNgram]. The window has
  // N - 1 levels; a longer n-gram can be accepted further but needs more
  // Jacobi steps to converge and costs W rows per extra level.
  int ngram = 0;
  // G: most n-grams Update returns per step, in [0, kMaxGuess] (at most W
  // are complete per step anyway). 0 harvests none (the window still runs:
  // to measure its cost).
  int max_ngrams = 0;
  // Exclusive bound on token ids (the model's vocabulary), >= 1.
  int32_t vocab_size = 0;
  // Seeds the window's initial and refilled tokens (see Create).
  uint64_t seed = 0;
  // True (default): a step that emits a > 1 tokens also drops the a - 1
  // leftmost columns (their positions are now committed) and refills as many
  // at the right, so every column keeps guessing the same absolute positions
  // (the reference implementation's ALWAYS_FWD_ONE = 0). False: the window
  // moves one position per step whatever was accepted (ALWAYS_FWD_ONE = 1);
  // its trajectories then lag behind the sequence after a long acceptance.
  bool shift_by_accepted = true;
};

// A harvested n-gram: N token ids in [0, vocab_size), a guess at N
// consecutive tokens; tokens[0] is its key in the pool (proto Ngram).
using JacobiNgram = std::vector<int32_t>;

class JacobiWindow {
 public:
  static constexpr int kMaxWindow = 256;
  static constexpr int kMaxNgram = 16;
  static constexpr int kMaxGuess = 4096;
  // Context tokens kept to draw refills from (the most recent ones).
  static constexpr int kMaxHistory = 4096;

  // Creates the window of a sequence whose tokens so far are `context` (the
  // prompt, and any output already emitted). Every level token is drawn from
  // the context, as the paper's implementation does (random.choice over the
  // prompt): draw number d (0, 1, ...) picks
  //   history[CounterRandom(options.seed, d) % history.size()]
  // where history is the last kMaxHistory context tokens (plus, later, the
  // emitted ones). Initial draws fill level 0 left to right, then level 1,
  // and so on; refills draw in the same order (see Update). The same
  // options and tokens give the same window, bit for bit.
  // INVALID_ARGUMENT naming the field iff W, N, G or vocab_size is out of
  // range, context is empty, or a context token is outside [0, vocab_size).
  static absl::StatusOr<std::unique_ptr<JacobiWindow>> Create(
      const JacobiOptions& options, absl::Span<const int32_t> context);

  JacobiWindow(const JacobiWindow&) = delete;
  JacobiWindow& operator=(const JacobiWindow&) = delete;

  const JacobiOptions& options() const { return options_; }
  int window() const { return options_.window; }
  int ngram() const { return options_.ngram; }
  int levels() const { return options_.ngram - 1; }
  // Rows AppendRows adds to the pass: W * (N - 1).
  int rows_per_step() const { return window() * levels(); }
  // Most n-grams one Update returns: min(W, G).
  int ngrams_per_step() const;
  // token(level, column): level 0 is the oldest. REQUIRES: 0 <= level <
  // levels(), 0 <= column < window().
  int32_t token(int level, int column) const { return levels_[level][column]; }
  // Updates done so far (Skip not counted).
  int64_t updates() const { return updates_; }

  // Appends the window's rows after rows->size() existing rows (the verify
  // tree [root, draft...], kept; any scratch rows already there are
  // ignored). With the root (row 0) at position p, the token of level l,
  // column i is row rows->size() + l * W + i at position p + 1 + i + l, so a
  // column's levels sit at consecutive positions (its trajectory) and level
  // 0 is one guess of positions p + 1 .. p + W. Window row (l, i) attends to:
  //   - the committed cache and the root row (never a draft node);
  //   - level 0 of the columns j < i (the guessed text before it);
  //   - its own column's levels 0 .. l - 1 (its trajectory) and itself.
  // So it sees exactly the causal sequence cache, root, L0[0..i], L1[i], ...,
  // Ll[i] at consecutive positions, and its logits predict position
  // p + 2 + i + l. The kept rows' mask bits are unchanged (no kept row sees a
  // window row), so their logits are those of the tree alone and
  // ValidateRows still holds. The pass needs rows_per_step() more free slots
  // in the cache (scratch rows are written provisionally like the tree).
  // INVALID_ARGUMENT iff rows is null, has no kept rows, its row 0 is not a
  // root, its mask is not (size, size), or last_logits_only is set (the
  // window needs its rows' logits). Replaces an earlier AppendRows not yet
  // followed by Update.
  absl::Status AppendRows(engine::SequenceRows* rows);

  // The Jacobi step, after the pass over the rows of the last AppendRows:
  // `logits` is that sequence's (rows, vocab_size) float32 output of
  // ForwardRows (any device); `emitted` the tokens the step emitted (accepted
  // draft tokens + bonus, >= 1; the cache grew by emitted.size()).
  //  1. Each last-level row (N - 2, i) at position q predicts the token at
  //     q + 1: greedy ArgMax, or SampleToken(.., sampling, q + 1) (the
  //     request's own per-position noise, so guesses follow its draws).
  //  2. Harvest: column i's n-gram is L0[i], ..., L(N-2)[i], prediction[i];
  //     columns left to right, an n-gram equal to an earlier one skipped, at
  //     most G. None until the update in which levels 1 .. N - 2 all came
  //     from the model (the first N - 2 updates return none: their
  //     trajectories still hold drawn tokens; the paper's fill phase).
  //  3. Drop level 0, append the predictions as the new last level: every
  //     token's position moves one down relative to the next root.
  //  4. With shift_by_accepted and a = emitted.size() > 1: drop the
  //     min(a - 1, W) leftmost columns and append as many at the right,
  //     drawn from the history (emitted tokens included) level by level,
  //     level 0 first, left to right.
  // Returns the harvested n-grams. FAILED_PRECONDITION iff no AppendRows
  // precedes it; INVALID_ARGUMENT iff logits is not (>= appended rows,
  // vocab_size) float, emitted is empty or holds an id outside
  // [0, vocab_size), or sampling is invalid. On error the window is
  // unchanged (and the appended rows stay pending).
  absl::StatusOr<std::vector<JacobiNgram>> Update(
      const torch::Tensor& logits, const engine::SamplingParams& sampling,
      absl::Span<const int32_t> emitted);

  // A step ran without the window and emitted `emitted`: moves the window
  // as Update's step 4 would for a + 1 tokens (with shift_by_accepted: drops
  // min(a, W) columns and refills them; else nothing moves) and records the
  // tokens for refills. Clears any pending AppendRows. INVALID_ARGUMENT iff
  // emitted is empty or holds an id outside [0, vocab_size) (nothing
  // changes).
  absl::Status Skip(absl::Span<const int32_t> emitted);

 private:
  JacobiWindow(const JacobiOptions& options, std::vector<int32_t> history);

  absl::Status CheckTokens(absl::Span<const int32_t> tokens,
                           const char* what) const;
  void AddHistory(absl::Span<const int32_t> tokens);
  int32_t Draw();
  // Drops the `columns` leftmost columns (<= W) and refills as many.
  void ShiftColumns(int columns);

  const JacobiOptions options_;
  std::vector<int32_t> history_;              // the last <= kMaxHistory tokens
  uint64_t draws_ = 0;                        // Draw()s so far
  std::vector<std::vector<int32_t>> levels_;  // (N - 1, W); [0] oldest
  int64_t updates_ = 0;
  // Set by AppendRows, cleared by Update/Skip: where the rows went.
  int first_row_ = -1;
  int64_t root_position_ = 0;
};

// The tokens of `accepted` (a step's accepted draft tokens, in order after
// `root`) that one of `ngrams` foresaw: the largest k such that some n-gram
// reads root, accepted[0], ..., accepted[k - 1]. The window's credit for the
// step (its CostGate): an estimate, since another source may have proposed
// the same tokens.
int NgramCredit(absl::Span<const JacobiNgram> ngrams, int32_t root,
                absl::Span<const int32_t> accepted);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_JACOBI_WINDOW_H_
