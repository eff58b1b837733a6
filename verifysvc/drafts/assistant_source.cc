#include "verifysvc/drafts/assistant_source.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "engine/model/sampler.h"

namespace lookahead::verifysvc {

struct AssistantSource::Sequence {
  // The truth the assistant reads: the prompt's last prompt_tokens, then
  // every emitted token.
  std::vector<int32_t> context;
  // The tokens whose K/V the cache holds (a prefix of context, then drafted
  // tokens), and the logits after them (empty: none).
  std::vector<int32_t> cached;
  std::unique_ptr<engine::KvCache> cache;
  std::vector<float> logits;
  // The chain proposed at the last step that drafted (empty: none), judged
  // by the next Observe.
  std::vector<int32_t> chain;
  // First nodes proposed and accepted (decayed), for the gate and scores.
  double firsts = 0;
  double hits = 0;
  double seconds = 0;   // passes run since the last tree
  bool failed = false;  // a pass failed: no more drafts
};

namespace {

// The probability of `token`, the largest logit, under softmax(logits).
// Logits of -infinity (the ids a cut LM head leaves out) cost no exp.
float Probability(absl::Span<const float> logits, int32_t token) {
  const float top = logits[token];
  double sum = 0;
  for (float l : logits) {
    if (l > -std::numeric_limits<float>::infinity()) sum += std::exp(l - top);
  }
  return sum > 0 ? static_cast<float>(1 / sum) : 0.0f;
}

}  // namespace

AssistantSource::AssistantSource(const engine::LlamaModel* model,
                                 const AssistantSourceOptions& options)
    : model_(model), options_(options) {}

AssistantSource::~AssistantSource() = default;

int64_t AssistantSource::Open(const DraftPolicy& policy,
                              absl::Span<const int32_t> prompt) {
  if (prompt.empty() || !policy.enabled() ||
      !policy.MayUse(engine::DraftSourceTag::kAssistant)) {
    return 0;
  }
  auto s = std::make_unique<Sequence>();
  const size_t keep =
      std::min(prompt.size(), size_t(std::max(1, options_.prompt_tokens)));
  s->context.assign(prompt.end() - keep, prompt.end());
  const int64_t handle = next_handle_++;
  sequences_.emplace(handle, std::move(s));
  open_.fetch_add(1, std::memory_order_relaxed);
  return handle;
}

void AssistantSource::Observe(int64_t handle,
                              absl::Span<const int32_t> tokens) {
  auto it = sequences_.find(handle);
  if (it == sequences_.end()) return;
  Sequence& s = *it->second;
  if (!s.chain.empty()) {
    constexpr double kDecay = 0.9;
    s.firsts = kDecay * s.firsts + 1;
    s.hits = kDecay * s.hits + (!tokens.empty() && tokens[0] == s.chain[0]);
    s.chain.clear();
  }
  s.context.insert(s.context.end(), tokens.begin(), tokens.end());
}

void AssistantSource::Close(int64_t handle) {
  if (sequences_.erase(handle) > 0) {
    open_.fetch_sub(1, std::memory_order_relaxed);
  }
}

DraftCost AssistantSource::cost() const { return {}; }

DraftSourceStats AssistantSource::Stats() const {
  DraftSourceStats stats;
  stats.failures = failures_.load(std::memory_order_relaxed);
  stats.open_sessions = open_.load(std::memory_order_relaxed);
  stats.model_seconds =
      1e-9 * static_cast<double>(pass_nanos_.load(std::memory_order_relaxed));
  stats.model_passes = passes_.load(std::memory_order_relaxed);
  stats.model_gate_runs = gate_runs_.load(std::memory_order_relaxed);
  stats.model_gate_skips = gate_skips_.load(std::memory_order_relaxed);
  return stats;
}

absl::Status AssistantSource::Run(Sequence* s,
                                  absl::Span<const int32_t> tokens) {
  const int64_t length = static_cast<int64_t>(s->cached.size());
  const int64_t need =
      length + static_cast<int64_t>(tokens.size()) + options_.max_chain + 1;
  if (s->cache == nullptr || s->cache->Capacity() < need) {
    // Grow by half again: a long sequence reallocates O(log n) times.
    const int64_t capacity = std::max<int64_t>(
        need, s->cache == nullptr ? 2 * need : s->cache->Capacity() * 3 / 2);
    RETURN_IF_ERROR(model_->GrowCache(&s->cache, static_cast<int>(capacity)));
  }
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(torch::Tensor logits,
                   model_->Prefill(s->cache.get(), tokens));
  const absl::Duration took = absl::Now() - start;
  const double seconds = absl::ToDoubleSeconds(took);
  s->seconds += seconds;
  pass_nanos_.fetch_add(absl::ToInt64Nanoseconds(took),
                        std::memory_order_relaxed);
  passes_.fetch_add(1, std::memory_order_relaxed);
  if (tokens.size() == 1) {
    pass_seconds_ =
        pass_seconds_ == 0 ? seconds : 0.8 * pass_seconds_ + 0.2 * seconds;
  }
  torch::Tensor row = logits.to(torch::kCPU).contiguous();
  const float* data = row.data_ptr<float>();
  s->logits.assign(data, data + row.numel());
  s->cached.insert(s->cached.end(), tokens.begin(), tokens.end());
  return absl::OkStatus();
}

absl::Status AssistantSource::Sync(Sequence* s) {
  const size_t n = s->context.size();
  size_t common = 0;
  while (common < std::min(n, s->cached.size()) &&
         s->cached[common] == s->context[common]) {
    ++common;
  }
  if (common == n && common == s->cached.size() && !s->logits.empty()) {
    return absl::OkStatus();
  }
  // The last context token runs again if need be: its logits choose the
  // first node.
  common = std::min(common, n - 1);
  if (s->cache != nullptr) {
    RETURN_IF_ERROR(s->cache->Truncate(static_cast<int>(common)));
  }
  s->cached.resize(common);
  s->logits.clear();
  return Run(s, absl::MakeConstSpan(s->context).subspan(common));
}

engine::DraftTree AssistantSource::Draft(Sequence* s, const DraftAsk& ask) {
  engine::DraftTree tree;
  const int budget = std::min(ask.budget, options_.max_chain);
  if (s->failed || budget <= 0 || ask.covered_score >= options_.covered_below) {
    return tree;
  }
  // The gate: an accepted first node saves a one-token pass; drafting it
  // costs an assistant pass and a verify row.
  const double rate = (s->hits + options_.prior_rate * options_.prior_steps) /
                      (s->firsts + options_.prior_steps);
  // Pays: `p`, the estimate a node is accepted, saves more than the pass
  // that drafts it and its verify row (unknown costs: it pays).
  const double pass = pass_seconds_;
  auto pays = [&](double p) {
    return !options_.gate || ask.token_seconds <= 0 || pass <= 0 ||
           p * ask.token_seconds > pass + ask.row_seconds;
  };
  if (!pays(rate)) {
    gate_skips_.fetch_add(1, std::memory_order_relaxed);
    return tree;
  }
  gate_runs_.fetch_add(1, std::memory_order_relaxed);
  absl::Status status = Sync(s);
  double path = 1;
  int32_t parent = -1;
  while (status.ok() && tree.size() < budget) {
    if (tree.size() > 0) {
      // Another node needs a pass over the last one.
      if (!pays(path * rate)) break;
      status = Run(s, absl::MakeConstSpan(&tree.tokens.back(), 1));
      if (!status.ok()) break;
    }
    const int32_t token = engine::ArgMax(s->logits);
    path *= Probability(s->logits, token);
    tree.tokens.push_back(token);
    tree.parents.push_back(parent);
    tree.sources.push_back(engine::DraftSourceTag::kAssistant);
    tree.scores.push_back(
        static_cast<float>(std::min(1.0, path * rate / options_.prior_rate)));
    parent = tree.size() - 1;
  }
  if (!status.ok()) {
    std::fprintf(stderr,
                 "verifysvc: assistant: %s; no more drafts from it "
                 "for this request\n",
                 status.ToString().c_str());
    failures_.fetch_add(1, std::memory_order_relaxed);
    s->failed = true;
    s->cache.reset();
    s->cached.clear();
    s->logits.clear();
    tree = {};
  }
  s->chain = tree.tokens;
  tree.source_seconds = s->seconds;
  s->seconds = 0;
  return tree;
}

std::vector<engine::DraftTree> AssistantSource::Propose(
    absl::Span<const DraftAsk> asks, bool* called) {
  *called = false;
  std::vector<engine::DraftTree> trees(asks.size());
  for (size_t i = 0; i < asks.size(); ++i) {
    auto it = sequences_.find(asks[i].handle);
    if (it == sequences_.end()) continue;
    trees[i] = Draft(it->second.get(), asks[i]);
  }
  return trees;
}

}  // namespace lookahead::verifysvc
