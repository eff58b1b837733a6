#include "draftsvc/draft_index.h"

#include <algorithm>
#include <atomic>
#include <utility>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "draftsvc/trie_format.h"

namespace lookahead::draftsvc {
namespace {

constexpr size_t kMaxSessionIdBytes = 256;

// INVALID_ARGUMENT naming the field, the length and the limit iff
// `session_id` is empty or longer than any session's.
absl::Status CheckSessionId(absl::string_view session_id) {
  if (session_id.empty() || session_id.size() > kMaxSessionIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("session_id is ", session_id.size(), " bytes; need 1..",
                     kMaxSessionIdBytes));
  }
  return absl::OkStatus();
}
// Prune batches are split so no single batch holds millions of paths.
constexpr size_t kMaxMutationsPerBatch = size_t{1} << 16;

// Runs `done` once after `pending` batches completed, with the first error.
class DurableJoin {
 public:
  DurableJoin(int pending, std::function<void(absl::Status)> done)
      : pending_(pending), done_(std::move(done)) {}

  void BatchDone(absl::Status status) {
    bool last = false;
    absl::Status first_error;
    {
      absl::MutexLock lock(&mu_);
      if (first_error_.ok() && !status.ok()) first_error_ = std::move(status);
      last = --pending_ == 0;
      first_error = first_error_;
    }
    if (last && done_) done_(std::move(first_error));
  }

 private:
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  const std::function<void(absl::Status)> done_;
};

absl::Status CheckTokens(absl::Span<const int32_t> tokens, int32_t vocab_size,
                         absl::string_view what) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " token at index ", i, " is ", tokens[i],
                       ", outside [0, vocab_size=", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct DraftIndex::Session {
  // Constant after OpenSession publishes the session.
  std::string id;
  Namespace* ns = nullptr;
  int32_t branch_length = 0;
  std::unique_ptr<TokenTrie> prompt_trie;  // Read-only once published.
  // Last open or FindSession, as absl::ToUnixNanos: renewed under mu_'s
  // reader lock, read by the sweeper under its writer lock.
  std::atomic<int64_t> last_used_nanos{0};

  absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;
  // Last branch_length tokens of prompt + output, oldest first.
  std::vector<int32_t> context ABSL_GUARDED_BY(mu);
  // Last branch_length OUTPUT tokens: the windows not yet inserted start
  // here.
  std::vector<int32_t> output_tail ABSL_GUARDED_BY(mu);
};

namespace {

// Keeps the last `n` elements of `v`.
void KeepLast(std::vector<int32_t>& v, size_t n) {
  if (v.size() > n) v.erase(v.begin(), v.end() - n);
}

}  // namespace

absl::Status DraftIndex::ValidateOptions(const IndexOptions& o) {
  if (o.max_branch_length < 1 || o.max_branch_length > 255) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_branch_length ", o.max_branch_length, " is outside [1, 255]"));
  }
  if (o.default_branch_length < 1 ||
      o.default_branch_length > o.max_branch_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "default_branch_length ", o.default_branch_length,
        " is outside [1, max_branch_length=", o.max_branch_length, "]"));
  }
  if (o.capacity_nodes < 1 || o.capacity_nodes > (int64_t{1} << 31) - 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "capacity_nodes ", o.capacity_nodes, " is outside [1, 2^31 - 2]"));
  }
  if (!(o.low_water > 0.0 && o.low_water <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("low_water ", o.low_water, " is outside (0, 1]"));
  }
  if (!(o.prompt_boost >= 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_boost ", o.prompt_boost, " is negative"));
  }
  if (o.max_prompt_tokens < 1 || o.max_step_tokens < 0 ||
      o.max_decoding_length < 0 || o.max_sessions < 1) {
    return absl::InvalidArgumentError(
        "max_prompt_tokens and max_sessions must be >= 1, max_step_tokens "
        "and max_decoding_length >= 0");
  }
  if (o.max_vocab_size < 1 || o.max_vocab_size > (1 << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_vocab_size ", o.max_vocab_size, " is outside [1, 2^30]"));
  }
  if (o.max_sessions_per_namespace < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_sessions_per_namespace ",
                     o.max_sessions_per_namespace, " must be >= 1"));
  }
  if (o.session_lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("session_lease ", absl::FormatDuration(o.session_lease),
                     " must be > 0 (infinite: never expire)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DraftIndex>> DraftIndex::Create(
    IndexOptions options, MutationSink* sink, Clock clock) {
  RETURN_IF_ERROR(ValidateOptions(options));
  return std::make_unique<DraftIndex>(std::move(options), sink,
                                      std::move(clock));
}

DraftIndex::DraftIndex(IndexOptions options, MutationSink* sink, Clock clock)
    : options_(std::move(options)),
      sink_(sink),
      clock_(clock ? std::move(clock) : Clock([] { return absl::Now(); })) {
  if (options_.session_lease != absl::InfiniteDuration()) {
    sweeper_ = std::thread([this] { SweepLoop(); });
  }
}

DraftIndex::~DraftIndex() { StopExpiry(); }

void DraftIndex::StopExpiry() {
  {
    absl::MutexLock lock(&sweeper_mu_);
    if (stop_sweeper_) return;
    stop_sweeper_ = true;
  }
  if (sweeper_.joinable()) sweeper_.join();
}

void DraftIndex::SweepLoop() {
  const absl::Duration period = std::clamp(
      options_.session_lease / 10, absl::Milliseconds(10), absl::Seconds(10));
  while (true) {
    {
      absl::MutexLock lock(&sweeper_mu_);
      sweeper_mu_.AwaitWithTimeout(absl::Condition(&stop_sweeper_), period);
      if (stop_sweeper_) return;
    }
    if (ExpireIdleSessions(clock_()) > 0) {
#ifdef __GLIBC__
      // glibc keeps the freed prompt tries' small blocks in its arenas; hand
      // the free pages back, or a dead verifier's sessions stay in the RSS.
      malloc_trim(0);
#endif
    }
  }
}

bool DraftIndex::Idle(const Session& session, absl::Time now) const {
  return now - absl::FromUnixNanos(session.last_used_nanos.load()) >=
         options_.session_lease;
}

int64_t DraftIndex::ExpireIdleSessions(absl::Time now) {
  if (options_.session_lease == absl::InfiniteDuration()) return 0;
  std::vector<std::shared_ptr<Session>> expired;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (!Idle(*it->second, now)) {
        ++it;
        continue;
      }
      expired.push_back(std::move(it->second));
      sessions_.erase(it++);
    }
  }
  for (const std::shared_ptr<Session>& session : expired) {
    std::function<void(absl::Status)> nobody_waits;
    Retire(*session, /*expired=*/true, nobody_waits);
  }
  return static_cast<int64_t>(expired.size());
}

