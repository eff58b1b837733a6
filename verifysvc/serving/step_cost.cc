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
  std::vector<std::pair<int, double>> points;
  for (int n : sizes) {
    engine::TreeInput in = engine::ChainInput(
        cache.get(), absl::MakeConstSpan(tokens).subspan(context, n));
    in.last_logits_only = false;  // A verify pass needs every node's logits.
    double best = 0;
    for (int r = 0; r <= repeats; ++r) {  // r = 0 warms up.
      const absl::Time start = absl::Now();
      RETURN_IF_ERROR(model.Forward(absl::MakeConstSpan(&in, 1)).status());
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      if (r == 1 || (r > 1 && seconds < best)) best = seconds;
    }
    cache->DiscardPending();
    points.emplace_back(n, std::max(best, 1e-6));
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
