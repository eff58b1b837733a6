#include "draftsvc/index/draft_index.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <utility>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "draftsvc/storage/trie_format.h"

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
  int64_t serial = 0;  // OpenResult::serial.
  Namespace* ns = nullptr;
  int32_t branch_length = 0;
  int64_t prompt_length = 0;               // Prompt tokens.
  size_t context_keep = 0;                 // Length of the context tail.
  std::unique_ptr<TokenTrie> prompt_trie;  // Read-only once published.
  // The private n-gram pool (null iff ngram_enabled is false); thread-safe.
  std::unique_ptr<NgramPool> pool;
  // Last open or FindSession, as absl::ToUnixNanos: renewed under mu_'s
  // reader lock, read by the sweeper under its writer lock.
  std::atomic<int64_t> last_used_nanos{0};

  absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;
  // Last context_keep (max(branch_length, ngram.max_key_tokens)) tokens of
  // prompt + output, oldest first.
  std::vector<int32_t> context ABSL_GUARDED_BY(mu);
  // Prompt + output tokens so far: context[0] sits at absolute position
  // total_tokens - context.size().
  int64_t total_tokens ABSL_GUARDED_BY(mu) = 0;
  // The last mixed tree sent (Retrieve), judged by the next Append.
  std::vector<DraftNode> sent ABSL_GUARDED_BY(mu);
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
  if (absl::Status pool = NgramPool::ValidateOptions(o.ngram); !pool.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("n-gram pool (flags --ngram_*): ", pool.message()));
  }
  NgramPoolOptions session_pool = o.ngram;
  session_pool.capacity_entries = o.session_ngram_capacity_entries;
  if (absl::Status pool = NgramPool::ValidateOptions(session_pool);
      !pool.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("session n-gram pool: ", pool.message(),
                     " (session_ngram_capacity_entries)"));
  }
  if (o.max_prediction_trees < 0 || o.max_step_ngrams < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_prediction_trees ", o.max_prediction_trees,
        " and max_step_ngrams ", o.max_step_ngrams, " must be >= 0"));
  }
  if (o.max_prediction_k < 1 || o.max_prediction_k > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_prediction_k ", o.max_prediction_k, " is outside [1, 1024]"));
  }
  if (o.ngram_max_tokens < 2 || o.ngram_max_tokens > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ngram_max_tokens ", o.ngram_max_tokens, " is outside [2, 1024]"));
  }
  if (o.ngram_lookup_results < 1 || o.ngram_lookup_results > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("ngram_lookup_results ",
                                                   o.ngram_lookup_results,
                                                   " is outside [1, 1024]"));
  }
  if (!(o.calibration.prior_strength >= 0) ||
      !(o.calibration.decay > 0 && o.calibration.decay <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration prior_strength ", o.calibration.prior_strength,
        " must be >= 0 and decay ", o.calibration.decay, " in (0, 1]"));
  }
  return absl::OkStatus();
}