absl::StatusOr<std::string> DraftIndex::CanonicalNamespace(
    absl::string_view ns) {
  if (ns.empty()) return std::string("default");
  // One naming rule for memory and disk (keys embed the name).
  RETURN_IF_ERROR(trie_format::ValidateNamespace(ns));
  return std::string(ns);
}

DraftIndex::Namespace* DraftIndex::FindNamespace(
    absl::string_view canonical) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = namespaces_.find(canonical);
  return it == namespaces_.end() ? nullptr : it->second.get();
}

absl::StatusOr<std::shared_ptr<DraftIndex::Session>> DraftIndex::FindSession(
    absl::string_view session_id) {
  RETURN_IF_ERROR(CheckSessionId(session_id));
  const absl::Time now = clock_();
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "session ", QuoteInput(session_id), " is not open (reopen it)"));
    }
    if (!Idle(*it->second, now)) {
      it->second->last_used_nanos.store(absl::ToUnixNanos(now));
      return it->second;
    }
  }
  // Its lease ran out before the sweeper got to it: expire it now.
  ExpireIdleSessions(now);
  return absl::NotFoundError(
      absl::StrCat("session ", QuoteInput(session_id), " expired after ",
                   absl::FormatDuration(options_.session_lease),
                   " idle (session lease); reopen it"));
}

