#include "draftsvc/sources/assistant/assistant_drafter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/status_macros.h"

namespace lookahead::draftsvc {
namespace {

// Tokens a pre-draft worker runs per hold of a session's lock while
// catching up (a long prompt is prefilled in pieces, so a Step that wants
// the session waits for one piece at most).
constexpr int kWorkerSyncTokens = 32;
// How a Draft waits for a session a worker holds: polls until its deadline.
constexpr absl::Duration kLockPoll = absl::Microseconds(100);

absl::Status CheckTokens(absl::Span<const int32_t> tokens, int32_t vocab,
                         absl::string_view what) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "[", i, "] = ", tokens[i],
                       " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

// The softmax(logits / t) normalizer: sum over tokens of
// exp((logit - max_logit) / t), in double, NaN logits left out.
double SoftmaxSum(absl::Span<const float> logits, double t, float max_logit) {
  double sum = 0;
  for (float l : logits) {
    if (!std::isnan(l)) sum += std::exp((l - max_logit) / t);
  }
  return sum;
}

float Probability(absl::Span<const float> logits, int32_t token, double t,
                  float max_logit, double sum) {
  if (!(sum > 0)) return 0;
  return static_cast<float>(std::exp((logits[token] - max_logit) / t) / sum);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AssistantDrafter>> AssistantDrafter::Create(
    const AssistantModel* model, const AssistantDrafterOptions& options) {
  if (model == nullptr) {
    return absl::InvalidArgumentError("assistant drafter: no model");
  }
  const auto bad = [](absl::string_view field, int64_t value,
                      absl::string_view want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assistant drafter option ", field, " = ", value, "; want ", want));
  };
  if (options.max_cached_tokens < 1) {
    return bad("max_cached_tokens", options.max_cached_tokens, ">= 1");
  }
  if (options.predraft_threads < 0) {
    return bad("predraft_threads", options.predraft_threads, ">= 0");
  }
  if (options.max_chain_tokens < 1) {
    return bad("max_chain_tokens", options.max_chain_tokens, ">= 1");
  }
  if (options.top2_levels < 0) {
    return bad("top2_levels", options.top2_levels, ">= 0");
  }
  if (options.top2_budget_per_level < 1) {
    return bad("top2_budget_per_level", options.top2_budget_per_level, ">= 1");
  }
  std::unique_ptr<AssistantDrafter> drafter(
      new AssistantDrafter(model, options));
  RETURN_IF_ERROR(drafter->Calibrate());
  for (int i = 0; i < options.predraft_threads; ++i) {
    drafter->workers_.emplace_back([d = drafter.get()] { d->WorkerLoop(); });
  }
  return drafter;
}

AssistantDrafter::AssistantDrafter(const AssistantModel* model,
                                   const AssistantDrafterOptions& options)
    : model_(model), options_(options) {}

AssistantDrafter::~AssistantDrafter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

absl::Status AssistantDrafter::Open(absl::string_view session_id,
                                    absl::Span<const int32_t> prompt,
                                    const engine::SamplingParams& sampling) {
  if (prompt.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("assistant session ", QuoteInput(session_id),
                     ": empty prompt; give >= 1 token"));
  }
  RETURN_IF_ERROR(
      CheckTokens(prompt, model_->config().vocab_size, "prompt_tokens"));
  RETURN_IF_ERROR(engine::ValidateSamplingParams(sampling));
  auto session = std::make_shared<Session>(std::string(session_id), sampling);
  {
    absl::MutexLock lock(&session->mu);
    session->context.assign(prompt.begin(), prompt.end());
    // Prefill in the background and draft the first chain ahead.
    session->predraft_until =
        static_cast<int64_t>(prompt.size()) + options_.max_chain_tokens;
  }
  {
    absl::MutexLock lock(&mu_);
    Entry& entry = sessions_[session->id];
    if (entry.session != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat(
          "assistant session ", QuoteInput(session_id), " is already open"));
    }
    entry.session = session;
    entry.last_used = ++clock_;
  }
  Schedule(session->id);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<AssistantDrafter::Session>>
AssistantDrafter::Find(absl::string_view session_id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no open assistant session ", QuoteInput(session_id)));
  }
  it->second.last_used = ++clock_;
  return it->second.session;
}

absl::Status AssistantDrafter::Advance(absl::string_view session_id,
                                       absl::Span<const int32_t> accepted) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(session_id));
  RETURN_IF_ERROR(
      CheckTokens(accepted, model_->config().vocab_size, "accepted_tokens"));
  absl::MutexLock lock(&s->mu);
  s->context.insert(s->context.end(), accepted.begin(), accepted.end());
  return absl::OkStatus();
}

