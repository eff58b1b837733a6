// ConfigFromFlags: the defaults, and the INVALID_ARGUMENT messages of bad
// flag values (draftsvc prints them after "draftsvc: " and exits 1).
#include "draftsvc/service/config.h"

#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, wal_recovery);
ABSL_DECLARE_FLAG(double, session_lease_s);
ABSL_DECLARE_FLAG(std::string, draft_sources);
ABSL_DECLARE_FLAG(bool, self_draft);
ABSL_DECLARE_FLAG(std::string, assistant_model);
ABSL_DECLARE_FLAG(double, assistant_deadline_ms);
ABSL_DECLARE_FLAG(std::string, tls_cert_file);
ABSL_DECLARE_FLAG(std::string, tls_client_ca_file);

namespace lookahead::draftsvc {
namespace {

class ConfigFromFlagsTest : public ::testing::Test {
 protected:
  absl::FlagSaver saver_;  // every test starts from the defaults

  // The message of ConfigFromFlags' error, which must be INVALID_ARGUMENT.
  static std::string Error() {
    absl::StatusOr<DraftsvcConfig> config = ConfigFromFlags();
    if (config.ok()) return "OK";
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(config.status().message());
  }
};

TEST_F(ConfigFromFlagsTest, Defaults) {
  absl::StatusOr<DraftsvcConfig> config = ConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->host, "127.0.0.1");
  EXPECT_EQ(config->port, 50061);
  EXPECT_EQ(config->transport, "plaintext");
  EXPECT_EQ(config->metrics_port, 9091);
  EXPECT_EQ(config->shutdown_grace, absl::Milliseconds(5000));
  EXPECT_FALSE(config->server.db_path.empty());
  EXPECT_EQ(config->server.index.session_lease, absl::Seconds(300));
  EXPECT_EQ(config->server.index.ngram.low_water,
            config->server.index.low_water);
  EXPECT_TRUE(config->server.assistant.model_path.empty());
  EXPECT_EQ(config->server.assistant.step_deadline, absl::Milliseconds(2));
  EXPECT_EQ(config->server.metrics, nullptr);
}

TEST_F(ConfigFromFlagsTest, TransportFollowsTlsFlags) {
  absl::SetFlag(&FLAGS_tls_cert_file, "cert.pem");
  EXPECT_EQ(ConfigFromFlags()->transport, "TLS");
  absl::SetFlag(&FLAGS_tls_client_ca_file, "ca.pem");
  EXPECT_EQ(ConfigFromFlags()->transport, "mutual TLS");
}

TEST_F(ConfigFromFlagsTest, ZeroLeaseNeverExpires) {
  absl::SetFlag(&FLAGS_session_lease_s, 0);
  absl::StatusOr<DraftsvcConfig> config = ConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server.index.session_lease, absl::InfiniteDuration());
}

TEST_F(ConfigFromFlagsTest, BadWalRecovery) {
  absl::SetFlag(&FLAGS_wal_recovery, "maybe");
  EXPECT_EQ(Error(), "--wal_recovery=maybe must be 'tolerate' or 'strict'");
}

TEST_F(ConfigFromFlagsTest, NegativeLease) {
  absl::SetFlag(&FLAGS_session_lease_s, -1.5);
  EXPECT_EQ(Error(), "--session_lease_s=-1.5 must be >= 0");
}

TEST_F(ConfigFromFlagsTest, UnknownDraftSource) {
  absl::SetFlag(&FLAGS_draft_sources, "trie,oracle");
  EXPECT_EQ(Error().rfind("--draft_sources: ", 0), 0u) << Error();
}

TEST_F(ConfigFromFlagsTest, SelfDraftExcludesAssistantModel) {
  absl::SetFlag(&FLAGS_self_draft, true);
  absl::SetFlag(&FLAGS_assistant_model, "small.gguf");
  EXPECT_EQ(Error(),
            "--self_draft and --assistant_model=small.gguf are exclusive "
            "(one assistant per server)");
}

TEST_F(ConfigFromFlagsTest, DeadlineOutOfRange) {
  absl::SetFlag(&FLAGS_assistant_deadline_ms, 1000.5);
  EXPECT_EQ(Error(), "--assistant_deadline_ms=1000.5 must be in [0, 1000]");
  absl::SetFlag(&FLAGS_assistant_deadline_ms, 1000);
  EXPECT_EQ(Error(), "OK");
}

}  // namespace
}  // namespace lookahead::draftsvc