absl::Status DraftIndex::RestoreNamespace(absl::string_view ns,
                                          int32_t vocab_size) {
  ASSIGN_OR_RETURN(std::string name, CanonicalNamespace(ns));
  if (vocab_size < 1 || vocab_size > options_.max_vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size ", vocab_size, " is outside [1, ",
                     options_.max_vocab_size, "]"));
  }
  absl::MutexLock lock(&mu_);
  auto it = namespaces_.find(name);
  if (it != namespaces_.end()) {
    if (it->second->vocab_size != vocab_size) {
      return absl::FailedPreconditionError(
          absl::StrCat("namespace ", QuoteInput(name), " has vocab_size ",
                       it->second->vocab_size, ", not ", vocab_size));
    }
    return absl::OkStatus();
  }
  namespaces_.emplace(name, std::make_unique<Namespace>(name, vocab_size));
  return absl::OkStatus();
}

absl::Status DraftIndex::RestoreNode(absl::string_view ns,
                                     absl::Span<const int32_t> path,
                                     int64_t count) {
  ASSIGN_OR_RETURN(std::string name, CanonicalNamespace(ns));
  Namespace* space = FindNamespace(name);
  if (space == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("namespace ", QuoteInput(name),
                     " not restored yet (RestoreNamespace first)"));
  }
  RETURN_IF_ERROR(CheckTokens(path, space->vocab_size, "restored path"));
  absl::MutexLock lock(&space->mu);
  return space->trie.SetCount(path, count);
}

absl::StatusOr<OpenResult> DraftIndex::OpenSession(
    absl::string_view session_id, absl::string_view ns, int32_t vocab_size,
    absl::Span<const int32_t> prompt_tokens, int32_t branch_length) {
  // Validate everything before touching any state.
  RETURN_IF_ERROR(CheckSessionId(session_id));
  ASSIGN_OR_RETURN(std::string name, CanonicalNamespace(ns));
  if (vocab_size < 1 || vocab_size > options_.max_vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size ", vocab_size, " is outside [1, ",
                     options_.max_vocab_size, "]"));
  }
  if (branch_length < 0 || branch_length > options_.max_branch_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("branch_length ", branch_length, " is outside [0, ",
                     options_.max_branch_length, "] (0 = server default ",
                     options_.default_branch_length, ")"));
  }
  const int32_t bl =
      branch_length == 0 ? options_.default_branch_length : branch_length;
  if (prompt_tokens.empty()) {
    return absl::InvalidArgumentError(
        "prompt_tokens is empty; send at least 1 token");
  }
  if (prompt_tokens.size() > static_cast<size_t>(options_.max_prompt_tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt has ", prompt_tokens.size(), " tokens; at most ",
                     options_.max_prompt_tokens, " allowed"));
  }
  RETURN_IF_ERROR(CheckTokens(prompt_tokens, vocab_size, "prompt"));

  // Cheap checks first so a doomed request builds no trie.
  auto check_admission = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (sessions_.contains(session_id)) {
      return absl::AlreadyExistsError(
          absl::StrCat("session ", QuoteInput(session_id), " is already open"));
    }
    if (static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "draftsvc already has ", sessions_.size(),
          " sessions open, its cap (max_sessions, flag --max_sessions); "
          "close some or wait for idle ones to expire"));
    }
    auto it = namespaces_.find(name);
    if (it == namespaces_.end()) return absl::OkStatus();
    if (it->second->open_sessions.load() >=
        options_.max_sessions_per_namespace) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "namespace ", QuoteInput(name), " already has ",
          it->second->open_sessions.load(),
          " sessions open, its cap (max_sessions_per_namespace, flag "
          "--max_sessions_per_namespace); close some or wait for idle ones "
          "to expire"));
    }
    if (it->second->vocab_size != vocab_size) {
      return absl::FailedPreconditionError(absl::StrCat(
          "namespace ", QuoteInput(name), " has vocab_size ",
          it->second->vocab_size, ", but the request says ", vocab_size));
    }
    return absl::OkStatus();
  };
  {
    absl::Status admitted;
    {
      absl::ReaderMutexLock lock(&mu_);
      admitted = check_admission();
    }
    if (absl::IsAlreadyExists(admitted) ||
        absl::IsResourceExhausted(admitted)) {
      // An expired session the sweeper has not reached yet may hold the id
      // or the slot.
      if (ExpireIdleSessions(clock_()) > 0) {
        absl::ReaderMutexLock lock(&mu_);
        admitted = check_admission();
      }
    }
    RETURN_IF_ERROR(admitted);
  }

  auto session = std::make_shared<Session>();
  session->id = std::string(session_id);
  session->branch_length = bl;
  session->prompt_trie = std::make_unique<TokenTrie>();
  const size_t window = static_cast<size_t>(bl) + 1;
  for (size_t i = 0; i + 1 < prompt_tokens.size(); ++i) {
    session->prompt_trie->Insert(prompt_tokens.subspan(i, window));
  }
  {
    absl::MutexLock lock(&session->mu);
    session->context.assign(prompt_tokens.begin(), prompt_tokens.end());
    KeepLast(session->context, bl);
  }
  const int64_t prompt_nodes = session->prompt_trie->node_count();

  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(check_admission());
  auto it = namespaces_.find(name);
  if (it == namespaces_.end()) {
    it =
        namespaces_.emplace(name, std::make_unique<Namespace>(name, vocab_size))
            .first;
  }
  session->ns = it->second.get();
  session->ns->open_sessions.fetch_add(1);
  session->ns->prompt_nodes.fetch_add(prompt_nodes);
  session->last_used_nanos.store(absl::ToUnixNanos(clock_()));
  sessions_.emplace(session->id, std::move(session));
  return OpenResult{name, prompt_nodes};
}

