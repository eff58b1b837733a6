// DraftPolicy: how one request wants to be drafted (tree shape, budget,
// branch depth, namespace), transport-neutral. Plain values.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_POLICY_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_POLICY_H_

#include <string>

namespace lookahead::verifysvc {

enum class DraftMode {
  kOff,               // plain decoding
  kTrieHierarchical,  // one tree, shared prefixes merged (the default)
  kTrieParallel,      // independent chains, for ablation
};

struct DraftPolicy {
  DraftMode mode = DraftMode::kOff;
  int decoding_length = 0;  // Most draft tokens per step; 0 = no drafts.
  int branch_length = 0;    // Deepest draft branch; 0 = the source's default.
  std::string name_space;   // Valid per common/draft_namespace.h.

  bool enabled() const {
    return mode != DraftMode::kOff && decoding_length > 0;
  }
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFT_POLICY_H_
