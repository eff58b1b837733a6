// SuffixRepeat: whether a sequence's latest tokens repeat something it held
// before (its prompt or its own output), the local evidence that a draft
// copied from text will hold this step.
//
// Draft quality differs sharply between the two kinds of step: where the
// last kTokens tokens occur earlier in the context (an answer quoting its
// document, code reusing a name), a trie or n-gram draft often follows the
// earlier occurrence; elsewhere one rarely holds. The scheduler paces the
// two kinds separately (one DraftPacer each), so a sequence whose drafts
// fail in free text still asks for them where its text repeats.
//
// An exact set of the context's kTokens-grams (ids packed into 64 bits):
// O(1) per token, ~32 bytes per token of context. Thread-compatible.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_SUFFIX_REPEAT_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_SUFFIX_REPEAT_H_

#include <cstdint>
#include <unordered_set>

#include "absl/types/span.h"

namespace lookahead::verifysvc {

class SuffixRepeat {
 public:
  static constexpr int kTokens = 3;

  // Appends tokens to the context (ids in [0, 2^21); others never match).
  void Append(absl::Span<const int32_t> tokens);

  // True iff the context's last kTokens tokens also occur, in order,
  // ending at an earlier position.
  bool repeats() const { return repeats_; }

 private:
  std::unordered_set<uint64_t> seen_;  // Every kTokens-gram so far.
  uint64_t window_ = 0;                // The last kTokens ids, 21 bits each.
  int64_t length_ = 0;
  // Appends left before the window holds only ids it can pack.
  int poisoned_ = 0;
  bool repeats_ = false;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_SUFFIX_REPEAT_H_