bool DraftIndex::SubmitLocked(Namespace* /*ns: locked by the caller*/,
                              std::vector<TrieMutationBatch> batches,
                              std::function<void(absl::Status)>& on_durable) {
  if (batches.empty() || sink_ == nullptr) return false;
  auto join = std::make_shared<DurableJoin>(static_cast<int>(batches.size()),
                                            std::move(on_durable));
  on_durable = nullptr;
  for (TrieMutationBatch& batch : batches) {
    sink_->Submit(std::move(batch),
                  [join](absl::Status status) { join->BatchDone(status); });
  }
  return true;
}

TokenTrie::PruneStats DraftIndex::PruneLocked(
    Namespace* ns, int64_t target, std::vector<TrieMutationBatch>* batches) {
  std::vector<TrieMutation> mutations;
  const TokenTrie::PruneStats stats = ns->trie.Prune(
      target, options_.prune_halves_counts, sink_ ? &mutations : nullptr);
  if (stats.removed > 0) ++ns->prunes;
  for (size_t i = 0; i < mutations.size(); i += kMaxMutationsPerBatch) {
    TrieMutationBatch batch;
    batch.name_space = ns->name;
    batch.vocab_size = ns->vocab_size;
    const size_t end = std::min(mutations.size(), i + kMaxMutationsPerBatch);
    batch.mutations.assign(std::make_move_iterator(mutations.begin() + i),
                           std::make_move_iterator(mutations.begin() + end));
    batches->push_back(std::move(batch));
  }
  return stats;
}

bool DraftIndex::InsertWindowsLocked(
    Namespace* ns, absl::Span<const absl::Span<const int32_t>> windows,
    std::function<void(absl::Status)>& on_durable) {
  std::vector<TrieMutationBatch> batches;
  TrieMutationBatch batch;
  batch.name_space = ns->name;
  batch.vocab_size = ns->vocab_size;
  for (absl::Span<const int32_t> w : windows) {
    ns->trie.Insert(w, sink_ ? &batch.mutations : nullptr);
  }
  if (!batch.mutations.empty()) batches.push_back(std::move(batch));
  if (ns->trie.node_count() > options_.capacity_nodes) {
    const int64_t target = static_cast<int64_t>(
        static_cast<double>(options_.capacity_nodes) * options_.low_water);
    PruneLocked(ns, target, &batches);
  }
  return SubmitLocked(ns, std::move(batches), on_durable);
}