absl::Status AssistantDrafter::Close(absl::string_view session_id) {
  std::shared_ptr<Session> s;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(
          absl::StrCat("no open assistant session ", QuoteInput(session_id)));
    }
    s = it->second.session;
  }
  absl::MutexLock lock(&s->mu);  // waits for a pass in progress
  s->closed = true;
  DropCache(s.get());
  absl::MutexLock drafter_lock(&mu_);
  sessions_.erase(s->id);
  return absl::OkStatus();
}

void AssistantDrafter::Shape(int budget, int* chain, int* siblings) const {
  *siblings =
      std::min(options_.top2_levels, budget / options_.top2_budget_per_level);
  *chain = std::min(budget - *siblings, options_.max_chain_tokens);
  *siblings = std::min(*siblings, *chain);
}

bool AssistantDrafter::Synced(const Session& s) {
  if (s.cache == nullptr || s.closed) return false;
  const int64_t n = static_cast<int64_t>(s.context.size());
  const int64_t c = static_cast<int64_t>(s.cached.size());
  const int64_t end = s.nodes_begin + static_cast<int64_t>(s.nodes.size());
  if (n > c + 1 || s.nodes_begin > n) return false;
  // The context must be the cached tokens' prefix, its last token possibly
  // the pending node.
  const int64_t common = std::min(n, c);
  if (!std::equal(s.context.begin(), s.context.begin() + common,
                  s.cached.begin())) {
    return false;
  }
  if (n == c + 1) {
    return end == c + 1 && s.nodes.back().token == s.context.back();
  }
  // n <= c: the node at n exists, or the logits after the context do.
  return end > n || (end == n && n == c && s.has_logits);
}

int AssistantDrafter::Available(const Session& s) {
  return static_cast<int>(s.nodes_begin + static_cast<int64_t>(s.nodes.size()) -
                          static_cast<int64_t>(s.context.size()));
}

bool AssistantDrafter::NeedsPass(const Session& s) {
  const int64_t end = s.nodes_begin + static_cast<int64_t>(s.nodes.size());
  return end != static_cast<int64_t>(s.cached.size()) || !s.has_logits;
}

absl::StatusOr<bool> AssistantDrafter::SyncStep(Session* s, int max_tokens) {
  if (Synced(*s)) return true;
  const int64_t n = static_cast<int64_t>(s->context.size());
  int64_t common = 0;
  if (s->cache != nullptr) {
    const int64_t c = static_cast<int64_t>(s->cached.size());
    while (common < std::min(n, c) && s->cached[common] == s->context[common]) {
      ++common;
    }
  }
  // The last context token runs again if need be: its logits are the
  // first node's.
  common = std::min(common, n - 1);
  if (s->cache != nullptr) {
    RETURN_IF_ERROR(s->cache->Truncate(static_cast<int>(common)));
  }
  s->cached.resize(common);
  s->nodes.clear();
  s->has_logits = false;
  const int64_t stop = std::min<int64_t>(n, common + std::max(1, max_tokens));
  RETURN_IF_ERROR(RunTokens(
      s, absl::MakeConstSpan(s->context.data() + common, stop - common)));
  s->nodes_begin = static_cast<int64_t>(s->cached.size());
  return Synced(*s);
}

