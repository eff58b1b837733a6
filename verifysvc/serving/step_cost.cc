#include "verifysvc/serving/step_cost.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "engine/model/batch.h"

namespace lookahead::verifysvc {

absl::StatusOr<StepCostModel> MeasureStepCost(const engine::LlamaModel& model,
                                              const std::vector<int>& sizes,
                                              int context, int repeats) {
  const int largest = sizes.empty() ? 1 : sizes.back();
  ASSIGN_OR_RETURN(std::unique_ptr<engine::KvCache> cache,
                   model.NewCache(context + largest + 1));
  std::vector<int32_t> tokens(context + largest);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] =
        static_cast<int32_t>((i * 7919 + 13) % model.config().vocab_size);
  }
  RETURN_IF_ERROR(
      model.Prefill(cache.get(), absl::MakeConstSpan(tokens).first(context))
          .status());
  const auto time_pass = [&](int n) -> absl::StatusOr<double> {
    engine::TreeInput in = engine::ChainInput(
        cache.get(), absl::MakeConstSpan(tokens).subspan(context, n));
    in.last_logits_only = false;  // A verify pass needs every node's logits.
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(model.Forward(absl::MakeConstSpan(&in, 1)).status());
    return absl::ToDoubleSeconds(absl::Now() - start);
  };
  // Warm-up passes of the short sizes first (pages, clocks, the pool's
  // first wake). Then each size in ascending order: a warm-up pass and
  // `repeats` timed ones, the median its cost, so one pass slowed by other
  // work moves no point. Short sizes first, because a long pass slows the
  // short ones after it (here, a 1-token pass timed among 64-token ones
  // read 1.6x what it read among short ones). Start-up passes still read
  // slower than served ones (SmolLM2's 1-token pass: 3.9-5.3 ms against
  // 2.6-3.0 served, on the 2-core Xeon); StepCostModel::Observe brings
  // every size to what the served passes cost.
  for (int n : sizes) {
    if (n <= 8) RETURN_IF_ERROR(time_pass(n).status());
  }
  std::vector<std::vector<double>> seconds(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    RETURN_IF_ERROR(time_pass(sizes[i]).status());
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      ASSIGN_OR_RETURN(double s, time_pass(sizes[i]));
      seconds[i].push_back(s);
    }
  }
  cache->DiscardPending();
  std::vector<std::pair<int, double>> points;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<double>& v = seconds[i];
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    points.emplace_back(sizes[i], std::max(v[v.size() / 2], 1e-6));
  }
  return StepCostModel::Create(std::move(points));
}

std::string DescribeStepCost(const StepCostModel& cost) {
  std::vector<std::string> table;
  for (const auto& [tokens, seconds] : cost.points()) {
    table.push_back(absl::StrFormat("%d:%.1f", tokens, seconds * 1e3));
  }
  return absl::StrJoin(table, " ");
}

}  // namespace lookahead::verifysvc
