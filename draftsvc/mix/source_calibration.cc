#include "draftsvc/mix/source_calibration.h"

#include <algorithm>

namespace lookahead::draftsvc {

int CalibrationTable::DepthBucket(int32_t depth) {
  return std::clamp(depth, 1, kDepthBuckets) - 1;
}

int CalibrationTable::RankBucket(int32_t rank) {
  return std::clamp(rank, 0, kRankBuckets - 1);
}

int CalibrationTable::MatchBucket(int32_t match) {
  if (match <= 1) return 0;
  if (match == 2) return 1;
  if (match <= 4) return 2;
  return match <= 8 ? 3 : 4;
}

CalibrationTable CalibrationTable::Prior() {
  CalibrationTable table;
  const float base[kNumCandidateSources] = {0.6f, 0.5f, 0.35f, 0.5f};
  for (int s = 0; s < kNumCandidateSources; ++s) {
    for (int d = 0; d < kDepthBuckets; ++d) {
      for (int r = 0; r < kRankBuckets; ++r) {
        table.rates_[s][d][r].fill(base[s] / static_cast<float>(1 + r));
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
                       [CalibrationTable::RankBucket(o.rank)]
                       [CalibrationTable::MatchBucket(o.match)];
    cell.proposed = cell.proposed * options_.decay + 1.0;
    cell.accepted = cell.accepted * options_.decay + (o.accepted ? 1.0 : 0.0);
    ++totals_[s].judged;
    if (o.accepted) ++totals_[s].accepted;
  }
}

void SourceCalibration::CountProposed(
    const std::array<int64_t, kNumCandidateSources>& nodes) {
  absl::MutexLock lock(&mu_);
  for (int s = 0; s < kNumCandidateSources; ++s)
    totals_[s].proposed += nodes[s];
}

CalibrationTable SourceCalibration::Snapshot() const {
  CalibrationTable table = prior_;
  const double strength = options_.prior_strength;
  absl::MutexLock lock(&mu_);
  for (int s = 0; s < kNumCandidateSources; ++s) {
    const CandidateSource source = static_cast<CandidateSource>(s);
    for (int d = 0; d < CalibrationTable::kDepthBuckets; ++d) {
      for (int r = 0; r < CalibrationTable::kRankBuckets; ++r) {
        for (int m = 0; m < CalibrationTable::kMatchBuckets; ++m) {
          const Cell& cell = cells_[s][d][r][m];
          if (cell.proposed <= 0) continue;
          const double prior = prior_.rate(source, d + 1, r);
          table.set_rate(
              source, d, r, m,
              static_cast<float>((cell.accepted + strength * prior) /
                                 (cell.proposed + strength)));
        }
      }
    }
  }
  return table;
}

SourceTotals SourceCalibration::totals(CandidateSource source) const {
  absl::MutexLock lock(&mu_);
  return totals_[static_cast<int>(source)];
}

std::vector<float> SourceCalibration::DepthAcceptance(
    CandidateSource source) const {
  const int s = static_cast<int>(source);
  const double strength = options_.prior_strength;
  std::vector<float> out;
  absl::MutexLock lock(&mu_);
  for (int d = 0; d < CalibrationTable::kDepthBuckets; ++d) {
    Cell pooled;
    for (const Cell& cell : cells_[s][d][0]) {
      pooled.proposed += cell.proposed;
      pooled.accepted += cell.accepted;
    }
    const double prior = prior_.rate(source, d + 1, 0);
    out.push_back(static_cast<float>(
        pooled.proposed <= 0 ? prior
                             : (pooled.accepted + strength * prior) /
                                   (pooled.proposed + strength)));
  }
  return out;
}

}  // namespace lookahead::draftsvc
