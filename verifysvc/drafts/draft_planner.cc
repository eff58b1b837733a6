#include "verifysvc/drafts/draft_planner.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "verifysvc/drafts/draft_trim.h"

namespace lookahead::verifysvc {

DraftPlanner::DraftPlanner(DraftFanout* fanout, const StepCostModel* cost,
                           int32_t vocab_size, DrafterOptions options,
                           DraftObserver* observer) {
  context_.fanout = fanout;
  context_.cost = cost;
  context_.observer = observer;
  context_.vocab_size = vocab_size;
  context_.startup_plain_seconds = cost->Seconds(1);
  context_.options = std::move(options);
}

std::unique_ptr<SequenceDrafter> DraftPlanner::Open(
    const DraftPolicy& policy, const engine::SamplingParams& sampling,
    absl::Span<const int32_t> prompt) {
  const absl::Time now = absl::Now();
  const int64_t handle = context_.fanout->Open(policy, prompt);
  if (handle == 0) return nullptr;
  auto drafter = std::make_unique<SequenceDrafter>(&context_, policy, sampling,
                                                   prompt, handle, now);
  auto verdict = verdicts_.find(policy.name_space);
  if (verdict != verdicts_.end()) {
    drafter->window_gate_.Inherit(verdict->second.window);
    drafter->assistant_gate_.Inherit(verdict->second.assistant);
    for (int k = 0; k < 2; ++k) {
      if (verdict->second.pacers[k].has_value()) {
        drafter->pacers_[k].Inherit(*verdict->second.pacers[k]);
      }
    }
  } else if (assistant_prior_.runs() > 0) {
    // A namespace new to this verifier: the assistant's cost and gain are
    // the model's and the machine's more than the text's, so start from
    // what it measured elsewhere. A namespace where it pays finds out at
    // its first probe, after at most kPriorProbeIntervals probe intervals.
    // (Measured on Qwen2.5-Coder-1.5B with its 0.5B: probing at the start
    // of every new chat request made draftsvc prefill each prompt, 0.36-
    // 0.54 s of its CPU per 4 requests instead of 0.03-0.07 s, on the
    // verifier's two cores.)
    const int max_interval =
        kPriorProbeIntervals * context_.options.gate.probe_interval;
    drafter->assistant_gate_.Inherit(assistant_prior_, max_interval);
  }
  return drafter;
}

void DraftPlanner::Close(SequenceDrafter* drafter) {
  if (drafter->handle_ == 0) return;
  KeepVerdict(*drafter);
  context_.fanout->Close(drafter->handle_);
  drafter->handle_ = 0;
}

void DraftPlanner::KeepVerdict(const SequenceDrafter& drafter) {
  const DraftPolicy& policy = drafter.policy_;
  const bool window = SequenceDrafter::ScratchRowsOf(policy) > 0 &&
                      drafter.window_gate_.runs() > 0;
  const bool assistant = policy.MayUse(engine::DraftSourceTag::kAssistant) &&
                         drafter.assistant_gate_.runs() > 0;
  if (assistant) assistant_prior_.Inherit(drafter.assistant_gate_);
  // Pacing carries over only from a sequence whose drafts never held over
  // a few probes' worth of steps: a namespace of text its sources cannot
  // match (random tokens, a high temperature) stops paying the prior's asks
  // and early probes on every request, while in one whose drafts hold at
  // all each request starts from the prior (a new prompt may be a new
  // document to copy from; measured, inheriting every verdict cost RAG and
  // code EDL).
  // A sequence too short to tell leaves the verdict as it is.
  const bool held = drafter.accepted_draft_tokens_ > 0;
  const bool hopeless =
      !held && drafter.steps_ >= 2 * context_.options.pacing.probe_interval;
  auto kept = verdicts_.find(policy.name_space);
  const bool pacing = context_.options.inherit_pacing &&
                      (hopeless || (held && kept != verdicts_.end() &&
                                    kept->second.pacers[0].has_value()));
  if (!window && !assistant && !pacing) return;
  // Bounded: namespaces come from clients.
  constexpr size_t kMaxVerdicts = 1024;
  if (verdicts_.size() >= kMaxVerdicts &&
      verdicts_.count(policy.name_space) == 0) {
    verdicts_.erase(verdicts_.begin());
  }
  Verdict& verdict = verdicts_[policy.name_space];
  if (window) verdict.window.Inherit(drafter.window_gate_);
  if (assistant) verdict.assistant.Inherit(drafter.assistant_gate_);
  for (int k = 0; pacing && k < 2; ++k) {
    if (hopeless) {
      verdict.pacers[k].emplace(drafter.pacers_[k]);
    } else {
      verdict.pacers[k].reset();
    }
  }
}

StepDrafts DraftPlanner::Draft(absl::Span<SequenceDrafter* const> drafters,
                               absl::Span<const int> rooms, int prefill_tokens,
                               int max_step_tokens, double seconds_per_token) {
  StepDrafts step;
  step.drafts.resize(drafters.size());
  // Draft budgets: what pays for itself in this pass.
  std::vector<DraftCandidate> candidates(drafters.size());
  for (size_t i = 0; i < drafters.size(); ++i) {
    if (drafters[i] != nullptr)
      candidates[i] = drafters[i]->Candidate(rooms[i]);
  }
  DraftCost draft_cost = context_.fanout->cost();
  const TokenPrice price{seconds_per_token,
                         draft_cost.assistant_seconds_per_token};
  // Scratch rows ride in the same pass: they are charged to the step
  // before the drafts are sized.
  const int roots = static_cast<int>(drafters.size()) + prefill_tokens;
  for (SequenceDrafter* drafter : drafters) {
    if (drafter == nullptr) continue;
    step.scratch_rows += drafter->ScratchRows(roots + step.scratch_rows, price);
  }
  const int base = roots + step.scratch_rows;
  if (context_.options.charge_draft_calls) {
    draft_cost.seconds_per_call += draft_call_seconds_;
  }
  const std::vector<int> budget =
      AllocateDraftTokens(*context_.cost, base, candidates,
                          std::max(0, max_step_tokens - base), draft_cost);
  // ONE call to the sources for every drafted sequence.
  std::vector<DraftAsk> asks;
  std::vector<size_t> which;
  for (size_t i = 0; i < drafters.size(); ++i) {
    if (drafters[i] == nullptr) continue;
    asks.push_back(drafters[i]->Ask(budget[i], candidates[i].cap, price));
    which.push_back(i);
  }
  if (asks.empty()) return step;
  std::vector<engine::DraftTree> got = Propose(asks, &step.requested);
  int failed = 0;
  for (size_t k = 0; k < which.size(); ++k) {
    SequenceDraft& draft = step.drafts[which[k]];
    draft.tree = std::move(got[k]);
    draft.asked = asks[k].budget;
    draft.failure = drafters[which[k]]->Failure();
    if (!draft.failure.ok()) ++failed;
  }
  // The sequences that failed leave the pass, their scratch rows stay.
  Trim(drafters, roots - failed + step.scratch_rows, max_step_tokens,
       &step.drafts);
  return step;
}

std::vector<engine::DraftTree> DraftPlanner::Propose(
    absl::Span<const DraftAsk> asks, int* requested) {
  const absl::Time start = absl::Now();
  bool called = false;
  std::vector<engine::DraftTree> got = context_.fanout->Propose(asks, &called);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const DraftSourceStats after = context_.fanout->Stats();
  // The verifier's assistant: its passes and its gate, per sequence step.
  if (after.model_passes > reported_.model_passes) {
    context_.observer->OnAssistantPasses(
        after.model_seconds - reported_.model_seconds,
        after.model_passes - reported_.model_passes);
  }
  for (int64_t k = reported_.model_gate_runs; k < after.model_gate_runs; ++k) {
    context_.observer->OnCostGate(GatedMechanism::kAssistant, true);
  }
  for (int64_t k = reported_.model_gate_skips; k < after.model_gate_skips;
       ++k) {
    context_.observer->OnCostGate(GatedMechanism::kAssistant, false);
  }
  reported_.model_seconds = after.model_seconds;
  reported_.model_passes = after.model_passes;
  reported_.model_gate_runs = after.model_gate_runs;
  reported_.model_gate_skips = after.model_gate_skips;
  // Each draft call for the metrics, the sources' new failures with the
  // first: calls no step waited for (asynchronous sources; their round
  // trips never reach the budget), then this step's if it waited for one.
  std::vector<double> calls = context_.fanout->TakeCallSeconds();
  if (called) {
    // One slow call (a deadline, a busy host) moves the average by at most
    // 10% of itself, so it cannot switch drafts off on its own.
    const double cap =
        draft_call_seconds_ == 0 ? seconds : 2 * draft_call_seconds_;
    const double sample = std::min(seconds, cap);
    draft_call_seconds_ = draft_call_seconds_ == 0
                              ? sample
                              : 0.9 * draft_call_seconds_ + 0.1 * sample;
    calls.push_back(seconds);
    for (const DraftAsk& ask : asks) *requested += ask.budget;
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    context_.observer->OnDraftCall(
        calls[i], i == 0 ? after.failures - reported_.failures : 0,
        after.available);
  }
  if (!calls.empty()) reported_.failures = after.failures;
  got.resize(asks.size());
  return got;
}

void DraftPlanner::Trim(absl::Span<SequenceDrafter* const> drafters, int base,
                        int max_step_tokens,
                        std::vector<SequenceDraft>* drafts) const {
  if (context_.options.draft_ask_tokens == 0) return;
  std::vector<ScoredDraft> scored;
  std::vector<size_t> which;
  // Trees without scores keep their size and are charged as rows too.
  int unscored = 0;
  for (size_t i = 0; i < drafts->size(); ++i) {
    const SequenceDraft& draft = (*drafts)[i];
    if (!draft.failure.ok()) continue;
    const engine::DraftTree& tree = draft.tree;
    if (tree.scores.size() != tree.tokens.size()) {
      unscored += tree.size();
      continue;
    }
    if (tree.empty()) continue;
    scored.push_back(drafters[i]->Scored(tree));
    which.push_back(i);
  }
  if (scored.empty()) return;
  const std::vector<int> keep =
      TrimByScore(*context_.cost, base + unscored, scored,
                  std::max(0, max_step_tokens - base - unscored));
  for (size_t k = 0; k < which.size(); ++k) {
    engine::TrimDraft(&(*drafts)[which[k]].tree, keep[k]);
  }
}

}  // namespace lookahead::verifysvc