std::unique_ptr<DraftIndex::Namespace> DraftIndex::MakeNamespace(
    std::string name, int32_t vocab_size) const {
  auto space = std::make_unique<Namespace>(std::move(name), vocab_size,
                                           options_.calibration);
  if (options_.ngram_enabled) {
    space->pool = NgramPool::Create(options_.ngram).value();  // Validated.
  }
  return space;
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
  namespaces_.emplace(name, MakeNamespace(name, vocab_size));
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

absl::Status DraftIndex::RestoreNgram(absl::string_view ns,
                                      absl::Span<const int32_t> key,
                                      absl::Span<const int32_t> continuation,
                                      int64_t count) {
  ASSIGN_OR_RETURN(std::string name, CanonicalNamespace(ns));
  Namespace* space = FindNamespace(name);
  if (space == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("namespace ", QuoteInput(name),
                     " not restored yet (RestoreNamespace first)"));
  }
  if (space->pool == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(CheckTokens(key, space->vocab_size, "restored n-gram key"));
  RETURN_IF_ERROR(CheckTokens(continuation, space->vocab_size,
                              "restored n-gram continuation"));
  absl::MutexLock lock(&space->mu);
  // A row these options cannot hold (another --ngram_max_key_tokens, say)
  // is dropped from the store by the repair writes, not fatal.
  space->pool
      ->Restore(key, continuation, count,
                sink_ ? &space->restore_mutations : nullptr)
      .IgnoreError();
  return absl::OkStatus();
}

void DraftIndex::FinishRestore() {
  std::vector<Namespace*> spaces;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& entry : namespaces_) spaces.push_back(entry.second.get());
  }
  for (Namespace* space : spaces) {
    absl::MutexLock lock(&space->mu);
    if (space->restore_mutations.empty()) continue;
    std::vector<TrieMutationBatch> batches;
    std::vector<TrieMutation>& all = space->restore_mutations;
    for (size_t i = 0; i < all.size(); i += kMaxMutationsPerBatch) {
      TrieMutationBatch batch;
      batch.name_space = space->name;
      batch.vocab_size = space->vocab_size;
      const size_t end = std::min(all.size(), i + kMaxMutationsPerBatch);
      batch.mutations.assign(std::make_move_iterator(all.begin() + i),
                             std::make_move_iterator(all.begin() + end));
      batches.push_back(std::move(batch));
    }
    all.clear();
    std::function<void(absl::Status)> nobody_waits;
    SubmitLocked(space, std::move(batches), nobody_waits);
  }
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
  session->serial = next_serial_.fetch_add(1);
  session->branch_length = bl;
  session->prompt_length = static_cast<int64_t>(prompt_tokens.size());
  session->context_keep = static_cast<size_t>(
      std::max(bl, options_.ngram_enabled ? options_.ngram.max_key_tokens : 0));
  if (options_.ngram_enabled) {
    NgramPoolOptions private_pool = options_.ngram;
    private_pool.capacity_entries = options_.session_ngram_capacity_entries;
    session->pool = NgramPool::Create(private_pool).value();  // Validated.
  }
  session->prompt_trie = std::make_unique<TokenTrie>();
  const size_t window = static_cast<size_t>(bl) + 1;
  for (size_t i = 0; i + 1 < prompt_tokens.size(); ++i) {
    session->prompt_trie->Insert(prompt_tokens.subspan(i, window));
  }
  {
    absl::MutexLock lock(&session->mu);
    session->context.assign(prompt_tokens.begin(), prompt_tokens.end());
    KeepLast(session->context, session->context_keep);
    session->total_tokens = session->prompt_length;
  }
  const int64_t prompt_nodes = session->prompt_trie->node_count();

  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(check_admission());
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
  return OpenResult{name, prompt_nodes, serial};
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
  return ApplyLocked(ns, windows, {}, on_durable);
}

absl::Status DraftIndex::Append(absl::string_view session_id,
                                absl::Span<const int32_t> tokens,
                                std::function<void(absl::Status)> on_durable) {
  StepInput input;
  input.accepted = tokens;
  return Append(session_id, input, std::move(on_durable));
}

