// ApiKeys: the keys a verifysvc front end (gRPC or HTTP) accepts, each
// bound to one namespace and optionally to a request rate. Loaded once from
// --api_keys_file. With keys configured, a request's namespace is its key's:
// naming another is PERMISSION_DENIED, leaving it empty means the key's.
//
// File format, one key per line ('#' starts a comment, blank lines skipped):
//
//   <key> <namespace> [<requests_per_second>]
//
// Keys are compared in constant time and never logged; errors name a key
// by its line number only.
//
// Thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_API_API_KEYS_H_
#define LOOKAHEAD_VERIFYSVC_API_API_KEYS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace lookahead::verifysvc {

// What an accepted key grants.
struct KeyGrant {
  std::string name_space;  // the only namespace the request may use
  int line = 0;            // the key's line in the file: a loggable label
};

class ApiKeys {
 public:
  // Reads `path`. INVALID_ARGUMENT naming the line for a malformed line, a
  // duplicate key, a namespace that breaks proto/namespace_name.h's rule
  // or a rate that is not a positive number; NOT_FOUND if the file cannot
  // be read; INVALID_ARGUMENT if it holds no key.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(const std::string& path);

  virtual ~ApiKeys() = default;

  // `authorization` is the HTTP Authorization header or the gRPC
  // "authorization" metadata value: "Bearer <key>". UNAUTHENTICATED (saying
  // what is missing, never echoing the key) if it is absent, not Bearer, or
  // no configured key matches. RESOURCE_EXHAUSTED if the key has a rate and
  // is over it; then *retry_after (if not null) is how long until a request
  // would be admitted.
  virtual absl::StatusOr<KeyGrant> Authorize(absl::string_view authorization,
                                             absl::Duration* retry_after) = 0;
};

// Applies `grant` to a request's namespace: an empty one becomes the
// grant's; another one is PERMISSION_DENIED naming both namespaces.
absl::Status ApplyGrant(const KeyGrant& grant, std::string* name_space);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_API_API_KEYS_H_
