// DraftsvcSource: the DraftSource backed by draftsvc's token tries (the
// session's prompt trie and its namespace's global output trie), through
// DraftSessions (sessions kept alive across draftsvc outages and restarts).
//
// Emitted tokens are buffered per sequence and reported with the next
// Propose that asks draftsvc for drafts; a sequence that wants none still
// reports once kMaxUnreportedTokens have piled up (keeping the global trie
// fresh and noticing a restarted draftsvc), and Close reports the rest, so
// every answer reaches the global trie.
//
// Predictions (ObserveVerified) are wanted iff the request may draft from
// the n-gram pool (its sources include kNgram or are the default). Each is
// packed as a PredictionTree whose root_after is the number of tokens
// buffered at that moment (its root is the last of them), buffered beside
// the tokens (at most kMaxPredictionTrees per sequence, oldest dropped) and
// sent with them. Jacobi n-grams (ObserveNgrams) are buffered the same way
// (2..kMaxNgramTokens ids each, at most kMaxStepNgrams, oldest dropped).
//
// Asynchronous mode (DraftSessionsOptions::synchronous false, verifysvc's
// default): no step waits on draftsvc. Propose sends the step's Step
// (reports and asks) with StepAsync and returns the trees of the answers
// that arrived meanwhile: an answer was asked before the previous step's
// pass, for the context then, so it is walked along the tokens the
// sequence emitted since (WalkDraft) and its subtree below them, with its
// scores conditioned on that path, is this step's tree. A step whose
// budget wants a draft asks (DraftAsk::refresh) for kAsyncAskFactor times
// that budget (at least kMinAsyncAsk), so the subtree left after a long
// accepted path still fills the next budget. An
// empty tree is `pending` (no miss) unless the answer it came from was
// asked at the previous step.
//
// Thread-safety: Open, Observe, Propose and Close belong to the scheduler
// thread; Stats is thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_DRAFTSVC_SOURCE_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_DRAFTSVC_SOURCE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "verifysvc/drafts/draft_source.h"
#include "verifysvc/draftsvc_client/draftsvc_sessions.h"

namespace lookahead::verifysvc {

class DraftsvcSource : public DraftSource {
 public:
  // Accepted tokens a sequence may hold back from draftsvc while it wants
  // no drafts: at most one report-only round trip per this many steps.
  static constexpr int kMaxUnreportedTokens = 64;
  // Prediction trees a sequence buffers between two Steps (draftsvc's
  // --max_prediction_trees default); older ones are dropped.
  static constexpr int kMaxPredictionTrees = 8;
  // N-grams a sequence buffers between two Steps, and the longest sent
  // (draftsvc's --max_step_ngrams and --ngram_max_tokens defaults, past
  // which it refuses the whole entry).
  static constexpr int kMaxStepNgrams = 64;
  static constexpr int kMaxNgramTokens = 8;
  // Asynchronous mode: an answer is asked this many times the budget
  // (capped at kMaxAsyncAsk), and walked along at most kMaxWalk tokens.
  static constexpr int kAsyncAskFactor = 2;
  static constexpr int kMinAsyncAsk = 8;
  static constexpr int kMaxAsyncAsk = 128;
  static constexpr int kMaxWalk = 64;

  // A source over a channel to draftsvc at `target` (e.g.
  // "127.0.0.1:50061"); does not wait for it: an absent draftsvc only means
  // no drafts. `vocab_size` bounds the token ids of its trees.
  static std::unique_ptr<DraftsvcSource> Connect(
      const std::string& target, int32_t vocab_size,
      const DraftClientOptions& client_options,
      DraftSessionsOptions session_options);

  std::string name() const override { return "trie"; }
  int64_t Open(const DraftPolicy& policy,
               absl::Span<const int32_t> prompt) override;
  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override;
  bool WantsPredictions(int64_t handle) const override;
  void ObserveVerified(int64_t handle,
                       const VerifiedPredictions& predictions) override;
  void ObserveNgrams(int64_t handle,
                     absl::Span<const std::vector<int32_t>> ngrams) override;
  absl::Status Failure(int64_t handle) const override;
  bool OpenAnswered(int64_t handle) const override;
  void WaitOpened(int64_t handle, absl::Time deadline) const override;
  std::vector<engine::DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                         bool* called) override;
  void Close(int64_t handle) override;
  // Retrieval costs microseconds (0); the assistant's passes as draftsvc
  // measured them.
  DraftCost cost() const override {
    DraftCost cost;
    cost.assistant_seconds_per_token = client_->assistant_seconds_per_token();
    return cost;
  }
  DraftSourceStats Stats() const override;
  std::vector<double> TakeCallSeconds() override {
    return sessions_->TakeCallSeconds();
  }
  // True iff an asynchronous Step has not been answered yet.
  bool StepInFlight() const { return sessions_->StepInFlight(); }

 private:
  DraftsvcSource(std::unique_ptr<DraftClient> client,
                 std::unique_ptr<DraftSessions> sessions, bool synchronous)
      : client_(std::move(client)),
        synchronous_(synchronous),
        sessions_(std::move(sessions)) {}

  std::vector<engine::DraftTree> ProposeAsync(absl::Span<const DraftAsk> asks);
  // The Step entries for `asks` (in `which`, their indices), taking each
  // sequence's buffered tokens, predictions and n-grams; none if no ask
  // wants a draft and no sequence has kMaxUnreportedTokens waiting.
  std::vector<DraftSessions::StepEntry> Entries(absl::Span<const DraftAsk> asks,
                                                std::vector<size_t>* which);

  const std::unique_ptr<DraftClient> client_;
  const bool synchronous_;
  struct Pending {
    bool wants_predictions = false;
    std::vector<int32_t> fresh;  // Emitted since the last report.
    // Predictions since the last report, root_after relative to `fresh`.
    std::deque<lookahead::v1::PredictionTree> predictions;
    std::deque<std::vector<int32_t>> ngrams;  // Harvested since then.
    // Asynchronous mode: the prompt's and every emitted token's count, the
    // last kMaxWalk of them, and the latest answer (root_position < 0:
    // none) whose source_seconds are charged with its first use.
    int64_t position = 0;
    std::deque<int32_t> recent;
    DraftSessions::Answer answer{0, -1, {}};
    // Its position at the previous Propose (-1: none yet).
    int64_t previous_position = -1;
  };

  const std::unique_ptr<DraftSessions> sessions_;  // uses client_
  // Per open handle.
  std::map<int64_t, Pending> pending_;
};

// The subtree of `tree` (a draft after some root) below the path `walk`
// (tokens that followed that root, in order): its nodes in their order,
// re-rooted, with scores divided by the path's last node's (the
// probability of each given the path was accepted, at most 1). Empty if
// the path leaves the tree. An empty walk returns the tree.
engine::DraftTree WalkDraft(const engine::DraftTree& tree,
                            absl::Span<const int32_t> walk);

// `predictions` as a PredictionTree hung after the first `root_after` tokens
// of the Step entry that carries it.
lookahead::v1::PredictionTree PackPredictions(
    const VerifiedPredictions& predictions, int root_after);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_DRAFTSVC_SOURCE_H_
