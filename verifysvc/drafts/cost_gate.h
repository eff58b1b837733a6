// CostGate: whether a draft mechanism that costs time of its own runs this
// step: the Jacobi window (its scratch rows make the verify pass longer) or
// the assistant model (its passes share the machine and the Step deadline).
// The free sources (the tries, recycled predictions) need no gate: the
// budget sizes their drafts by the cost curve alone.
//
// A mechanism runs iff it pays for itself at the step's current throughput:
//   gain * seconds_per_token >= cost
// and, when the cost is measured rather than known, gain > 0 (a measured
// cost can miss work the verifier does not see).
// gain: tokens it adds per step it runs; cost: seconds it adds per step it
// runs. Both are measured as decayed sums over steps, so credit that comes
// steps after the run that earned it (an n-gram harvested now and accepted
// later; a pre-draft) still counts. Until it has run a few steps the gate
// trusts the caller's bounds: the most it can add per step, and its cost if
// the caller knows it (the window's rows on the measured cost curve) or 0.
// So a window that could not pay even if every n-gram were accepted never
// runs (a 2-core CPU), one on a flat cost curve (a GPU) runs at once and
// stops if its n-grams are not accepted.
//
// A gate that stopped a mechanism it does not know to be hopeless runs it
// again for `probe_steps` steps after `probe_interval` steps off, the
// interval doubling each time the probe does not pay (up to
// max_probe_interval): a changed text or machine load wins it back at a
// bounded cost. Thread-compatible.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_COST_GATE_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_COST_GATE_H_

#include <climits>
#include <cstdint>

namespace lookahead::verifysvc {

struct CostGateOptions {
  // false: every mechanism a request asks for runs every step (tests that
  // must exercise it whatever it costs; ablations).
  bool enabled = true;
  // Per step, the weight the measured sums keep (the horizon is about
  // 1 / (1 - decay) steps).
  double decay = 0.95;
  // Run steps after which measurements replace the bounds.
  int min_runs = 2;
  int probe_interval = 16;
  int max_probe_interval = 512;
  int probe_steps = 3;
};

class CostGate {
 public:
  explicit CostGate(const CostGateOptions& options = {})
      : options_(options), interval_(options.probe_interval) {}

  // Whether the mechanism runs this step. seconds_per_token: what a token
  // costs at the step's current throughput (step seconds / tokens emitted,
  // > 0). known_cost: its cost this step in seconds when the caller knows
  // it, < 0 to use the measured cost. max_gain: the most tokens it can add
  // per step it runs (>= 0). min_cost: what a run costs at least when the
  // cost is measured (the assistant's passes for max_gain tokens, measured
  // where they run, before any run: its first run may cost far more, a
  // prefill of the whole context); the measured cost counts as at least
  // this, and a mechanism that could not pay it even with every token
  // accepted never runs, not even as a probe.
  bool Decide(double seconds_per_token, double known_cost, double max_gain,
              double min_cost = 0);

  // After each step (whether it ran or not): ran = what Decide returned;
  // gain = tokens credited to it this step (accepted tokens it proposed,
  // possibly earned by an earlier run); cost = seconds it was measured to
  // cost this step (0 if the caller charges a known cost).
  void Record(bool ran, double gain, double cost);

  // Takes over what `from` measured (its sums and probe interval, at most
  // `max_interval` steps), not its place in a probe: a new sequence of the
  // same namespace starts from the verdict of the last one instead of its
  // optimistic bounds.
  void Inherit(const CostGate& from, int max_interval = INT_MAX);

  // Measured gain and cost per run step; the bound / 0 before min_runs.
  double gain(double max_gain) const;
  double cost() const;
  int probe_interval() const { return interval_; }
  // Steps it ran so far (inherited ones included).
  int64_t runs() const { return total_runs_; }

 private:
  bool Pays(double seconds_per_token, double known_cost, double max_gain,
            double min_cost) const;

  CostGateOptions options_;
  double runs_ = 0, gains_ = 0, costs_ = 0;  // decayed sums
  int64_t total_runs_ = 0;
  int off_steps_ = 0;
  int probe_left_ = 0;   // steps left in the probe running now
  bool probed_ = false;  // a probe ran since the last regular decision
  int interval_;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_COST_GATE_H_
