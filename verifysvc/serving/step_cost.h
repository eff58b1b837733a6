// MeasureStepCost: times the model's forward pass by tokens on the serving
// machine, the basis of the draft budget (StepCostModel). Blocking: call at
// start, before serving.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_STEP_COST_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_STEP_COST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/llama_model.h"
#include "verifysvc/drafts/draft_budget.h"

namespace lookahead::verifysvc {

// Times one forward pass of a chain of n tokens after `context` cached
// tokens, for each n in `sizes` (ascending): the median of `repeats` passes
// after a warm-up one. Errors: the model's (e.g. RESOURCE_EXHAUSTED past its
// context).
absl::StatusOr<StepCostModel> MeasureStepCost(const engine::LlamaModel& model,
                                              const std::vector<int>& sizes,
                                              int context, int repeats);

// "1:14.7 2:14.5 ... 64:123.8": milliseconds by tokens, for the log.
std::string DescribeStepCost(const StepCostModel& cost);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_STEP_COST_H_
