#include "common/tls_files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lookahead {
namespace {

std::string Named(const PemFile& file) {
  return absl::StrCat(file.flag, "=", file.path);
}

// INVALID_ARGUMENT unless `a` and `b` are both given or both empty.
absl::Status CheckPair(const PemFile& a, const PemFile& b) {
  if (a.path.empty() == b.path.empty()) return absl::OkStatus();
  const PemFile& given = a.path.empty() ? b : a;
  const PemFile& missing = a.path.empty() ? a : b;
  return absl::InvalidArgumentError(
      absl::StrCat(Named(given), " needs ", missing.flag,
                   " too (a certificate and its key)"));
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const PemFile& file,
                                        absl::string_view label) {
  std::ifstream in(file.path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(Named(file), ": cannot read (",
                                            std::strerror(errno), ")"));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  std::string pem = contents.str();
  // A PEM block: "-----BEGIN <label>-----" (label e.g. "EC PRIVATE KEY").
  const size_t begin = pem.find("-----BEGIN ");
  const size_t label_end =
      begin == std::string::npos ? begin : pem.find("-----", begin + 11);
  if (label_end == std::string::npos ||
      !absl::StrContains(pem.substr(begin + 11, label_end - begin - 11),
                         label) ||
      !absl::StrContains(pem, "-----END ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(Named(file), ": not a PEM file holding a ", label,
                     " (expected a \"-----BEGIN ...", label, "-----\" block)"));
  }
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files) {
  RETURN_IF_ERROR(CheckPair(files.cert, files.key));
  if (!files.enabled()) {
    if (!files.client_ca.path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Named(files.client_ca), " needs ", files.cert.flag, " and ",
          files.key.flag, " (client certificates are checked only over TLS)"));
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPemFile(files.cert, "CERTIFICATE"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPemFile(files.key, "PRIVATE KEY"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!files.client_ca.path.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs,
                     ReadPemFile(files.client_ca, "CERTIFICATE"));
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientTlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  RETURN_IF_ERROR(CheckPair(files.cert, files.key));
  grpc::SslCredentialsOptions options;
  if (!files.ca.path.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs,
                     ReadPemFile(files.ca, "CERTIFICATE"));
  }
  if (!files.cert.path.empty()) {
    ASSIGN_OR_RETURN(options.pem_cert_chain,
                     ReadPemFile(files.cert, "CERTIFICATE"));
    ASSIGN_OR_RETURN(options.pem_private_key,
                     ReadPemFile(files.key, "PRIVATE KEY"));
  }
  return grpc::SslCredentials(options);
}

}  // namespace lookahead