absl::Status DraftIndex::ValidateStepInput(const StepInput& input,
                                           int32_t vocab_size) const {
  auto check_ids = [vocab_size](absl::Span<const int32_t> ids,
                                const std::string& field) -> absl::Status {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, "[", i, "] is ", ids[i],
                         ", outside [0, vocab_size=", vocab_size, ")"));
      }
    }
    return absl::OkStatus();
  };
  const int64_t accepted = static_cast<int64_t>(input.accepted.size());
  if (input.predictions.size() >
      static_cast<size_t>(options_.max_prediction_trees)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "predictions has ", input.predictions.size(), " trees; at most ",
        options_.max_prediction_trees,
        " allowed (max_prediction_trees, flag --max_prediction_trees)"));
  }
  for (size_t t = 0; t < input.predictions.size(); ++t) {
    const PredictionInput& tree = input.predictions[t];
    const std::string field = absl::StrCat("predictions[", t, "]");
    const int64_t n = static_cast<int64_t>(tree.tokens.size());
    if (n > options_.max_decoding_length) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".tokens has ", n, " nodes; at most ",
          options_.max_decoding_length,
          " allowed (max_decoding_length, flag --max_decoding_length)"));
    }
    if (tree.parents.size() != tree.tokens.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".parents has ", tree.parents.size(),
                       " entries but tokens has ", n, "; need one each"));
    }
    if (tree.root_after < 0 || tree.root_after > accepted) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".root_after is ", tree.root_after,
                       ", outside [0, accepted_tokens size=", accepted, "]"));
    }
    if (tree.k < 1 || tree.k > options_.max_prediction_k) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".k is ", tree.k, ", outside [1, max_prediction_k=",
          options_.max_prediction_k, "] (flag --max_prediction_k)"));
    }
    const int64_t want = int64_t{tree.k} * (n + 1);
    if (static_cast<int64_t>(tree.top_tokens.size()) != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".top_tokens has ", tree.top_tokens.size(),
          " ids; need k x (nodes + 1) = ", tree.k, " x ", n + 1, " = ", want));
    }
    for (int64_t i = 0; i < n; ++i) {
      if (tree.parents[i] < -1 || tree.parents[i] >= i) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".parents[", i, "] is ", tree.parents[i],
                         ", outside [-1, ", i, ")"));
      }
    }
    RETURN_IF_ERROR(check_ids(tree.tokens, absl::StrCat(field, ".tokens")));
    RETURN_IF_ERROR(
        check_ids(tree.top_tokens, absl::StrCat(field, ".top_tokens")));
  }
  if (input.ngrams.size() > static_cast<size_t>(options_.max_step_ngrams)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ngrams has ", input.ngrams.size(), " n-grams; at most ",
                     options_.max_step_ngrams,
                     " allowed (max_step_ngrams, flag --max_step_ngrams)"));
  }
  for (size_t g = 0; g < input.ngrams.size(); ++g) {
    const absl::Span<const int32_t> ngram = input.ngrams[g];
    if (ngram.size() < 2 ||
        ngram.size() > static_cast<size_t>(options_.ngram_max_tokens)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ngrams[", g, "].tokens has ", ngram.size(),
          " ids, outside [2, ngram_max_tokens=", options_.ngram_max_tokens,
          "] (flag --ngram_max_tokens)"));
    }
    RETURN_IF_ERROR(check_ids(ngram, absl::StrCat("ngrams[", g, "].tokens")));
  }
  return absl::OkStatus();
}

namespace {

// The token paths (below the root) of a verified tree's nodes.
absl::flat_hash_set<std::vector<int32_t>> VerifiedPaths(
    const PredictionInput& tree) {
  absl::flat_hash_set<std::vector<int32_t>> out;
  std::vector<std::vector<int32_t>> paths(tree.tokens.size());
  for (size_t i = 0; i < tree.tokens.size(); ++i) {
    if (tree.parents[i] >= 0) paths[i] = paths[tree.parents[i]];
    paths[i].push_back(tree.tokens[i]);
    out.insert(paths[i]);
  }
  return out;
}

// Judges `sent` by the tokens accepted after it (the first follows the
// root): every node whose parent was accepted, or that hangs off the root,
// once per source of its set, accepted iff on the accepted path. If
// `verified` is not null (the verifier said which nodes it verified: its
// PredictionTree below the same root), nodes it did not verify (its budget
// or its own mixer cut them) are not judged.
std::vector<SourceCalibration::Observation> Judge(
    const std::vector<DraftNode>& sent, absl::Span<const int32_t> accepted,
    const absl::flat_hash_set<std::vector<int32_t>>* verified) {
  std::vector<SourceCalibration::Observation> out;
  std::vector<char> on_path(sent.size(), 0);
  std::vector<std::vector<int32_t>> paths(verified != nullptr ? sent.size()
                                                              : 0);
  for (size_t i = 0; i < sent.size(); ++i) {
    const DraftNode& node = sent[i];
    if (node.parent >= 0 && !on_path[node.parent]) continue;
    if (verified != nullptr) {
      if (node.parent >= 0) paths[i] = paths[node.parent];
      paths[i].push_back(node.token);
      if (!verified->contains(paths[i])) continue;
    }
    const size_t at = static_cast<size_t>(node.depth) - 1;
    const bool hit = at < accepted.size() && accepted[at] == node.token;
    on_path[i] = hit;
    const uint32_t set =
        node.source_set != 0 ? node.source_set : SourceBit(node.source);
    for (int s = 0; s < kNumDraftSources; ++s) {
      if ((set >> s & 1) == 0) continue;
      const int32_t rank = node.ranks[s] == kNoRank ? 0 : node.ranks[s];
      out.push_back(
          {static_cast<DraftSource>(s), node.depth, rank, hit, node.matches[s]});
    }
  }
  return out;
}

}  // namespace

