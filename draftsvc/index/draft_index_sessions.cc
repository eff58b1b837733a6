// DraftIndex: sessions and their leases. OpenSession builds a session's
// prompt trie and admits it under the caps; CloseSession and lease expiry
// retire it (its trailing output windows reach the global trie).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "draftsvc/index/draft_index.h"
#include "draftsvc/index/draft_index_internal.h"

namespace lookahead::draftsvc {

using draft_index_internal::CheckTokens;
using draft_index_internal::KeepLast;

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

// OpenSession's checks of its arguments but the ids, in this order:
// vocab_size, branch_length, the prompt's size and its ids.
absl::Status CheckOpenArguments(const IndexOptions& options, int32_t vocab_size,
                                absl::Span<const int32_t> prompt_tokens,
                                int32_t branch_length) {
  if (vocab_size < 1 || vocab_size > options.max_vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size ", vocab_size, " is outside [1, ",
                     options.max_vocab_size, "]"));
  }
  if (branch_length < 0 || branch_length > options.max_branch_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("branch_length ", branch_length, " is outside [0, ",
                     options.max_branch_length, "] (0 = server default ",
                     options.default_branch_length, ")"));
  }
  if (prompt_tokens.empty()) {
    return absl::InvalidArgumentError(
        "prompt_tokens is empty; send at least 1 token");
  }
  if (prompt_tokens.size() > static_cast<size_t>(options.max_prompt_tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt has ", prompt_tokens.size(), " tokens; at most ",
                     options.max_prompt_tokens, " allowed"));
  }
  return CheckTokens(prompt_tokens, vocab_size, "prompt");
}

}  // namespace

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

absl::StatusOr<OpenResult> DraftIndex::OpenSession(
    absl::string_view session_id, absl::string_view ns, int32_t vocab_size,
    absl::Span<const int32_t> prompt_tokens, int32_t branch_length,
    int32_t resumed_output, const SessionSampling& sampling) {
  // Validate everything before touching any state.
  RETURN_IF_ERROR(CheckSessionId(session_id));
  ASSIGN_OR_RETURN(std::string name, CanonicalNamespace(ns));
  RETURN_IF_ERROR(
      CheckOpenArguments(options_, vocab_size, prompt_tokens, branch_length));
  if (resumed_output < 0 ||
      static_cast<size_t>(resumed_output) > prompt_tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resumed_output_tokens must be in [0, ", prompt_tokens.size(),
        "] (the prompt's size); got ", resumed_output));
  }
  // Cheap checks first so a doomed request builds no trie.
  RETURN_IF_ERROR(Admit(session_id, name, vocab_size));
  std::shared_ptr<Session> session = NewSession(
      session_id, prompt_tokens,
      branch_length == 0 ? options_.default_branch_length : branch_length);
  // The output an earlier session reported: the not-yet-windowed tail the
  // next tokens' windows reach back into (Append keeps its last
  // branch_length tokens the same way).
  const size_t resumed = std::min<size_t>(
      resumed_output, static_cast<size_t>(session->branch_length));
  {
    absl::MutexLock session_lock(&session->mu);  // not shared yet
    session->output_tail.assign(prompt_tokens.end() - resumed,
                                prompt_tokens.end());
  }
  const int64_t prompt_nodes = session->prompt_trie->node_count();

  absl::ReleasableMutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckAdmission(session_id, name, vocab_size));
  auto it = namespaces_.find(name);
  if (it == namespaces_.end()) {
    it = namespaces_.emplace(name, MakeNamespace(name, vocab_size)).first;
  }
  session->ns = it->second.get();
  session->ns->open_sessions.fetch_add(1);
  session->ns->prompt_nodes.fetch_add(prompt_nodes);
  session->last_used_nanos.store(absl::ToUnixNanos(clock_()));
  const int64_t serial = session->serial;
  sessions_.emplace(session->id, std::move(session));
  lock.Release();
  if (session_source_ != nullptr) {
    session_source_->Open(session_id, serial, vocab_size, prompt_tokens,
                          sampling);
  }
  return OpenResult{name, prompt_nodes, serial};
}

