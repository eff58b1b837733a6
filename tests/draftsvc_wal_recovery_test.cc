// Honest WAL recovery of the real draftsvc binary: kill -9 after acknowledged
// (--sync, PERSISTENCE_DURABLE) Steps, cut the newest WAL file in half, and
// restart. --wal_recovery=tolerate starts and reports what was dropped (log,
// Stats, lookahead_store_wal_dropped_records); --wal_recovery=strict refuses
// to start with one clear line and leaves the directory as it was. (Before,
// draftsvc started silently with about half the acknowledged nodes.)
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "proto/draft.pb.h"
#include "tests/draftsvc_storage_harness.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

std::string NewestWal(const std::string& dir) {
  std::string newest;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".log" && e.path().string() > newest) {
      newest = e.path().string();
    }
  }
  return newest;
}

TEST(DraftsvcWalRecoveryTest, TruncatedWalToleratedAndReportedStrictRefuses) {
  ASSERT_FALSE(DraftsvcBinary().empty()) << "set DRAFTSVC_BINARY";
  const std::string work = FreshDir("wal_recovery");
  const std::string db = work + "/db";
  int64_t acked_nodes = 0;
  {
    Draftsvc d = StartDraftsvc(db, work, "writer", {"--sync"});
    ASSERT_GT(d.port, 0) << d.process->Log();
    ASSERT_TRUE(OpenSession(*d.stub, "w").ok());
    for (int i = 0; i < 400; ++i) {
      std::vector<int32_t> tokens(24);
      for (int j = 0; j < 24; ++j) tokens[j] = (i * 31 + j * 17) % 4999;
      v1::SessionDraft draft;
      ASSERT_TRUE(Step(*d.stub, "w", tokens, &draft).ok());
      ASSERT_EQ(draft.code(), 0) << draft.message();
      EXPECT_EQ(draft.persistence(), v1::PERSISTENCE_DURABLE) << i;
    }
    v1::StatsResponse stats;
    ASSERT_TRUE(Stats(*d.stub, &stats).ok());
    acked_nodes = stats.namespaces(0).output_nodes();
    const int status = d.process->Kill(SIGKILL);
    ASSERT_TRUE(WIFSIGNALED(status)) << status;
  }
  const std::string wal = NewestWal(db);
  ASSERT_FALSE(wal.empty());
  const uint64_t size = std::filesystem::file_size(wal);
  ASSERT_GT(size, 100000u);
  std::filesystem::resize_file(wal, size / 2);
  const std::string wal_name = std::filesystem::path(wal).filename().string();

  // strict: one clear line, exit of its own, the directory unchanged.
  {
    Draftsvc d = StartDraftsvc(db, work, "strict", {"--wal_recovery=strict"});
    EXPECT_EQ(d.port, 0) << "strict started:\n" << d.process->Log();
    const int status = d.process->Kill(0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
    const std::string log = d.process->Log();
    std::vector<std::string> refusals;
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (absl::StrContains(line, "refusing to start")) {
        refusals.emplace_back(line);
      }
    }
    EXPECT_EQ(refusals.size(), 1u) << log;
    for (const std::string& line : refusals) {
      EXPECT_TRUE(absl::StartsWith(line, "draftsvc: FAILED_PRECONDITION"))
          << line;
      EXPECT_TRUE(absl::StrContains(line, "--wal_recovery=strict"));
      EXPECT_TRUE(absl::StrContains(line, wal_name)) << line;
    }
    EXPECT_EQ(std::filesystem::file_size(wal), size / 2);
  }

  // tolerate (the default): starts, says what was dropped.
  Draftsvc d = StartDraftsvc(db, work, "tolerate", {});
  ASSERT_GT(d.port, 0) << d.process->Log();
  v1::StatsResponse stats;
  ASSERT_TRUE(Stats(*d.stub, &stats).ok());
  ASSERT_TRUE(stats.has_store()) << stats.DebugString();
  const v1::WalRecovery& r = stats.store().wal_recovery();
  EXPECT_EQ(r.wal_file(), wal_name);
  EXPECT_GT(r.dropped_records(), 0);
  EXPECT_GE(r.dropped_bytes(), static_cast<int64_t>(size - size / 2));
  EXPECT_LE(r.dropped_bytes(), static_cast<int64_t>(size));
  EXPECT_GT(r.dropped_updates(), 0);
  EXPECT_TRUE(absl::StrContains(r.summary(), "WAL recovery dropped"));
  ASSERT_EQ(stats.namespaces_size(), 1);
  EXPECT_LT(stats.namespaces(0).output_nodes(), acked_nodes);
  EXPECT_EQ(
      ScrapeMetric(d.metrics_port, "lookahead_store_wal_dropped_records "),
      static_cast<double>(r.dropped_records()));
  EXPECT_TRUE(absl::StrContains(
      d.process->Log(), "WARNING: trie store " + db + ": WAL recovery dropped"))
      << d.process->Log();
}

}  // namespace
}  // namespace lookahead::testing