absl::Status AssistantDrafter::ExtendOne(Session* s) {
  if (NeedsPass(*s)) {
    // The pending node runs; its logits choose the next one.
    const int32_t token = s->nodes.back().token;
    RETURN_IF_ERROR(RunTokens(s, absl::MakeConstSpan(&token, 1)));
  }
  const absl::Span<const float> logits(s->logits);
  const engine::SamplingParams& p = s->sampling;
  const int64_t position = static_cast<int64_t>(s->cached.size());
  Node node;
  node.token = p.greedy() ? engine::ArgMax(logits)
                          : engine::SampleToken(logits, p, position);
  // The runner-up: the most likely other token (by logit; ties to the
  // lower id), the sibling the stairs shape adds.
  float max_logit = -std::numeric_limits<float>::infinity();
  for (size_t t = 0; t < logits.size(); ++t) {
    const float l = logits[t];
    if (std::isnan(l)) continue;
    max_logit = std::max(max_logit, l);
    if (static_cast<int32_t>(t) != node.token &&
        (node.runner_up < 0 || l > logits[node.runner_up])) {
      node.runner_up = static_cast<int32_t>(t);
    }
  }
  const double temperature = p.greedy() ? 1.0 : p.temperature;
  const double sum = SoftmaxSum(logits, temperature, max_logit);
  node.probability =
      Probability(logits, node.token, temperature, max_logit, sum);
  if (node.runner_up >= 0) {
    node.runner_up_probability =
        Probability(logits, node.runner_up, temperature, max_logit, sum);
  }
  s->nodes.push_back(node);
  absl::MutexLock lock(&mu_);
  ++stats_.drafted_tokens;
  return absl::OkStatus();
}

absl::Status AssistantDrafter::RunTokens(Session* s,
                                         absl::Span<const int32_t> tokens) {
  const engine::LlamaModel& model = model_->model();
  const int64_t length = static_cast<int64_t>(s->cached.size());
  // Room for the tokens and a chain drafted after them.
  const int64_t need = length + static_cast<int64_t>(tokens.size()) +
                       2 * options_.max_chain_tokens + 2;
  if (s->cache == nullptr || s->cache->Capacity() < need) {
    // Grow by half again, so a long session reallocates O(log n) times.
    const int64_t capacity = std::max<int64_t>(
        need, s->cache == nullptr
                  ? need
                  : s->cache->Capacity() + s->cache->Capacity() / 2);
    if (capacity > std::numeric_limits<int>::max() || !Reserve(s, capacity)) {
      DropCache(s);
      return absl::ResourceExhaustedError(
          absl::StrCat("assistant session ", QuoteInput(s->id), " needs ", need,
                       " KV slots; --assistant_max_cached_tokens is ",
                       options_.max_cached_tokens));
    }
    RETURN_IF_ERROR(model.GrowCache(&s->cache, static_cast<int>(capacity)));
  }
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(torch::Tensor logits, model.Prefill(s->cache.get(), tokens));
  const absl::Duration took = absl::Now() - start;
  const double seconds = absl::ToDoubleSeconds(took);
  s->unreported_ns.fetch_add(absl::ToInt64Nanoseconds(took),
                             std::memory_order_relaxed);
  torch::Tensor row = logits.to(torch::kCPU).contiguous();
  const float* data = row.data_ptr<float>();
  s->logits.assign(data, data + row.numel());
  s->has_logits = true;
  s->cached.insert(s->cached.end(), tokens.begin(), tokens.end());
  absl::MutexLock lock(&mu_);
  ++stats_.forward_passes;
  stats_.tokens_run += static_cast<int64_t>(tokens.size());
  stats_.forward_seconds += seconds;
  if (tokens.size() == 1) {
    pass_seconds_ =
        pass_seconds_ == 0 ? seconds : 0.8 * pass_seconds_ + 0.2 * seconds;
    pass_timed_ = absl::Now();
  }
  return absl::OkStatus();
}

