// DraftIndex's internals shared by its source files (not a public header:
// only they include it). draft_index.cc holds options, namespaces, the
// rebuild and admin; draft_index_sessions.cc sessions and leases;
// draft_index_step.cc Append (validation, calibration, windows, pools);
// draft_index_retrieve.cc retrieval. Here: the session record and the
// checks they share.
//
// Thread-safety: a Session's fields are guarded as annotated; the rest are
// pure functions and constants.
#ifndef LOOKAHEAD_DRAFTSVC_INDEX_DRAFT_INDEX_INTERNAL_H_
#define LOOKAHEAD_DRAFTSVC_INDEX_DRAFT_INDEX_INTERNAL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "draftsvc/index/draft_index.h"

namespace lookahead::draftsvc {

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
  // Output tokens applied since OpenSession (total_tokens - prompt_length):
  // what StepInput::accepted_offset is checked against.
  int64_t accepted_tokens ABSL_GUARDED_BY(mu) = 0;
  // The last mixed tree sent (Retrieve), judged by the next Append.
  std::vector<DraftNode> sent ABSL_GUARDED_BY(mu);
  // Last branch_length OUTPUT tokens: the windows not yet inserted start
  // here.
  std::vector<int32_t> output_tail ABSL_GUARDED_BY(mu);
};

namespace draft_index_internal {

// Prune batches are split so no single batch holds millions of paths.
inline constexpr size_t kMaxMutationsPerBatch = size_t{1} << 16;

// INVALID_ARGUMENT naming `what`, the index, the id and the bound unless
// every id of `tokens` is in [0, vocab_size).
absl::Status CheckTokens(absl::Span<const int32_t> tokens, int32_t vocab_size,
                         absl::string_view what);

// Keeps the last `n` elements of `v`.
inline void KeepLast(std::vector<int32_t>& v, size_t n) {
  if (v.size() > n) v.erase(v.begin(), v.end() - n);
}

}  // namespace draft_index_internal
}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_INDEX_DRAFT_INDEX_INTERNAL_H_
