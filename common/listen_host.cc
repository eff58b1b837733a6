#include "common/listen_host.h"

#include <arpa/inet.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace lookahead {

bool IsLoopbackHost(absl::string_view host) {
  std::string name = absl::AsciiStrToLower(host);
  absl::string_view h = name;
  if (absl::ConsumePrefix(&h, "[")) {
    if (!absl::ConsumeSuffix(&h, "]")) return false;
  }
  if (h == "localhost") return true;
  const std::string address(h);
  in_addr v4;
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

absl::Status CheckListenHost(absl::string_view host, bool authenticated,
                             bool allow_unauthenticated,
                             absl::string_view auth_flags) {
  if (authenticated || allow_unauthenticated || IsLoopbackHost(host)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--host=", host,
      " is not a loopback address and clients are not authenticated: set ",
      auth_flags,
      ", or listen on --host=127.0.0.1, or pass "
      "--allow_unauthenticated to serve anyone who can reach the port"));
}

}  // namespace lookahead
