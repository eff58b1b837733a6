// Listen: opens an Asio acceptor on host:port for the services' HTTP
// servers (/metrics, the OpenAI front). Header-only, like Asio.
#ifndef LOOKAHEAD_COMMON_TCP_LISTEN_H_
#define LOOKAHEAD_COMMON_TCP_LISTEN_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "boost/asio.hpp"

namespace lookahead {

// Resolves `host`, then opens, binds and listens `acceptor` on its first
// address and `port` (0: a free one; see acceptor->local_endpoint()).
// SO_REUSEADDR allows a quick restart; no SO_REUSEPORT, which would let a
// second process bind the same port and take half the connections.
// UNAVAILABLE naming `what`, host:port and `flag` if any step fails.
inline absl::Status Listen(boost::asio::ip::tcp::acceptor* acceptor,
                           const std::string& host, int port,
                           absl::string_view what, absl::string_view flag) {
  using tcp = boost::asio::ip::tcp;
  boost::system::error_code ec;
  tcp::resolver resolver(acceptor->get_executor());
  const tcp::resolver::results_type endpoints =
      resolver.resolve(host, std::to_string(port), ec);
  if (!ec && !endpoints.empty()) {
    const tcp::endpoint endpoint = endpoints.begin()->endpoint();
    acceptor->open(endpoint.protocol(), ec);
    if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor->bind(endpoint, ec);
    if (!ec) {
      acceptor->listen(boost::asio::socket_base::max_listen_connections, ec);
    }
  }
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot bind ", what, " to ", host, ":", port, " (", flag,
        "); is the port in use or the host not local? (", ec.message(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_TCP_LISTEN_H_
