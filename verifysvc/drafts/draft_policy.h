// DraftPolicy: how one request wants to be drafted (tree shape, budget,
// branch depth, namespace, sources, Jacobi window), transport-neutral.
// Plain values.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_POLICY_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_POLICY_H_

#include <cstdint>
#include <string>

#include "engine/model/draft_tree.h"

namespace lookahead::verifysvc {

enum class DraftMode {
  kOff,               // plain decoding
  kTrieHierarchical,  // one tree, shared prefixes merged (the default)
  kTrieParallel,      // independent chains, for ablation
};

// How the request samples, passed to model-based sources so that they draft
// what the verifier is likely to draw. Drafts only: acceptance is always the
// verifier's own draw.
struct DraftSamplingHint {
  float temperature = 0;  // 0 = greedy
  float top_p = 0;        // 0 = off
  int top_k = 0;          // 0 = off
  uint64_t seed = 0;
};

struct DraftPolicy {
  DraftMode mode = DraftMode::kOff;
  int decoding_length = 0;  // Most draft tokens per step; 0 = no drafts.
  int branch_length = 0;    // Deepest draft branch; 0 = the source's default.
  std::string name_space;   // Valid per common/draft_namespace.h.
  // Sources the request drafts from (bits of engine::DraftSourceTag: kTrie,
  // kNgram, kAssistant); 0 = the draft service's defaults. A source that is
  // not served fails the request (FAILED_PRECONDITION).
  engine::DraftSourceSet sources = 0;
  // Jacobi lookahead window (Lookahead Decoding's W, N, G), resolved to the
  // server's defaults and within its maxima: W positions x (N - 1) levels,
  // at most G harvested n-grams per step; W or N of 0 (a server default of
  // 0) = no window. The scheduler runs it as scratch rows of the verify
  // pass (verifysvc/drafts/jacobi_window.h) and hands its n-grams to
  // DraftSource::ObserveNgrams.
  int lookahead_window = 0;
  int lookahead_ngram = 0;
  int lookahead_guess = 0;
  DraftSamplingHint sampling;

  bool enabled() const {
    return mode != DraftMode::kOff && decoding_length > 0;
  }
  // True iff the request may draft from `tag` (explicitly, or by default).
  bool MayUse(engine::DraftSourceTag tag) const {
    return sources == 0 || (sources & engine::SourceBit(tag)) != 0;
  }
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_POLICY_H_
