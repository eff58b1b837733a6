// Test helpers shared by the in-process draft sources' unit tests.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_SOURCE_TEST_UTIL_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_SOURCE_TEST_UTIL_H_

#include "engine/model/draft_tree.h"
#include "verifysvc/drafts/draft_policy.h"

namespace lookahead::verifysvc {

// A hierarchical policy (decoding length 16, branches of 4, namespace
// "default") that may draft from `sources` (0: every source).
inline DraftPolicy SourceTestPolicy(engine::DraftSourceSet sources = 0) {
  DraftPolicy policy;
  policy.mode = DraftMode::kTrieHierarchical;
  policy.decoding_length = 16;
  policy.branch_length = 4;
  policy.name_space = "default";
  policy.sources = sources;
  return policy;
}

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_SOURCE_TEST_UTIL_H_
