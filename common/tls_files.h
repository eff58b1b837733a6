// TLS for gRPC from PEM files named by flags: server credentials (with an
// optional client CA that makes a verified client certificate mandatory,
// i.e. mutual TLS) and channel credentials (a root CA and an optional client
// certificate). Every file is read and checked when the credentials are
// built, so a missing or malformed file is a startup error naming its flag
// and path. Pure functions; thread-safe.
#ifndef LOOKAHEAD_COMMON_TLS_FILES_H_
#define LOOKAHEAD_COMMON_TLS_FILES_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lookahead {

// A PEM file and the flag that named it (for error messages).
struct PemFile {
  std::string flag;  // e.g. "--tls_cert_file"
  std::string path;  // empty = not given
};

// The server side: cert and key together or neither (then plaintext).
struct ServerTlsFiles {
  PemFile cert{"--tls_cert_file", ""};
  PemFile key{"--tls_key_file", ""};
  // Given: clients must present a certificate signed by this CA.
  PemFile client_ca{"--tls_client_ca_file", ""};

  bool enabled() const { return !cert.path.empty(); }
};

// The client side: any file given turns TLS on. `ca` empty = the system's
// roots; `cert` and `key` together or neither (a client certificate).
struct ClientTlsFiles {
  PemFile ca;
  PemFile cert;
  PemFile key;

  bool enabled() const {
    return !ca.path.empty() || !cert.path.empty() || !key.path.empty();
  }
};

// The contents of `file`, which must hold a PEM block whose label contains
// `label` ("CERTIFICATE", "PRIVATE KEY"). NOT_FOUND naming the flag and path
// if it cannot be read; INVALID_ARGUMENT naming them if it holds no such
// block.
absl::StatusOr<std::string> ReadPemFile(const PemFile& file,
                                        absl::string_view label);

// Insecure credentials if !files.enabled(); else SslServerCredentials, with
// GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY when a client
// CA is given. INVALID_ARGUMENT naming the flags for a cert without a key
// (or the reverse) or a client CA without a server certificate; the file
// errors of ReadPemFile.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files);

// Insecure credentials if !files.enabled(); else SslCredentials. Errors as
// MakeServerCredentials.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientTlsFiles& files);

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_TLS_FILES_H_
