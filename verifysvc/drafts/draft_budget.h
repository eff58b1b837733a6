// Draft budget: how many draft tokens each running sequence gets in one
// decoding step, so that drafts pay for themselves.
//
// A forward pass over n tokens costs StepCostModel::Seconds(n) (measured on
// the serving machine at start: on a CPU it grows with n, on a GPU it is
// nearly flat up to the critical length). A sequence's drafts are worth the
// tokens they are expected to add, estimated from its recent acceptance.
// AllocateDraftTokens picks the split that maximizes expected emitted tokens
// per second of the step, so a sequence whose drafts keep failing gets 0 and
// the step costs what plain decoding costs. Pure functions; thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_BUDGET_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_BUDGET_H_

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "verifysvc/drafts/draft_source.h"

namespace lookahead::verifysvc {

class StepCostModel {
 public:
  // `points`: (tokens in the pass, seconds), tokens >= 1 and strictly
  // increasing, seconds > 0. INVALID_ARGUMENT otherwise. Seconds that dip
  // as tokens grow are pooled to their mean: the model is non-decreasing.
  static absl::StatusOr<StepCostModel> Create(
      std::vector<std::pair<int, double>> points);

  // Piecewise-linear through the points; below the first point its cost,
  // beyond the last the last segment's slope extended.
  double Seconds(int tokens) const;
  // Folds in a pass just timed: the point nearest `tokens` (within a
  // quarter of its token count) moves `weight` of the way to `seconds`
  // (the step clipped to half the point's value, so one outlier cannot
  // swing it), so the model follows the machine's load. A point never
  // observed follows the observed ones: on the line between two of them,
  // beyond them its start value scaled as the nearest one's was; the
  // points on either side are clamped to keep the model non-decreasing.
  // Thread-compatible.
  void Observe(int tokens, double seconds, double weight = 0.1);
  const std::vector<std::pair<int, double>>& points() const { return points_; }

 private:
  explicit StepCostModel(std::vector<std::pair<int, double>> points)
      : points_(std::move(points)), seen_(points_.size(), false) {
    for (const auto& point : points_) start_.push_back(point.second);
  }

  std::vector<std::pair<int, double>> points_;
  std::vector<double> start_;  // Per point: its value at Create.
  std::vector<bool> seen_;     // Per point: Observe moved it.
};

// What the allocator knows of one decoding sequence.
struct DraftCandidate {
  // Most draft tokens it may get this step (its request's decoding length,
  // the room left in its cache); 0 = none.
  int cap = 0;
  // Draft tokens it must get (a probe of a sequence that got none for a
  // while, so a changed text can win drafts back); <= cap.
  int floor = 0;
  // Draft quality q: a draft of d tokens is expected to add q * ln(1 + d)
  // accepted tokens (a wider tree adds ever less likely branches). One
  // number for every size, so what a 1-token draft shows carries over to a
  // 16-token one; see QualityOf.
  double quality = 0;
  // Deepest branch the drafts have: no draft adds more tokens; 0 = no bound.
  int depth = 0;
};

// Expected accepted draft tokens for a draft of `tokens` tokens:
// quality * ln(1 + tokens), never above `tokens` or the depth.
double ExpectedAccepted(const DraftCandidate& candidate, int tokens);

// The quality one drafted step showed: `accepted` of `verified` (>= 1) draft
// tokens accepted. Callers average it over recent steps.
double QualityOf(int accepted, int verified);

// Returns per candidate the draft tokens to request (floor <= x <= cap),
// with sum(x) <= max_draft_tokens (floors win over that bound), maximizing
//   (candidates + sum ExpectedAccepted) / step seconds, where a step costs
//   cost.Seconds(base_tokens + sum x) + drafting: draft.seconds_per_call if
//   sum x > 0, plus draft.seconds_per_token * sum x.
// `base_tokens`: tokens the pass holds anyway (one root per decoding
// sequence plus any prefill chunks). `draft`: the sources' cost hint (zero
// for draftsvc's tries, whose retrieval takes microseconds).
std::vector<int> AllocateDraftTokens(
    const StepCostModel& cost, int base_tokens,
    absl::Span<const DraftCandidate> candidates, int max_draft_tokens,
    const DraftCost& draft = {});

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_BUDGET_H_
