// DraftIndex: Append, a Step entry's effect. Its input is validated whole,
// trimmed to what the session does not hold yet (accepted_offset: a
// retried report is applied once), then the last tree sent is judged
// (calibration), the new output windows
// go into the global trie and the recycled predictions and Jacobi n-grams
// into the pools (shared or private), all under the namespace's writer
// lock so the sink sees them in apply order.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "draftsvc/index/draft_index.h"
#include "draftsvc/index/draft_index_internal.h"

namespace lookahead::draftsvc {

using draft_index_internal::CheckTokens;
using draft_index_internal::KeepLast;
using draft_index_internal::kMaxMutationsPerBatch;

namespace {

// INVALID_ARGUMENT naming field[i], its id and the bound unless every id of
// `ids` is in [0, vocab_size).
absl::Status CheckIds(absl::Span<const int32_t> ids, int32_t vocab_size,
                      const std::string& field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "] is ", ids[i],
                       ", outside [0, vocab_size=", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// ValidateStepInput's checks of one prediction tree, named `field`, of a
// step that accepted `accepted` tokens.
absl::Status ValidatePredictionTree(const IndexOptions& options,
                                    const PredictionInput& tree,
                                    const std::string& field, int64_t accepted,
                                    int32_t vocab_size) {
  const int64_t n = static_cast<int64_t>(tree.tokens.size());
  if (n > options.max_decoding_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".tokens has ", n, " nodes; at most ",
        options.max_decoding_length,
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
  if (tree.k < 1 || tree.k > options.max_prediction_k) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".k is ", tree.k, ", outside [1, max_prediction_k=",
                     options.max_prediction_k, "] (flag --max_prediction_k)"));
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
  RETURN_IF_ERROR(
      CheckIds(tree.tokens, vocab_size, absl::StrCat(field, ".tokens")));
  return CheckIds(tree.top_tokens, vocab_size,
                  absl::StrCat(field, ".top_tokens"));
}

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
    const uint32_t set = node.source_set != 0 ? node.source_set
                                              : CandidateSourceBit(node.source);
    for (int s = 0; s < kNumCandidateSources; ++s) {
      if ((set >> s & 1) == 0) continue;
      const int32_t rank = node.ranks[s] == kNoRank ? 0 : node.ranks[s];
      out.push_back({static_cast<CandidateSource>(s), node.depth, rank, hit,
                     node.matches[s]});
    }
  }
  return out;
}

// Append step 1: judges `sent` (the last tree sent) by input.accepted into
// `calibration`, with the verifier's own record of the tree it verified
// below the same root (a prediction tree with root_after 0) if it sent one.
void Calibrate(const std::vector<DraftNode>& sent, const StepInput& input,
               SourceCalibration& calibration) {
  const PredictionInput* verified = nullptr;
  for (const PredictionInput& tree : input.predictions) {
    if (tree.root_after == 0) verified = &tree;
  }
  if (verified != nullptr) {
    const auto paths = VerifiedPaths(*verified);
    calibration.Observe(Judge(sent, input.accepted, &paths));
  } else {
    calibration.Observe(Judge(sent, input.accepted, nullptr));
  }
}

// How many of the `accepted_size` tokens reported after `offset` a session
// holding `held` accepted tokens has already: 0 without an offset;
// FAILED_PRECONDITION if offset > held (tokens it never got).
absl::StatusOr<int64_t> HeldOverlap(std::optional<int64_t> offset, int64_t held,
                                    size_t accepted_size,
                                    absl::string_view session_id) {
  if (!offset.has_value()) return 0;
  if (*offset > held) {
    return absl::FailedPreconditionError(absl::StrCat(
        "accepted_offset is ", *offset, " but draftsvc holds ", held,
        " accepted tokens for session ", QuoteInput(session_id), " (tokens ",
        held, "..", *offset - 1,
        " never reached it); nothing was applied: reopen the session "
        "(CloseSession, then OpenSession with the context so far as its "
        "prompt; its offsets count from 0 again)"));
  }
  return std::min<int64_t>(held - *offset, static_cast<int64_t>(accepted_size));
}

// The part of `input` new to a session that holds its first `skip` (> 0)
// accepted tokens already (Append's exactly-once rules): the tokens after
// them; prediction trees rooted at or after the last held token, shifted
// to count from the first new token (those rooted in the held tokens came
// with them and were applied then); no n-grams (nothing tells the lost
// report's from new ones). Nothing at all when no token is new. Spans into
// `input`.
StepInput NewPart(const StepInput& input, int64_t skip) {
  StepInput out;
  out.accepted = input.accepted.subspan(static_cast<size_t>(skip));
  out.accepted_offset = input.accepted_offset.value_or(0) + skip;
  if (out.accepted.empty()) return out;
  for (const PredictionInput& tree : input.predictions) {
    if (tree.root_after < skip) continue;
    PredictionInput shifted = tree;
    shifted.root_after -= static_cast<int32_t>(skip);
    out.predictions.push_back(shifted);
  }
  return out;
}