absl::Status DraftIndex::Append(absl::string_view session_id,
                                const StepInput& input,
                                std::function<void(absl::Status)> on_durable) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, FindSession(session_id));
  const absl::Span<const int32_t> tokens = input.accepted;
  if (tokens.size() > static_cast<size_t>(options_.max_step_tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step has ", tokens.size(), " accepted tokens; at most ",
                     options_.max_step_tokens, " allowed"));
  }
  Namespace* const ns = session->ns;
  RETURN_IF_ERROR(CheckTokens(tokens, ns->vocab_size, "accepted"));
  RETURN_IF_ERROR(ValidateStepInput(input, ns->vocab_size));
  bool submitted = false;
  {
    absl::MutexLock session_lock(&session->mu);
    if (session->closed) {
      return absl::NotFoundError(
          absl::StrCat("session ", QuoteInput(session_id), " was closed"));
    }
    // 1. Calibration from the last tree sent.
    if (!tokens.empty() && !session->sent.empty()) {
      // The verifier's own record of the tree it verified below the same
      // root, if it sent one.
      const PredictionInput* verified = nullptr;
      for (const PredictionInput& tree : input.predictions) {
        if (tree.root_after == 0) verified = &tree;
      }
      if (verified != nullptr) {
        const auto paths = VerifiedPaths(*verified);
        ns->calibration.Observe(Judge(session->sent, tokens, &paths));
      } else {
        ns->calibration.Observe(Judge(session->sent, tokens, nullptr));
      }
      session->sent.clear();
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
    // 3./4. Pool entries, split by isolation.
    std::vector<PoolAdd> shared_adds;
    std::vector<PoolAdd> private_adds;
    if (ns->pool != nullptr &&
        (!input.predictions.empty() || !input.ngrams.empty())) {
      CollectPoolAdds(session->context, session->total_tokens,
                      session->prompt_length, input, &shared_adds,
                      &private_adds);
    }
    if (!windows.empty() || !shared_adds.empty()) {
      absl::MutexLock ns_lock(&ns->mu);
      submitted = ApplyLocked(ns, windows, shared_adds, on_durable);
    }
    for (const PoolAdd& add : private_adds) {
      // Checked above (ids, lengths, counts); a private pool is never
      // persisted.
      session->pool->Add(add.key, add.continuation, add.count).IgnoreError();
    }
    session->output_tail = std::move(seq);
    KeepLast(session->output_tail, bl);
    session->context.insert(session->context.end(), tokens.begin(),
                            tokens.end());
    KeepLast(session->context, session->context_keep);
    session->total_tokens += static_cast<int64_t>(tokens.size());
  }
  if (!submitted && on_durable) on_durable(absl::OkStatus());
  return absl::OkStatus();
}

