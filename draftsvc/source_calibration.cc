#include "draftsvc/source_calibration.h"

#include <algorithm>

namespace lookahead::draftsvc {

int CalibrationTable::DepthBucket(int32_t depth) {
  return std::clamp(depth, 1, kDepthBuckets) - 1;
}

int CalibrationTable::RankBucket(int32_t rank) {
  return std::clamp(rank, 0, kRankBuckets - 1);
}

CalibrationTable CalibrationTable::Prior() {
  CalibrationTable table;
  const float base[kNumDraftSources] = {0.6f, 0.5f, 0.35f, 0.5f};
  for (int s = 0; s < kNumDraftSources; ++s) {
    for (int d = 0; d < kDepthBuckets; ++d) {
      for (int r = 0; r < kRankBuckets; ++r) {
        table.rates_[s][d][r] = base[s] / static_cast<float>(1 + r);
      }
    }
  }
  return table;
}

SourceCalibration::SourceCalibration(CalibrationOptions options)
    : options_(options), prior_(CalibrationTable::Prior()) {}

void SourceCalibration::Observe(absl::Span<const Observation> observations) {
  absl::MutexLock lock(&mu_);
  for (const Observation& o : observations) {
    const int s = static_cast<int>(o.source);
    Cell& cell = cells_[s][CalibrationTable::DepthBucket(o.depth)]
                       [CalibrationTable::RankBucket(o.rank)];
    cell.proposed = cell.proposed * options_.decay + 1.0;
    cell.accepted = cell.accepted * options_.decay + (o.accepted ? 1.0 : 0.0);
    ++totals_[s].judged;
    if (o.accepted) ++totals_[s].accepted;
  }
}

void SourceCalibration::CountProposed(
    const std::array<int64_t, kNumDraftSources>& nodes) {
  absl::MutexLock lock(&mu_);
  for (int s = 0; s < kNumDraftSources; ++s) totals_[s].proposed += nodes[s];
}

CalibrationTable SourceCalibration::Snapshot() const {
  CalibrationTable table = prior_;
  const double strength = options_.prior_strength;
  absl::MutexLock lock(&mu_);
  for (int s = 0; s < kNumDraftSources; ++s) {
    const DraftSource source = static_cast<DraftSource>(s);
    for (int d = 0; d < CalibrationTable::kDepthBuckets; ++d) {
      for (int r = 0; r < CalibrationTable::kRankBuckets; ++r) {
        const Cell& cell = cells_[s][d][r];
        if (cell.proposed <= 0) continue;
        const double prior = prior_.rate(source, d + 1, r);
        table.set_rate(source, d, r,
                       static_cast<float>((cell.accepted + strength * prior) /
                                          (cell.proposed + strength)));
      }
    }
  }
  return table;
}

SourceTotals SourceCalibration::totals(DraftSource source) const {
  absl::MutexLock lock(&mu_);
  return totals_[static_cast<int>(source)];
}

std::vector<float> SourceCalibration::DepthAcceptance(
    DraftSource source) const {
  const CalibrationTable table = Snapshot();
  std::vector<float> out;
  for (int d = 1; d <= CalibrationTable::kDepthBuckets; ++d) {
    out.push_back(table.rate(source, d, 0));
  }
  return out;
}

}  // namespace lookahead::draftsvc