absl::Status DraftIndex::Append(absl::string_view session_id,
                                absl::Span<const int32_t> tokens,
                                std::function<void(absl::Status)> on_durable) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, FindSession(session_id));
  if (tokens.size() > static_cast<size_t>(options_.max_step_tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step has ", tokens.size(), " accepted tokens; at most ",
                     options_.max_step_tokens, " allowed"));
  }
  RETURN_IF_ERROR(CheckTokens(tokens, session->ns->vocab_size, "accepted"));
  bool submitted = false;
  {
    absl::MutexLock session_lock(&session->mu);
    if (session->closed) {
      return absl::NotFoundError(
          absl::StrCat("session ", QuoteInput(session_id), " was closed"));
    }
    const size_t bl = static_cast<size_t>(session->branch_length);
    // seq = not-yet-windowed output tail + new tokens; every full window
    // ending in the new tokens is inserted.
    std::vector<int32_t> seq = session->output_tail;
    const size_t first_new = seq.size();
    seq.insert(seq.end(), tokens.begin(), tokens.end());
    absl::InlinedVector<absl::Span<const int32_t>, 16> windows;
    for (size_t end = std::max(first_new + 1, bl + 1); end <= seq.size();
         ++end) {
      windows.push_back(absl::MakeConstSpan(seq).subspan(end - bl - 1, bl + 1));
    }
    if (!windows.empty()) {
      absl::MutexLock ns_lock(&session->ns->mu);
      submitted = InsertWindowsLocked(session->ns, windows, on_durable);
    }
    session->output_tail = std::move(seq);
    KeepLast(session->output_tail, bl);
    session->context.insert(session->context.end(), tokens.begin(),
                            tokens.end());
    KeepLast(session->context, bl);
  }
  if (!submitted && on_durable) on_durable(absl::OkStatus());
  return absl::OkStatus();
}

absl::StatusOr<TrieDraft> DraftIndex::Retrieve(absl::string_view session_id,
                                               int32_t decoding_length,
                                               int32_t branch_length,
                                               DraftMode mode) {
  if (decoding_length < 0 || decoding_length > options_.max_decoding_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("decoding_length ", decoding_length, " is outside [0, ",
                     options_.max_decoding_length, "]"));
  }
  if (branch_length < 0 || branch_length > options_.max_branch_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("branch_length ", branch_length, " is outside [0, ",
                     options_.max_branch_length, "] (0 = the session's)"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, FindSession(session_id));
  absl::InlinedVector<int32_t, 32> context;
  {
    absl::MutexLock lock(&session->mu);
    if (session->closed) {
      return absl::NotFoundError(
          absl::StrCat("session ", QuoteInput(session_id), " was closed"));
    }
    context.assign(session->context.begin(), session->context.end());
  }
  if (mode == DraftMode::kOff || decoding_length == 0) return TrieDraft{};
  DraftRequest request;
  request.context = context;
  request.max_match_length = session->branch_length;
  request.decoding_length = decoding_length;
  request.branch_length =
      branch_length == 0 ? session->branch_length : branch_length;
  request.mode = mode;
  absl::ReaderMutexLock lock(&session->ns->mu);
  const TrieSource sources[2] = {
      {session->prompt_trie.get(), DraftSource::kPrompt, options_.prompt_boost},
      {&session->ns->trie, DraftSource::kOutput, 1.0f},
  };
  return BuildTrieDraft(sources, request);
}

absl::Status DraftIndex::CloseSession(
    absl::string_view session_id,
    std::function<void(absl::Status)> on_durable) {
  RETURN_IF_ERROR(CheckSessionId(session_id));
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(
          absl::StrCat("session ", QuoteInput(session_id),
                       " is not open (never opened, closed, or expired after ",
                       absl::FormatDuration(options_.session_lease), " idle)"));
    }
    session = std::move(it->second);
    sessions_.erase(it);
  }
  const bool submitted = Retire(*session, /*expired=*/false, on_durable);
  if (!submitted && on_durable) on_durable(absl::OkStatus());
  return absl::OkStatus();
}

bool DraftIndex::Retire(Session& session, bool expired,
                        std::function<void(absl::Status)>& on_durable) {
  bool submitted = false;
  {
    absl::MutexLock session_lock(&session.mu);
    session.closed = true;
    // The trailing windows (length 2..branch_length) that never became
    // full windows (a copy: at most branch_length tokens).
    const std::vector<int32_t> tail = session.output_tail;
    std::vector<absl::Span<const int32_t>> windows;
    for (size_t i = 0; i + 2 <= tail.size(); ++i) {
      windows.push_back(absl::MakeConstSpan(tail).subspan(i));
    }
    if (!windows.empty()) {
      absl::MutexLock ns_lock(&session.ns->mu);
      submitted = InsertWindowsLocked(session.ns, windows, on_durable);
    }
  }
  session.ns->prompt_nodes.fetch_sub(session.prompt_trie->node_count());
  if (expired) expired_sessions_.fetch_add(1);
  // Last: whoever sees the session gone from the counts sees its effects.
  session.ns->open_sessions.fetch_sub(1);
  return submitted;
}