void DraftIndex::CollectPoolAdds(absl::Span<const int32_t> context,
                                 int64_t total_tokens, int64_t prompt_length,
                                 const StepInput& input,
                                 std::vector<PoolAdd>* shared,
                                 std::vector<PoolAdd>* private_adds) const {
  const absl::Span<const int32_t> accepted = input.accepted;
  const size_t max_key = static_cast<size_t>(options_.ngram.max_key_tokens);
  // buffer = context tail + accepted; buffer[i] is at absolute position
  // base + i, a prompt position iff that is < prompt_length.
  std::vector<int32_t> buffer(context.begin(), context.end());
  const int64_t base = total_tokens - static_cast<int64_t>(context.size());
  const size_t old_size = buffer.size();
  buffer.insert(buffer.end(), accepted.begin(), accepted.end());

  std::vector<int32_t> ctx;
  std::vector<char> ctx_private;
  std::vector<int32_t> path;
  for (const PredictionInput& tree : input.predictions) {
    const int32_t n = static_cast<int32_t>(tree.tokens.size());
    // The root is buffer[root]: the last token before the tree.
    const int64_t root = static_cast<int64_t>(old_size) + tree.root_after - 1;
    std::vector<int32_t> depth(n);
    std::vector<char> confirmed(n);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t p = tree.parents[i];
      depth[i] = p < 0 ? 1 : depth[p] + 1;
      const int64_t at = int64_t{tree.root_after} + depth[i] - 1;
      confirmed[i] = (p < 0 || confirmed[p]) &&
                     at < static_cast<int64_t>(accepted.size()) &&
                     accepted[at] == tree.tokens[i];
    }
    for (int32_t row = 0; row <= n; ++row) {
      // The row's context, its last max_key tokens, with privacy flags.
      path.clear();
      for (int32_t v = row - 1; v >= 0; v = tree.parents[v]) path.push_back(v);
      std::reverse(path.begin(), path.end());
      ctx.clear();
      ctx_private.clear();
      const int64_t from =
          std::max<int64_t>(0, root + 1 - static_cast<int64_t>(max_key));
      for (int64_t i = from; i <= root; ++i) {
        ctx.push_back(buffer[i]);
        ctx_private.push_back(base + i < prompt_length);
      }
      for (int32_t v : path) {
        ctx.push_back(tree.tokens[v]);
        ctx_private.push_back(!confirmed[v]);
      }
      const size_t keys = std::min(max_key, ctx.size());
      for (int32_t r = 0; r < tree.k; ++r) {
        const int32_t token = tree.top_tokens[int64_t{row} * tree.k + r];
        bool is_private = false;
        for (size_t j = 1; j <= keys; ++j) {
          is_private = is_private || ctx_private[ctx.size() - j];
          PoolAdd add;
          add.key.assign(ctx.end() - j, ctx.end());
          add.continuation = {token};
          add.count = tree.k - r;
          (is_private ? private_adds : shared)->push_back(std::move(add));
        }
      }
    }
  }
  const size_t max_continuation =
      static_cast<size_t>(options_.ngram.max_continuation_tokens);
  for (const absl::Span<const int32_t> ngram : input.ngrams) {
    for (size_t j = 1; j <= std::min(max_key, ngram.size() - 1); ++j) {
      PoolAdd add;
      add.key.assign(ngram.begin(), ngram.begin() + j);
      add.continuation.assign(
          ngram.begin() + j,
          ngram.begin() + std::min(ngram.size(), j + max_continuation));
      shared->push_back(std::move(add));
    }
  }
}

bool DraftIndex::ApplyLocked(
    Namespace* ns, absl::Span<const absl::Span<const int32_t>> windows,
    absl::Span<const PoolAdd> pool_adds,
    std::function<void(absl::Status)>& on_durable) {
  std::vector<TrieMutationBatch> batches;
  TrieMutationBatch batch;
  batch.name_space = ns->name;
  batch.vocab_size = ns->vocab_size;
  for (absl::Span<const int32_t> w : windows) {
    ns->trie.Insert(w, sink_ ? &batch.mutations : nullptr);
  }
  for (const PoolAdd& add : pool_adds) {
    // Checked by ValidateStepInput and built within the pool's limits.
    ns->pool
        ->Add(add.key, add.continuation, add.count,
              sink_ ? &batch.mutations : nullptr)
        .IgnoreError();
    if (batch.mutations.size() >= kMaxMutationsPerBatch) {
      batches.push_back(std::move(batch));
      batch = TrieMutationBatch();
      batch.name_space = ns->name;
      batch.vocab_size = ns->vocab_size;
    }
  }
  if (!batch.mutations.empty()) batches.push_back(std::move(batch));
  if (ns->trie.node_count() > options_.capacity_nodes) {
    const int64_t target = static_cast<int64_t>(
        static_cast<double>(options_.capacity_nodes) * options_.low_water);
    PruneLocked(ns, target, &batches);
  }
  return SubmitLocked(ns, std::move(batches), on_durable);
}

absl::Status DraftIndex::CheckRetrieveLimits(int32_t decoding_length,
                                             int32_t branch_length) const {
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
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<DraftIndex::Session>> DraftIndex::SessionContext(
    absl::string_view session_id, absl::InlinedVector<int32_t, 32>* context) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, FindSession(session_id));
  absl::MutexLock lock(&session->mu);
  if (session->closed) {
    return absl::NotFoundError(
        absl::StrCat("session ", QuoteInput(session_id), " was closed"));
  }
  context->assign(session->context.begin(), session->context.end());
  return session;
}

