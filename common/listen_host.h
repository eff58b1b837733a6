// The rule for where a server without authentication may listen: loopback
// only (127.0.0.0/8, ::1, localhost), unless its operator says otherwise
// with --allow_unauthenticated. Pure functions; thread-safe.
#ifndef LOOKAHEAD_COMMON_LISTEN_HOST_H_
#define LOOKAHEAD_COMMON_LISTEN_HOST_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lookahead {

// True iff `host` ("127.0.0.1", "[::1]", "localhost", ...) only reaches this
// machine. "0.0.0.0", "::" and every other address are not loopback.
bool IsLoopbackHost(absl::string_view host);

// OK iff `authenticated`, or `allow_unauthenticated`, or `host` is loopback.
// Else INVALID_ARGUMENT naming --host, `auth_flags` (what would authenticate
// clients, e.g. "--api_keys_file") and --allow_unauthenticated.
absl::Status CheckListenHost(absl::string_view host, bool authenticated,
                             bool allow_unauthenticated,
                             absl::string_view auth_flags);

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_LISTEN_HOST_H_
