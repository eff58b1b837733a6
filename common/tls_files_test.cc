#include "common/tls_files.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead {
namespace {

using ::testing::HasSubstr;

std::string WriteFile(const std::string& name, const std::string& contents) {
  std::string path = std::string(::testing::TempDir()) + "/" + name;
  std::ofstream(path) << contents;
  return path;
}

const char kCert[] =
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const char kKey[] =
    "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n";

TEST(ReadPemFileTest, MissingFileNamesFlagAndPath) {
  absl::StatusOr<std::string> pem =
      ReadPemFile({"--tls_cert_file", "/nonexistent/cert.pem"}, "CERTIFICATE");
  EXPECT_EQ(pem.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(pem.status().message(),
              HasSubstr("--tls_cert_file=/nonexistent/cert.pem"));
}

TEST(ReadPemFileTest, WrongContentsNameFlagAndWhatWasExpected) {
  for (const std::string& contents :
       {std::string("not pem at all"), std::string(kKey),
        std::string("-----BEGIN CERTIFICATE-----\nMIIB\n")}) {
    std::string path = WriteFile("bad.pem", contents);
    absl::StatusOr<std::string> pem =
        ReadPemFile({"--draftsvc_ca_file", path}, "CERTIFICATE");
    EXPECT_EQ(pem.status().code(), absl::StatusCode::kInvalidArgument)
        << contents;
    EXPECT_THAT(pem.status().message(), HasSubstr("--draftsvc_ca_file="));
    EXPECT_THAT(pem.status().message(), HasSubstr("CERTIFICATE"));
  }
  EXPECT_TRUE(
      ReadPemFile({"--k", WriteFile("key.pem", kKey)}, "PRIVATE KEY").ok());
}

TEST(MakeServerCredentialsTest, PlaintextWithoutFiles) {
  EXPECT_TRUE(MakeServerCredentials({}).ok());
}

TEST(MakeServerCredentialsTest, CertNeedsKeyAndClientCaNeedsCert) {
  ServerTlsFiles files;
  files.cert.path = WriteFile("cert.pem", kCert);
  absl::Status status = MakeServerCredentials(files).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("needs --tls_key_file"));

  ServerTlsFiles ca_only;
  ca_only.client_ca.path = files.cert.path;
  status = MakeServerCredentials(ca_only).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--tls_client_ca_file="));
  EXPECT_THAT(status.message(), HasSubstr("--tls_cert_file"));

  files.key.path = WriteFile("key.pem", kKey);
  files.client_ca.path = files.cert.path;
  EXPECT_TRUE(MakeServerCredentials(files).ok());
  files.client_ca.path = "/nonexistent/ca.pem";
  status = MakeServerCredentials(files).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("--tls_client_ca_file="));
}

TEST(MakeChannelCredentialsTest, KeyWithoutCertIsRefused) {
  ClientTlsFiles files;
  files.ca = {"--draftsvc_ca_file", WriteFile("ca.pem", kCert)};
  files.key = {"--draftsvc_client_key_file", WriteFile("key.pem", kKey)};
  files.cert.flag = "--draftsvc_client_cert_file";
  absl::Status status = MakeChannelCredentials(files).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("needs --draftsvc_client_cert_file"));
  files.cert.path = WriteFile("cert.pem", kCert);
  EXPECT_TRUE(MakeChannelCredentials(files).ok());
  EXPECT_TRUE(MakeChannelCredentials({}).ok());
}

}  // namespace
}  // namespace lookahead
