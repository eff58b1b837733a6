// The v1 API's rule for draft namespace names (DraftParams.namespace,
// OpenSessionRequest.namespace): 1..128 bytes of [A-Za-z0-9_.-]; empty on
// the wire selects "default". Every side of the contract checks names with
// ValidateNamespaceName: verifysvc up front, draftsvc before its storage
// keys them. Pure functions; thread-safe.
#ifndef LOOKAHEAD_PROTO_NAMESPACE_NAME_H_
#define LOOKAHEAD_PROTO_NAMESPACE_NAME_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lookahead::v1 {

inline constexpr int kMaxNamespaceBytes = 128;
inline constexpr char kDefaultNamespace[] = "default";

// Returns OK iff `name` is 1..kMaxNamespaceBytes bytes of [A-Za-z0-9_.-];
// else INVALID_ARGUMENT saying what is wrong (the name is quoted, escaped,
// only when it is short enough to be worth repeating).
absl::Status ValidateNamespaceName(absl::string_view name);

}  // namespace lookahead::v1

#endif  // LOOKAHEAD_PROTO_NAMESPACE_NAME_H_
