// DraftIndex: options, namespaces, the rebuild from disk, the mutations'
// way to the sink, and admin (prune, stats). Sessions and leases are in
// draft_index_sessions.cc, Append in draft_index_step.cc, retrieval in
// draft_index_retrieve.cc.
#include "draftsvc/index/draft_index.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "draftsvc/index/draft_index_internal.h"
#include "draftsvc/storage/trie_format.h"

namespace lookahead::draftsvc {

using draft_index_internal::CheckTokens;
using draft_index_internal::kMaxMutationsPerBatch;

namespace {

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

// ValidateOptions' checks of the tries, request limits, sessions and lease.
absl::Status ValidateTrieOptions(const IndexOptions& o) {
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

// ValidateOptions' checks of the n-gram pools, Step limits and calibration.
absl::Status ValidateNgramOptions(const IndexOptions& o) {
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

}  // namespace

namespace draft_index_internal {

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

}  // namespace draft_index_internal

absl::Status DraftIndex::ValidateOptions(const IndexOptions& o) {
  RETURN_IF_ERROR(ValidateTrieOptions(o));
  return ValidateNgramOptions(o);
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
    for (int i = 0; i < kNumCandidateSources; ++i) {
      const CandidateSource source = static_cast<CandidateSource>(i);
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