bool AssistantDrafter::Reserve(Session* s, int64_t slots) {
  while (true) {
    std::vector<std::pair<int64_t, std::shared_ptr<Session>>> victims;
    {
      absl::MutexLock lock(&mu_);
      auto self = sessions_.find(s->id);
      if (self == sessions_.end()) return false;  // closed meanwhile
      const int64_t delta = slots - self->second.slots;
      if (cached_tokens_ + delta <= options_.max_cached_tokens) {
        cached_tokens_ += delta;
        self->second.slots = slots;
        return true;
      }
      for (const auto& [id, entry] : sessions_) {
        if (entry.session.get() != s && entry.slots > 0) {
          victims.emplace_back(entry.last_used, entry.session);
        }
      }
    }
    std::sort(victims.begin(), victims.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    // Evict the least recently used session nobody is using right now;
    // one at a time, then check again.
    bool evicted = false;
    for (auto& [tick, victim] : victims) {
      if (!victim->mu.TryLock()) continue;
      if (victim->cache != nullptr) {
        DropCache(victim.get());
        evicted = true;
      }
      victim->mu.Unlock();
      if (evicted) {
        absl::MutexLock lock(&mu_);
        ++stats_.evictions;
        break;
      }
    }
    if (!evicted) return false;
  }
}

void AssistantDrafter::DropCache(Session* s) {
  s->cache.reset();
  s->cached.clear();
  s->nodes.clear();
  s->nodes_begin = 0;
  s->has_logits = false;
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(s->id);
  if (it != sessions_.end()) {
    cached_tokens_ -= it->second.slots;
    it->second.slots = 0;
  }
}

AssistantDraft AssistantDrafter::Assemble(const Session& s, int chain,
                                          int siblings) const {
  AssistantDraft out;
  const int64_t first = static_cast<int64_t>(s.context.size()) - s.nodes_begin;
  chain = std::min(chain, Available(s));
  siblings = std::min(siblings, chain);
  for (int j = 0; j < chain; ++j) {
    const Node& node = s.nodes[first + j];
    out.tree.tokens.push_back(node.token);
    out.tree.parents.push_back(j - 1);
    out.probabilities.push_back(node.probability);
  }
  for (int j = 0; j < siblings; ++j) {
    const Node& node = s.nodes[first + j];
    if (node.runner_up < 0) continue;
    out.tree.tokens.push_back(node.runner_up);
    out.tree.parents.push_back(j - 1);
    out.probabilities.push_back(node.runner_up_probability);
  }
  out.tree.sources.assign(out.tree.tokens.size(),
                          engine::DraftSourceTag::kAssistant);
  return out;
}

absl::Status AssistantDrafter::Calibrate() {
  // The first pass warms caches and pages in weights: timed passes follow.
  constexpr int kTimedPasses = 5;
  const engine::LlamaModel& model = model_->model();
  ASSIGN_OR_RETURN(std::unique_ptr<engine::KvCache> cache,
                   model.NewCache(kTimedPasses + 1));
  std::vector<double> seconds;
  for (int i = 0; i <= kTimedPasses; ++i) {
    const int32_t token = i % model_->config().vocab_size;
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(model.Prefill(cache.get(), {&token, 1}).status());
    if (i > 0) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2,
                   seconds.end());
  absl::MutexLock lock(&mu_);
  pass_seconds_ = seconds[seconds.size() / 2];
  pass_timed_ = absl::Now();
  return absl::OkStatus();
}

double AssistantDrafter::RecentSecondsPerPass(absl::Duration max_age) {
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now - pass_timed_ <= max_age) return pass_seconds_;
    pass_timed_ = now;  // this caller times them; concurrent ones need not
  }
  // Out of memory for the scratch cache: the last measurement stands.
  Calibrate().IgnoreError();
  return PassSeconds();
}

double AssistantDrafter::PassSeconds() const {
  absl::MutexLock lock(&mu_);
  return pass_seconds_;
}

bool AssistantDrafter::LockBefore(Session* s, absl::Time deadline) {
  while (!s->mu.TryLock()) {
    if (absl::Now() + kLockPoll > deadline) return false;
    absl::SleepFor(kLockPoll);
  }
  return true;
}