// Every full window (bl + 1 tokens) of `seq` that ends at or after
// `first_new`: the windows the tokens from there complete.
absl::InlinedVector<absl::Span<const int32_t>, 16> NewWindows(
    absl::Span<const int32_t> seq, size_t first_new, size_t bl) {
  absl::InlinedVector<absl::Span<const int32_t>, 16> windows;
  for (size_t end = std::max(first_new + 1, bl + 1); end <= seq.size();
       ++end) {
    windows.push_back(seq.subspan(end - bl - 1, bl + 1));
  }
  return windows;
}

}  // namespace

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
  const int64_t accepted = static_cast<int64_t>(input.accepted.size());
  if (input.accepted_offset.has_value() && *input.accepted_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("accepted_offset is ", *input.accepted_offset,
                     "; must be >= 0 (the tokens reported before "
                     "accepted_tokens[0], counted from OpenSession)"));
  }
  if (input.predictions.size() >
      static_cast<size_t>(options_.max_prediction_trees)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "predictions has ", input.predictions.size(), " trees; at most ",
        options_.max_prediction_trees,
        " allowed (max_prediction_trees, flag --max_prediction_trees)"));
  }
  for (size_t t = 0; t < input.predictions.size(); ++t) {
    RETURN_IF_ERROR(ValidatePredictionTree(options_, input.predictions[t],
                                           absl::StrCat("predictions[", t, "]"),
                                           accepted, vocab_size));
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
    RETURN_IF_ERROR(
        CheckIds(ngram, vocab_size, absl::StrCat("ngrams[", g, "].tokens")));
  }
  return absl::OkStatus();
}

absl::Status DraftIndex::Append(absl::string_view session_id,
                                const StepInput& sent_input,
                                std::function<void(absl::Status)> on_durable,
                                AppendResult* result) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, FindSession(session_id));
  if (sent_input.accepted.size() >
      static_cast<size_t>(options_.max_step_tokens)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step has ", sent_input.accepted.size(), " accepted tokens; at most ",
        options_.max_step_tokens, " allowed"));
  }
  Namespace* const ns = session->ns;
  RETURN_IF_ERROR(CheckTokens(sent_input.accepted, ns->vocab_size, "accepted"));
  RETURN_IF_ERROR(ValidateStepInput(sent_input, ns->vocab_size));
  bool submitted = false;
  std::vector<int32_t> applied;
  {
    absl::MutexLock session_lock(&session->mu);
    if (session->closed) {
      return absl::NotFoundError(
          absl::StrCat("session ", QuoteInput(session_id), " was closed"));
    }
    // 0. Exactly once: only what the session does not hold yet is applied.
    ASSIGN_OR_RETURN(
        const int64_t skip,
        HeldOverlap(sent_input.accepted_offset, session->accepted_tokens,
                    sent_input.accepted.size(), session_id));
    const StepInput new_part =
        skip > 0 ? NewPart(sent_input, skip) : StepInput();
    const StepInput& input = skip > 0 ? new_part : sent_input;
    const absl::Span<const int32_t> tokens = input.accepted;
    if (result != nullptr) result->skipped_tokens = skip;
    // 1. Calibration from the last tree sent. A retried report forgets it
    // unjudged: it went in the answer that was lost, never verified.
    if (skip > 0) {
      session->sent.clear();
    } else if (!tokens.empty() && !session->sent.empty()) {
      Calibrate(session->sent, input, ns->calibration);
      session->sent.clear();
    }
    const size_t bl = static_cast<size_t>(session->branch_length);
    // seq = not-yet-windowed output tail + new tokens.
    std::vector<int32_t> seq = session->output_tail;
    seq.insert(seq.end(), tokens.begin(), tokens.end());
    const auto windows = NewWindows(seq, session->output_tail.size(), bl);
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
    session->accepted_tokens += static_cast<int64_t>(tokens.size());
    applied.assign(tokens.begin(), tokens.end());
  }
  if (!submitted && on_durable) on_durable(absl::OkStatus());
  // The session source follows the tokens applied now (not a retry's
  // overlap), with no lock held.
  if (session_source_ != nullptr) session_source_->Advance(session_id, applied);
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

}  // namespace lookahead::draftsvc
