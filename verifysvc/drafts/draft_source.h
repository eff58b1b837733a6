// DraftSource: the verifier's interface to where draft trees come from. One
// implementation per file (draftsvc_source.h: draftsvc over gRPC, which
// mixes its tries, n-gram pools and assistant model into one tree itself);
// the drafting layer sees only DraftFanout, which asks every configured
// source and unions their trees within each budget. Not to be confused with
// the wire enum v1.DraftSource or engine::DraftSourceTag (a node's source
// for statistics).
//
// The drafting layer (DraftPlanner, SequenceDrafter) drives a source per
// sequence: Open with the prompt, then each step, in ONE Propose call for
// all drafted sequences, ask for a tree of at most `budget` tokens to
// verify after the sequence's last token; after the verify pass,
// ObserveVerified the model's top-k predictions at the tree's nodes (if the
// source WantsPredictions) and then Observe the tokens the sequence
// emitted; Close when it ends. A source that fails proposes empty trees:
// drafts are an optimisation, never an error. The one exception is a
// request the source can never serve as asked (a requested source that is
// not run): Failure reports it and the scheduler ends the request with that
// status.
//
// Thread-safety: implementations are used by the one scheduler thread; their
// Stats() may be called from any thread.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_SOURCE_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_SOURCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "verifysvc/drafts/draft_policy.h"

namespace lookahead::verifysvc {

// What drafting costs, so the budget can charge it: seconds per Propose call
// that asks for any tokens, and per proposed token. draftsvc's retrieval
// costs microseconds (both 0); a model-based source costs its forward passes.
struct DraftCost {
  double seconds_per_call = 0;
  double seconds_per_token = 0;
  // What one token drafted by an assistant model costs at least: its
  // model's one-token pass as the source last measured it (0: unknown, or
  // no assistant runs). The assistant's gate never runs it where this alone
  // outweighs what an accepted token is worth.
  double assistant_seconds_per_token = 0;
};

// The cheaper of two assistant_seconds_per_token values, 0 (unknown) only if
// both are: what several sources' assistants cost at least.
inline double CheaperAssistant(double a, double b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return a < b ? a : b;
}

// A source's health, for Stats and metrics.
struct DraftSourceStats {
  bool available = true;  // its last call succeeded (or none was made)
  int64_t failures = 0;   // calls that failed or timed out
  int64_t reopened = 0;   // sessions reopened after the source restarted
  int64_t open_sessions = 0;
  // A model the source runs in the verifier's process (the verifier's
  // assistant), cumulative: its passes and their seconds, and its gate's
  // decisions per sequence step (ran, or skipped as not paying).
  double model_seconds = 0;
  int64_t model_passes = 0;
  int64_t model_gate_runs = 0;
  int64_t model_gate_skips = 0;
};

// One sequence's share of a Propose call.
struct DraftAsk {
  int64_t handle = 0;  // from Open
  int budget = 0;      // most draft tokens; 0 = none wanted this step
  DraftMode mode = DraftMode::kTrieHierarchical;
  // Sources that must not draft this step (the scheduler's cost gate);
  // bits of engine::DraftSourceTag.
  engine::DraftSourceSet withheld = 0;
  // Asynchronous sources: also send this step's request for the next one
  // (false: only use what already arrived, with no round trip).
  bool refresh = true;
  // For every source after the first: the best score of a first node (a
  // child of the root) in the trees the sources before it proposed this
  // step; 1 where one of those trees is unscored, 0 where they proposed
  // none. The first source gets 1.
  float covered_score = 1;
  // What an accepted draft token saves now (the cheaper of a one-token
  // pass and a token's price at the step's throughput) and what one more
  // draft row costs, in seconds (0 = unknown): for sources that run model
  // passes of their own.
  double token_seconds = 0;
  double row_seconds = 0;
};

// What the verify pass computed at a verified tree (Token Recycling): the
// model's k most likely next tokens at the root and at every draft node,
// accepted or not. The root is the sequence's last token before the step's
// emitted tokens.
struct VerifiedPredictions {
  // The verified draft nodes, as in engine::DraftTree: node i is tokens[i]
  // with parent parents[i] in [-1, i) (-1: the root).
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;
  int k = 0;  // >= 1
  // top_tokens: (tokens.size() + 1, k) row-major, best first; row 0 is the
  // root, row i + 1 node i.
  std::vector<int32_t> top_tokens;
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;

  // "trie", "ngram", "assistant": the source's name in logs and metrics.
  virtual std::string name() const = 0;

  // Starts drafting for a sequence with this prompt under `policy`; returns
  // its handle, or 0 if this source will not draft it. Never blocks on I/O.
  virtual int64_t Open(const DraftPolicy& policy,
                       absl::Span<const int32_t> prompt) = 0;

  // The sequence emitted `tokens` (in order, after everything before).
  virtual void Observe(int64_t handle, absl::Span<const int32_t> tokens) = 0;

  // True iff the source uses ObserveVerified for this sequence (computing
  // the predictions costs a top-k over the verify logits).
  virtual bool WantsPredictions(int64_t handle) const { return false; }
  // The model's predictions at the tree verified after the sequence's last
  // observed token. Called after the verify pass and before Observe of that
  // step's emitted tokens.
  virtual void ObserveVerified(int64_t handle,
                               const VerifiedPredictions& predictions) {}

  // N-grams (the model's own guesses at 2 or more consecutive tokens) the
  // sequence's Jacobi lookahead window completed this step, for an n-gram
  // pool; sources without one ignore them.
  virtual void ObserveNgrams(int64_t handle,
                             absl::Span<const std::vector<int32_t>> ngrams) {}

  // OK, or why the sequence can never be drafted as its policy asks (e.g.
  // FAILED_PRECONDITION: a requested source is not served); then the
  // scheduler ends the request with this status. Set by Propose, or by the
  // source's answer to Open.
  virtual absl::Status Failure(int64_t handle) const {
    return absl::OkStatus();
  }

  // True iff what Open started has answered whether the source serves the
  // sequence as asked (so that Failure reports a refusal), or never will
  // (the handle is unknown or closing). Never blocks: the drafting layer
  // polls it before a sequence's first token, only for requests that named
  // their sources. Default: true.
  virtual bool OpenAnswered(int64_t handle) const { return true; }
  // Blocks until OpenAnswered or until `deadline`. Default: returns at once.
  virtual void WaitOpened(int64_t handle, absl::Time deadline) const {}

  // Returns one tree per ask (empty when the source has nothing, fails or
  // was not asked for tokens), each of at most ask.budget tokens, to verify
  // after the sequence's last observed token. Sets *called iff it did work
  // worth timing as a draft call (an RPC the step waited for); a model run
  // in process reports its passes in Stats() instead, because its own gate
  // charges them only to the steps it runs in.
  virtual std::vector<engine::DraftTree> Propose(
      absl::Span<const DraftAsk> asks, bool* called) = 0;

  // The sequence ended; its handle is invalid afterwards.
  virtual void Close(int64_t handle) = 0;

  virtual DraftCost cost() const = 0;
  virtual DraftSourceStats Stats() const = 0;
  // Asynchronous sources: the seconds of each call (a round trip) that
  // completed since the last TakeCallSeconds, for the metrics; a call that
  // Propose waited for is reported through its `called` instead.
  virtual std::vector<double> TakeCallSeconds() { return {}; }
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_SOURCE_H_
