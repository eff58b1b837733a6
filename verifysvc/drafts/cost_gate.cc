#include "verifysvc/drafts/cost_gate.h"

#include <algorithm>

namespace lookahead::verifysvc {

double CostGate::gain(double max_gain) const {
  return total_runs_ >= options_.min_runs ? gains_ / runs_ : max_gain;
}

double CostGate::cost() const {
  return total_runs_ >= options_.min_runs ? costs_ / runs_ : 0;
}

bool CostGate::Pays(double seconds_per_token, double known_cost,
                    double max_gain, double min_cost) const {
  const double g = gain(max_gain);
  if (known_cost >= 0) return g * seconds_per_token >= known_cost;
  // A measured cost can miss work done out of the verifier's sight (an
  // assistant prefilling the prompt in draftsvc's background), which still
  // took the shared cores and a draft round trip each step: a mechanism
  // that added nothing does not pay, whatever cost was measured.
  return g > 0 && g * seconds_per_token >= std::max(cost(), min_cost);
}

bool CostGate::Decide(double seconds_per_token, double known_cost,
                      double max_gain, double min_cost) {
  if (!options_.enabled) return true;
  // Hopeless: not even every proposed token accepted would pay.
  const double least = known_cost >= 0 ? known_cost : min_cost;
  if (max_gain * seconds_per_token < least) {
    probe_left_ = 0;
    probed_ = false;
    return false;
  }
  if (probe_left_ > 0) {
    --probe_left_;
    return true;
  }
  const bool pays = Pays(seconds_per_token, known_cost, max_gain, min_cost);
  if (probed_) {
    probed_ = false;
    interval_ = pays ? options_.probe_interval
                     : std::min(2 * interval_, options_.max_probe_interval);
  }
  if (pays) {
    off_steps_ = 0;
    return true;
  }
  if (++off_steps_ < interval_) return false;
  off_steps_ = 0;
  probed_ = true;
  probe_left_ = options_.probe_steps - 1;
  return true;
}

void CostGate::Inherit(const CostGate& from, int max_interval) {
  runs_ = from.runs_;
  gains_ = from.gains_;
  costs_ = from.costs_;
  total_runs_ = from.total_runs_;
  interval_ = std::min(from.interval_, std::max(1, max_interval));
  off_steps_ = 0;
  probe_left_ = 0;
  probed_ = false;
}

void CostGate::Record(bool ran, double gain, double cost) {
  if (ran) ++total_runs_;
  runs_ = options_.decay * runs_ + (ran ? 1 : 0);
  gains_ = options_.decay * gains_ + gain;
  costs_ = options_.decay * costs_ + cost;
}

}  // namespace lookahead::verifysvc