absl::StatusOr<PruneResult> DraftIndex::Prune(
    absl::string_view ns, int64_t target_nodes,
    std::function<void(absl::Status)> on_durable) {
  ASSIGN_OR_RETURN(std::string name, CanonicalNamespace(ns));
  if (target_nodes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target_nodes ", target_nodes, " is negative (0 = low-water mark)"));
  }
  Namespace* space = FindNamespace(name);
  if (space == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("namespace ", QuoteInput(name), " does not exist"));
  }
  PruneResult result;
  bool submitted = false;
  {
    absl::MutexLock lock(&space->mu);
    const int64_t target =
        target_nodes > 0 ? target_nodes
                         : static_cast<int64_t>(
                               static_cast<double>(options_.capacity_nodes) *
                               options_.low_water);
    std::vector<TrieMutationBatch> batches;
    const TokenTrie::PruneStats stats = PruneLocked(space, target, &batches);
    result.removed_nodes = stats.removed;
    result.remaining_nodes = stats.remaining;
    if (sink_ != nullptr) {
      submitted = SubmitLocked(space, std::move(batches), on_durable);
    }
  }
  if (!submitted && on_durable) on_durable(absl::OkStatus());
  return result;
}

std::vector<NamespaceStats> DraftIndex::Stats(
    absl::string_view ns_filter) const {
  std::vector<Namespace*> spaces;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, space] : namespaces_) {
      if (ns_filter.empty() || name == ns_filter) spaces.push_back(space.get());
    }
  }
  std::sort(
      spaces.begin(), spaces.end(),
      [](const Namespace* a, const Namespace* b) { return a->name < b->name; });
  std::vector<NamespaceStats> out;
  for (Namespace* space : spaces) {
    NamespaceStats s;
    s.name_space = space->name;
    s.vocab_size = space->vocab_size;
    s.capacity = options_.capacity_nodes;
    s.open_sessions = space->open_sessions.load();
    s.prompt_nodes = space->prompt_nodes.load();
    absl::ReaderMutexLock lock(&space->mu);
    s.output_nodes = space->trie.node_count();
    s.prunes = space->prunes;
    s.memory_bytes = static_cast<int64_t>(space->trie.MemoryBytes());
    out.push_back(std::move(s));
  }
  return out;
}

double DraftIndex::BytesPerNode() const {
  std::vector<Namespace*> spaces;
  std::vector<std::shared_ptr<Session>> sessions;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& entry : namespaces_) spaces.push_back(entry.second.get());
    for (const auto& entry : sessions_) sessions.push_back(entry.second);
  }
  double bytes = 0;
  double nodes = 0;
  for (Namespace* space : spaces) {
    absl::ReaderMutexLock lock(&space->mu);
    bytes += static_cast<double>(space->trie.MemoryBytes());
    nodes += static_cast<double>(space->trie.node_count());
  }
  for (const auto& session : sessions) {
    // Prompt tries are read-only once published.
    bytes += static_cast<double>(session->prompt_trie->MemoryBytes());
    nodes += static_cast<double>(session->prompt_trie->node_count());
  }
  return nodes == 0 ? 0.0 : bytes / nodes;
}

absl::Status DraftIndex::ForEachNode(
    absl::string_view ns,
    const std::function<void(absl::Span<const int32_t>, int64_t)>& fn) const {
  ASSIGN_OR_RETURN(std::string name, CanonicalNamespace(ns));
  Namespace* space = FindNamespace(name);
  if (space == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("namespace ", QuoteInput(name), " does not exist"));
  }
  absl::ReaderMutexLock lock(&space->mu);
  space->trie.ForEach(fn);
  return absl::OkStatus();
}

}  // namespace lookahead::draftsvc