absl::StatusOr<TrieDraft> DraftIndex::Retrieve(absl::string_view session_id,
                                               int32_t decoding_length,
                                               int32_t branch_length,
                                               DraftMode mode) {
  RETURN_IF_ERROR(CheckRetrieveLimits(decoding_length, branch_length));
  absl::InlinedVector<int32_t, 32> context;
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                   SessionContext(session_id, &context));
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

absl::StatusOr<TrieDraft> DraftIndex::Retrieve(absl::string_view session_id,
                                               const RetrieveRequest& request) {
  RETURN_IF_ERROR(
      CheckRetrieveLimits(request.decoding_length, request.branch_length));
  absl::InlinedVector<int32_t, 32> context;
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                   SessionContext(session_id, &context));
  if (request.mode == DraftMode::kOff || request.decoding_length == 0) {
    return TrieDraft{};
  }
  Namespace* const ns = session->ns;
  const int32_t branch_length = request.branch_length == 0
                                    ? session->branch_length
                                    : request.branch_length;
  const CalibrationTable rates = ns->calibration.Snapshot();
  std::vector<CandidateTree> candidates;
  constexpr uint32_t kTries =
      SourceBit(DraftSource::kPrompt) | SourceBit(DraftSource::kOutput);
  if ((request.sources & kTries) != 0) {
    // Each trie proposes a full budget on its own, so that its sibling
    // ranks are its own and the mixer weighs the two by calibration.
    DraftRequest trie_request;
    trie_request.context = context;
    trie_request.max_match_length = session->branch_length;
    trie_request.decoding_length = request.decoding_length;
    trie_request.branch_length = branch_length;
    const TrieSource prompt = {session->prompt_trie.get(), DraftSource::kPrompt,
                               1.0f};
    candidates.push_back(TrieCandidates(
        BuildTrieDraft({&prompt, 1}, trie_request), DraftSource::kPrompt));
    absl::ReaderMutexLock lock(&ns->mu);
    const TrieSource output = {&ns->trie, DraftSource::kOutput, 1.0f};
    candidates.push_back(TrieCandidates(
        BuildTrieDraft({&output, 1}, trie_request), DraftSource::kOutput));
  }
  if ((request.sources & SourceBit(DraftSource::kNgram)) != 0 &&
      ns->pool != nullptr) {
    // The session's own pool first: it is the more specific evidence.
    const NgramPool* pools[] = {session->pool.get(), ns->pool.get()};
    candidates.push_back(NgramCandidates(pools, context, rates,
                                         request.decoding_length, branch_length,
                                         options_.ngram_lookup_results));
  }
  for (const CandidateTree& extra : request.extra) candidates.push_back(extra);
  MixRequest mix;
  mix.decoding_length = request.decoding_length;
  mix.branch_length = branch_length;
  mix.mode = request.mode;
  TrieDraft draft = MixDrafts(candidates, rates, mix);
  std::array<int64_t, kNumDraftSources> proposed{};
  for (const DraftNode& node : draft.nodes) {
    for (int s = 0; s < kNumDraftSources; ++s) {
      proposed[s] += node.source_set >> s & 1;
    }
  }
  ns->calibration.CountProposed(proposed);
  {
    absl::MutexLock lock(&session->mu);
    session->sent = draft.nodes;
  }
  return draft;
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
  if (retire_listener_) retire_listener_(session.id, session.serial);
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
    if (space->pool != nullptr) {
      const NgramPoolStats pool = space->pool->Stats();
      s.ngram_entries = pool.entries;
      s.ngram_keys = pool.keys;
      s.ngram_prunes = pool.prunes;
    }
    for (int i = 0; i < kNumDraftSources; ++i) {
      const DraftSource source = static_cast<DraftSource>(i);
      const SourceTotals totals = space->calibration.totals(source);
      s.sources.push_back({source, totals.proposed, totals.judged,
                           totals.accepted,
                           space->calibration.DepthAcceptance(source)});
    }
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