absl::Status DraftIndex::CheckAdmission(absl::string_view session_id,
                                        const std::string& name,
                                        int32_t vocab_size) const {
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
  if (it->second->open_sessions.load() >= options_.max_sessions_per_namespace) {
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
}

absl::Status DraftIndex::Admit(absl::string_view session_id,
                               const std::string& name, int32_t vocab_size) {
  absl::Status admitted;
  {
    absl::ReaderMutexLock lock(&mu_);
    admitted = CheckAdmission(session_id, name, vocab_size);
  }
  if (absl::IsAlreadyExists(admitted) || absl::IsResourceExhausted(admitted)) {
    // An expired session the sweeper has not reached yet may hold the id
    // or the slot.
    if (ExpireIdleSessions(clock_()) > 0) {
      absl::ReaderMutexLock lock(&mu_);
      admitted = CheckAdmission(session_id, name, vocab_size);
    }
  }
  return admitted;
}

std::shared_ptr<DraftIndex::Session> DraftIndex::NewSession(
    absl::string_view session_id, absl::Span<const int32_t> prompt_tokens,
    int32_t branch_length) {
  auto session = std::make_shared<Session>();
  session->id = std::string(session_id);
  session->serial = next_serial_.fetch_add(1);
  session->branch_length = branch_length;
  session->prompt_length = static_cast<int64_t>(prompt_tokens.size());
  session->context_keep = static_cast<size_t>(
      std::max(branch_length,
               options_.ngram_enabled ? options_.ngram.max_key_tokens : 0));
  if (options_.ngram_enabled) {
    NgramPoolOptions private_pool = options_.ngram;
    private_pool.capacity_entries = options_.session_ngram_capacity_entries;
    session->pool = NgramPool::Create(private_pool).value();  // Validated.
  }
  session->prompt_trie = std::make_unique<TokenTrie>();
  const size_t window = static_cast<size_t>(branch_length) + 1;
  for (size_t i = 0; i + 1 < prompt_tokens.size(); ++i) {
    session->prompt_trie->Insert(prompt_tokens.subspan(i, window));
  }
  {
    absl::MutexLock lock(&session->mu);
    session->context.assign(prompt_tokens.begin(), prompt_tokens.end());
    KeepLast(session->context, session->context_keep);
    session->total_tokens = session->prompt_length;
  }
  return session;
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
  if (session_source_ != nullptr) {
    session_source_->Retired(session.id, session.serial);
  }
  return submitted;
}

absl::Status DraftIndex::CheckSourceVocabulary(int32_t vocab_size) const {
  if (session_source_ == nullptr) {
    return absl::FailedPreconditionError("no session source runs");
  }
  return session_source_->CheckVocabulary(vocab_size);
}

absl::Status DraftIndex::CheckSessionSource(
    absl::string_view session_id) const {
  if (session_source_ == nullptr) {
    return absl::NotFoundError("no session source runs");
  }
  return session_source_->Check(session_id);
}

double DraftIndex::SourceSecondsPerToken() const {
  return session_source_ != nullptr ? session_source_->RecentSecondsPerToken()
                                    : 0;
}

absl::Duration DraftIndex::SourceStepDeadline() const {
  return session_source_ != nullptr ? session_source_->step_deadline()
                                    : absl::ZeroDuration();
}

double DraftIndex::TakeSourceSeconds(absl::string_view session_id) {
  return session_source_ != nullptr ? session_source_->TakeSeconds(session_id)
                                    : 0;
}

void DraftIndex::WarmSessionSource(absl::string_view session_id) {
  if (session_source_ == nullptr) return;
  session_source_->Draft(session_id, /*budget=*/0, absl::InfinitePast());
}

}  // namespace lookahead::draftsvc