absl::StatusOr<AssistantDraft> AssistantDrafter::Draft(
    absl::string_view session_id, int budget, absl::Time deadline) {
  if (budget < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("assistant draft budget is ", budget, "; use >= 0"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(session_id));
  if (budget == 0) return AssistantDraft();
  int chain = 0, siblings = 0;
  Shape(budget, &chain, &siblings);
  // A worker holds a session for one pass at most: wait for it no longer
  // than the deadline.
  s->waiting.fetch_add(1);
  const bool locked = LockBefore(s.get(), deadline);
  s->waiting.fetch_sub(1);
  if (!locked) {
    absl::MutexLock lock(&mu_);
    ++stats_.predraft_misses;
    ++stats_.deadline_cuts;
    return AssistantDraft();
  }
  AssistantDraft out;
  bool cut = false;
  const bool hit = Synced(*s) && Available(*s) >= chain;
  absl::Status status = absl::OkStatus();
  while (!hit) {
    const bool synced = Synced(*s);
    if (synced && Available(*s) >= chain) break;
    if ((!synced || NeedsPass(*s)) &&
        absl::Now() + absl::Seconds(PassSeconds()) > deadline) {
      cut = true;
      break;
    }
    if (!synced) {
      // Catch up in pieces that fit the time left: a one-token pass's
      // cost per token bounds a chunk's from above (unknown before the
      // first pass: a worker-sized piece).
      const double pass = PassSeconds();
      const double left = absl::ToDoubleSeconds(deadline - absl::Now());
      int tokens = kWorkerSyncTokens;
      if (pass > 0) {
        tokens = static_cast<int>(
            std::min<double>(model_->model().options().prefill_chunk_tokens,
                             std::max(1.0, left / pass)));
      }
      absl::StatusOr<bool> done = SyncStep(s.get(), tokens);
      status = done.status();
    } else {
      status = ExtendOne(s.get());
    }
    if (!status.ok()) break;
  }
  if (status.ok() && Synced(*s)) {
    out = Assemble(*s, chain, siblings);
    out.predrafted = hit;
    // Ahead: this chain, the assistant's next token (the verifier's bonus
    // token when the whole chain is accepted), and a chain after it.
    s->predraft_until = static_cast<int64_t>(s->context.size()) + 2 * chain + 1;
  }
  s->mu.Unlock();
  {
    absl::MutexLock lock(&mu_);
    ++(hit ? stats_.predraft_hits : stats_.predraft_misses);
    if (cut) ++stats_.deadline_cuts;
  }
  // Over the memory cap this session drafts nothing; that is no error.
  if (absl::IsResourceExhausted(status)) return AssistantDraft();
  RETURN_IF_ERROR(status);
  Schedule(s->id);
  return out;
}

void AssistantDrafter::Schedule(const std::string& session_id) {
  if (workers_.empty()) return;
  absl::MutexLock lock(&mu_);
  if (queued_.insert(session_id).second) queue_.push_back(session_id);
}

bool AssistantDrafter::WorkReady() const {
  return stopping_ || !queue_.empty();
}

bool AssistantDrafter::Idle() const {
  return queue_.empty() && busy_workers_ == 0;
}

void AssistantDrafter::WaitForPredraftIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &AssistantDrafter::Idle));
}

bool AssistantDrafter::PredraftStep(Session* s) {
  // A Draft wants the session: it drafts itself and schedules us after.
  if (s->closed || s->waiting.load() > 0) return false;
  if (!Synced(*s)) {
    absl::StatusOr<bool> done = SyncStep(s, kWorkerSyncTokens);
    return done.ok();
  }
  const int64_t end = s->nodes_begin + static_cast<int64_t>(s->nodes.size());
  if (end >= s->predraft_until) return false;
  return ExtendOne(s).ok();
}

void AssistantDrafter::WorkerLoop() {
  while (true) {
    std::string id;
    std::shared_ptr<Session> s;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &AssistantDrafter::WorkReady));
      if (stopping_) return;
      id = std::move(queue_.front());
      queue_.pop_front();
      queued_.erase(id);
      ++busy_workers_;
      auto it = sessions_.find(id);
      if (it != sessions_.end()) s = it->second.session;
    }
    bool more = false;
    if (s != nullptr && s->waiting.load() == 0) {
      absl::MutexLock lock(&s->mu);
      more = PredraftStep(s.get());
    }
    absl::MutexLock lock(&mu_);
    --busy_workers_;
    // Back of the queue: sessions take turns, one pass each.
    if (more && !stopping_ && queued_.insert(id).second) {
      queue_.push_back(id);
    }
  }
}

double AssistantDrafter::TakeSeconds(absl::string_view session_id) {
  std::shared_ptr<Session> s;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return 0;
    s = it->second.session;
  }
  return 1e-9 * static_cast<double>(
                    s->unreported_ns.exchange(0, std::memory_order_relaxed));
}

AssistantDrafterStats AssistantDrafter::stats() const {
  absl::MutexLock lock(&mu_);
  AssistantDrafterStats out = stats_;
  out.sessions = static_cast<int64_t>(sessions_.size());
  out.cached_tokens = cached_tokens_;
  return out;
}

}  // namespace lookahead::draftsvc
