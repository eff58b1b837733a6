#include "verifysvc/drafts/draft_trim.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace lookahead::verifysvc {
namespace {

// The drafts' scores made usable: clamped to [0, 1], scaled, and never
// above an earlier node's.
std::vector<std::vector<double>> Gains(absl::Span<const ScoredDraft> drafts) {
  std::vector<std::vector<double>> gains(drafts.size());
  for (size_t s = 0; s < drafts.size(); ++s) {
    double ceiling = 1.0;
    const double scale = std::max(0.0, drafts[s].scale);
    for (float raw : drafts[s].scores) {
      double p = std::isnan(raw) ? 0.0 : std::clamp<double>(raw, 0.0, 1.0);
      p = std::min(ceiling, std::min(1.0, p * scale));
      ceiling = p;
      gains[s].push_back(p);
    }
  }
  return gains;
}

}  // namespace

std::vector<int> TrimByScore(const StepCostModel& cost, int base_tokens,
                             absl::Span<const ScoredDraft> drafts,
                             int max_draft_tokens) {
  const std::vector<std::vector<double>> gains = Gains(drafts);
  std::vector<int> keep(drafts.size(), 0);
  double expected = static_cast<double>(drafts.size());
  int total = 0;
  for (size_t s = 0; s < drafts.size(); ++s) {
    keep[s] = std::clamp(drafts[s].floor, 0,
                         static_cast<int>(drafts[s].scores.size()));
    for (int i = 0; i < keep[s]; ++i) expected += gains[s][i];
    total += keep[s];
  }
  // Every node past the floors, best first; ties keep the tree order.
  std::vector<std::pair<double, std::pair<size_t, int>>> rest;
  for (size_t s = 0; s < drafts.size(); ++s) {
    for (int i = keep[s]; i < static_cast<int>(gains[s].size()); ++i) {
      rest.push_back({gains[s][i], {s, i}});
    }
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) {
    return a.first > b.first;
  });
  double best_rate = expected / cost.Seconds(base_tokens + total);
  std::vector<int> best = keep;
  const int floors = total;
  for (const auto& [gain, where] : rest) {
    if (total - floors >= max_draft_tokens || gain <= 0) break;
    // Non-increasing gains per draft make this node the next of its draft.
    keep[where.first] = where.second + 1;
    ++total;
    expected += gain;
    const double rate = expected / cost.Seconds(base_tokens + total);
    if (rate > best_rate) {
      best_rate = rate;
      best = keep;
    }
  }
  return best;
}

}  // namespace lookahead::verifysvc
