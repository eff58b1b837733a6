#include "verifysvc/drafts/draft_budget.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <queue>

#include "absl/strings/str_cat.h"

namespace lookahead::verifysvc {

absl::StatusOr<StepCostModel> StepCostModel::Create(
    std::vector<std::pair<int, double>> points) {
  if (points.empty()) {
    return absl::InvalidArgumentError("step cost model needs >= 1 point");
  }
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].first < 1 || !(points[i].second > 0) ||
        (i > 0 && points[i].first <= points[i - 1].first)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step cost point ", i, " (", points[i].first, " tokens, ",
          points[i].second,
          " s) must have tokens >= 1, increasing, and seconds > 0"));
    }
  }
  // A pass over more tokens never costs less: a measured dip is noise.
  // Adjacent points out of order are pooled into their mean (isotonic
  // regression), so no size looks cheaper than a smaller one.
  std::vector<std::pair<double, int>> pools;  // (mean, points pooled)
  for (const auto& [tokens, seconds] : points) {
    pools.emplace_back(seconds, 1);
    while (pools.size() > 1 &&
           pools[pools.size() - 2].first > pools.back().first) {
      const auto [mean, count] = pools.back();
      pools.pop_back();
      auto& [prev_mean, prev_count] = pools.back();
      prev_mean =
          (prev_mean * prev_count + mean * count) / (prev_count + count);
      prev_count += count;
    }
  }
  size_t i = 0;
  for (const auto& [mean, count] : pools) {
    for (int c = 0; c < count; ++c) points[i++].second = mean;
  }
  return StepCostModel(std::move(points));
}

double StepCostModel::Seconds(int tokens) const {
  if (tokens <= points_.front().first || points_.size() == 1) {
    return points_.front().second;
  }
  size_t hi = 1;
  while (hi + 1 < points_.size() && points_[hi].first < tokens) ++hi;
  const auto& [x0, y0] = points_[hi - 1];
  const auto& [x1, y1] = points_[hi];
  const double y = y0 + (y1 - y0) * (tokens - x0) / double(x1 - x0);
  return std::max(y, points_.front().second);
}

void StepCostModel::Observe(int tokens, double seconds, double weight) {
  if (!(seconds > 0)) return;
  auto nearest = std::min_element(
      points_.begin(), points_.end(), [tokens](const auto& a, const auto& b) {
        return std::abs(a.first - tokens) < std::abs(b.first - tokens);
      });
  if (std::abs(nearest->first - tokens) > nearest->first / 4) return;
  // A pass slowed by a burst of other work (a scrape, an RPC, another
  // process) moves the point by at most weight / 2 of its value, so spikes
  // do not make one size look cheap next to another; sustained load still
  // moves every size it is seen at.
  const double change = std::clamp(seconds - nearest->second,
                                   -nearest->second / 2, nearest->second / 2);
  nearest->second += weight * change;
  seen_[nearest - points_.begin()] = true;
  // The sizes not seen since the start: their start-up values may be off
  // (start-up passes run at another speed than served ones), and a size
  // the budget then avoids as too dear would never be seen to correct it.
  // Between two seen sizes one follows the line between them; beyond the
  // seen ones it keeps its start-up value scaled as the nearest seen one's.
  const int n = static_cast<int>(points_.size());
  for (int i = 0; i < n; ++i) {
    if (seen_[i]) continue;
    int lo = i - 1, hi = i + 1;  // the nearest seen points on either side
    while (lo >= 0 && !seen_[lo]) --lo;
    while (hi < n && !seen_[hi]) ++hi;
    if (lo >= 0 && hi < n) {
      const auto& [x0, y0] = points_[lo];
      const auto& [x1, y1] = points_[hi];
      points_[i].second = y0 + (y1 - y0) * (points_[i].first - x0) / (x1 - x0);
    } else {
      const int near = lo >= 0 ? lo : hi;
      points_[i].second = start_[i] * points_[near].second / start_[near];
    }
  }
  // The curve stays non-decreasing: a size seen costing this much bounds
  // the sizes below it from above and those above it from below.
  const double moved = nearest->second;
  for (auto p = points_.begin(); p != nearest; ++p) {
    p->second = std::min(p->second, moved);
  }
  for (auto p = nearest + 1; p != points_.end(); ++p) {
    p->second = std::max(p->second, moved);
  }
}

double ExpectedAccepted(const DraftCandidate& candidate, int tokens) {
  if (tokens <= 0 || candidate.quality <= 0) return 0;
  double bound = tokens;
  if (candidate.depth > 0) bound = std::min(bound, double(candidate.depth));
  return std::min(candidate.quality * std::log1p(double(tokens)), bound);
}

double QualityOf(int accepted, int verified) {
  return accepted / std::log1p(double(std::max(verified, 1)));
}

std::vector<int> AllocateDraftTokens(
    const StepCostModel& cost, int base_tokens,
    absl::Span<const DraftCandidate> candidates, int max_draft_tokens,
    const DraftCost& draft) {
  // Seconds of a step with `drafted` draft tokens in the pass.
  auto step_seconds = [&](int drafted) {
    const double drafting =
        drafted > 0 ? draft.seconds_per_call +
                          draft.seconds_per_token * static_cast<double>(drafted)
                    : 0.0;
    return cost.Seconds(base_tokens + drafted) + drafting;
  };
  const int n = static_cast<int>(candidates.size());
  std::vector<int> given(n, 0);
  double expected = n;  // Every decoding sequence emits its bonus token.
  int total = 0;
  for (int i = 0; i < n; ++i) {
    given[i] = std::clamp(candidates[i].floor, 0, candidates[i].cap);
    expected += ExpectedAccepted(candidates[i], given[i]);
    total += given[i];
  }
  // Greedy by marginal gain is optimal for each total because the gains are
  // concave; remember the best total along the way.
  auto gain = [&](int i) {
    return ExpectedAccepted(candidates[i], given[i] + 1) -
           ExpectedAccepted(candidates[i], given[i]);
  };
  using Entry = std::pair<double, int>;  // (marginal gain, candidate)
  std::priority_queue<Entry> heap;
  for (int i = 0; i < n; ++i) {
    if (given[i] < candidates[i].cap && gain(i) > 0) heap.push({gain(i), i});
  }
  std::vector<int> order;  // Candidate receiving each extra token.
  double best_rate = expected / step_seconds(total);
  size_t best_extra = 0;
  while (!heap.empty() && total < max_draft_tokens) {
    const auto [g, i] = heap.top();
    heap.pop();
    ++given[i];
    ++total;
    expected += g;
    order.push_back(i);
    const double rate = expected / step_seconds(total);
    if (rate > best_rate) {
      best_rate = rate;
      best_extra = order.size();
    }
    if (given[i] < candidates[i].cap && gain(i) > 0) heap.push({gain(i), i});
  }
  for (size_t k = order.size(); k > best_extra; --k) --given[order[k - 1]];
  return given;
}

}  // namespace lookahead::verifysvc
