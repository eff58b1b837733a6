// The real draftsvc binary on a store that cannot be written: it must never
// abort (the old behaviour: SIGABRT in RocksDB's writable-file writer, and
// the same on every restart), it serves drafts from memory, reports the
// degraded state (Stats, health service "lookahead.v1.DraftService.storage",
// lookahead_store_degraded) and recovers when the disk works again.
//
// The full disk is draftsvc's TEST-ONLY --testing_store_fault_file (writes
// fail with ENOSPC while the file exists); RealFullTmpfs also mounts a real
// 2 MiB tmpfs when the test may (root), else it is skipped.
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "proto/draft.pb.h"
#include "tests/draftsvc_storage_harness.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

constexpr char kStorage[] = "lookahead.v1.DraftService.storage";
constexpr int kServing = 1, kNotServing = 2;

// Tokens for step `i` of a session: the output cycles through 0..23, so
// windows repeat (drafts exist) and every step completes windows.
std::vector<int32_t> Tokens(int i, int n = 12) {
  std::vector<int32_t> t(n);
  for (int j = 0; j < n; ++j) t[j] = (i * n + j) % 24;
  return t;
}

// Stops `d` with SIGTERM; expects a clean exit of its own (any code), never
// death by a signal, and no assertion in its log.
void ExpectStopsWithoutCrash(Draftsvc& d, const std::string& what) {
  const int status = d.process->Kill(SIGTERM);
  const std::string log = d.process->Log();
  EXPECT_TRUE(WIFEXITED(status)) << what << ": died by a signal:\n" << log;
  EXPECT_EQ(log.find("Assertion"), std::string::npos) << what << ":\n" << log;
  EXPECT_EQ(log.find("SIGABRT"), std::string::npos) << what << ":\n" << log;
}

// A running draftsvc on a store that cannot be written: read-only serving.
void ExpectServesDegraded(Draftsvc& d, const std::string& what) {
  v1::StatsResponse stats;
  ASSERT_TRUE(Stats(*d.stub, &stats).ok()) << what;
  EXPECT_TRUE(stats.store().degraded()) << what << ": " << stats.DebugString();
  EXPECT_FALSE(stats.store().error().empty()) << what;
  EXPECT_EQ(HealthStatus(d.channel, kStorage), kNotServing) << what;
  EXPECT_EQ(HealthStatus(d.channel, ""), kServing) << what;
  EXPECT_EQ(ScrapeMetric(d.metrics_port, "lookahead_store_degraded "), 1.0)
      << what;
  // Drafts still come from memory; the update says it was not persisted.
  const std::string id = absl::StrCat("degraded-", what);
  ASSERT_TRUE(OpenSession(*d.stub, id).ok()) << what;
  for (int i = 0; i < 3; ++i) {
    v1::SessionDraft draft;
    ASSERT_TRUE(Step(*d.stub, id, Tokens(i), &draft).ok()) << what;
    EXPECT_EQ(draft.code(), 0) << what << ": " << draft.message();
    EXPECT_EQ(draft.persistence(), v1::PERSISTENCE_NOT_PERSISTED) << what;
    if (i == 2) {
      EXPECT_GT(draft.tree().tokens_size(), 0) << what;
    }
  }
}

// Writes some acknowledged steps into a fresh store and stops the server.
int64_t Populate(const std::string& db, const std::string& work) {
  Draftsvc d = StartDraftsvc(db, work, "populate", {"--sync"});
  EXPECT_GT(d.port, 0) << d.process->Log();
  if (d.port == 0) return 0;
  EXPECT_TRUE(OpenSession(*d.stub, "p").ok());
  for (int i = 0; i < 20; ++i) {
    v1::SessionDraft draft;
    EXPECT_TRUE(Step(*d.stub, "p", Tokens(i), &draft).ok());
    EXPECT_EQ(draft.persistence(), v1::PERSISTENCE_DURABLE);
  }
  v1::StatsResponse stats;
  EXPECT_TRUE(Stats(*d.stub, &stats).ok());
  const int status = d.process->Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << d.process->Log();
  return stats.namespaces_size() > 0 ? stats.namespaces(0).output_nodes() : 0;
}

TEST(DraftsvcStorageFaultTest, ThreeRestartsOnAFullDiskServeReadOnly) {
  ASSERT_FALSE(DraftsvcBinary().empty()) << "set DRAFTSVC_BINARY";
  const std::string work = FreshDir("storage_full");
  const std::string db = work + "/db";
  const int64_t nodes = Populate(db, work);
  ASSERT_GT(nodes, 0);
  const std::string fault = work + "/fault";
  std::ofstream(fault) << "nospace\n";
  for (int start = 0; start < 3; ++start) {
    for (const char* sync : {"--sync=true", "--sync=false"}) {
      const std::string what = absl::StrCat("start", start, sync + 2);
      Draftsvc d = StartDraftsvc(db, work, what,
                                 {sync, "--testing_store_fault_file=" + fault});
      ASSERT_GT(d.port, 0) << what << " did not serve:\n" << d.process->Log();
      v1::StatsResponse stats;
      ASSERT_TRUE(Stats(*d.stub, &stats).ok());
      ASSERT_EQ(stats.namespaces_size(), 1);
      EXPECT_EQ(stats.namespaces(0).output_nodes(), nodes) << what;
      ExpectServesDegraded(d, what);
      ExpectStopsWithoutCrash(d, what);
    }
  }
  // No database and no way to create one: one clear line, no crash.
  Draftsvc fresh = StartDraftsvc(work + "/fresh", work, "fresh",
                                 {"--testing_store_fault_file=" + fault});
  EXPECT_EQ(fresh.port, 0);
  const int status = fresh.process->Kill(0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
  const std::string log = fresh.process->Log();
  EXPECT_NE(log.find("draftsvc: FAILED_PRECONDITION: cannot create trie store"),
            std::string::npos)
      << log;
}

// --sync: the disk fails mid-traffic and comes back. While it is failing,
// Steps answer OK with drafts and NOT_PERSISTED (never DURABLE), health and
// metrics say so; when it works again everything is written and survives a
// restart.
TEST(DraftsvcStorageFaultTest, SyncModeDegradesAndRecoversLive) {
  const std::string work = FreshDir("storage_live");
  const std::string db = work + "/db";
  const std::string fault = work + "/fault";
  Draftsvc d = StartDraftsvc(db, work, "live",
                             {"--sync", "--testing_store_fault_file=" + fault,
                              "--store_resume_interval_ms=50"});
  ASSERT_GT(d.port, 0) << d.process->Log();
  EXPECT_EQ(HealthStatus(d.channel, kStorage), kServing);
  ASSERT_TRUE(OpenSession(*d.stub, "s").ok());
  int i = 0;
  for (; i < 10; ++i) {
    v1::SessionDraft draft;
    ASSERT_TRUE(Step(*d.stub, "s", Tokens(i), &draft).ok());
    EXPECT_EQ(draft.persistence(), v1::PERSISTENCE_DURABLE);
  }
  std::ofstream(fault) << "eio\n";
  for (; i < 20; ++i) {
    v1::SessionDraft draft;
    ASSERT_TRUE(Step(*d.stub, "s", Tokens(i), &draft).ok());
    EXPECT_EQ(draft.code(), 0) << draft.message();
    EXPECT_EQ(draft.persistence(), v1::PERSISTENCE_NOT_PERSISTED) << i;
    EXPECT_GT(draft.tree().tokens_size(), 0) << "no draft while degraded";
  }
  ExpectServesDegraded(d, "live");
  EXPECT_GE(ScrapeMetric(d.metrics_port, "lookahead_store_write_errors_total ")
                .value_or(0),
            1.0);
  v1::StatsResponse before;
  ASSERT_TRUE(Stats(*d.stub, &before).ok());
  EXPECT_GT(before.store().unpersisted_mutations(), 0);

  std::filesystem::remove(fault);
  for (int waited = 0; waited < 1500; ++waited) {
    if (HealthStatus(d.channel, kStorage) == kServing) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(HealthStatus(d.channel, kStorage), kServing) << d.process->Log();
  v1::StatsResponse after;
  ASSERT_TRUE(Stats(*d.stub, &after).ok());
  EXPECT_FALSE(after.store().degraded());
  EXPECT_EQ(after.store().recoveries(), 1);
  EXPECT_EQ(after.store().unpersisted_mutations(), 0);
  v1::SessionDraft draft;
  ASSERT_TRUE(Step(*d.stub, "s", Tokens(i), &draft).ok());
  EXPECT_EQ(draft.persistence(), v1::PERSISTENCE_DURABLE);
  ASSERT_TRUE(Stats(*d.stub, &after).ok());
  const int64_t nodes = after.namespaces(0).output_nodes();
  EXPECT_NE(d.process->Log().find("storage writable again"), std::string::npos)
      << d.process->Log();
  const int status = d.process->Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << d.process->Log();

  // Everything accepted, the degraded period's updates too, is on disk.
  Draftsvc again = StartDraftsvc(db, work, "again", {"--sync"});
  ASSERT_GT(again.port, 0) << again.process->Log();
  v1::StatsResponse restarted;
  ASSERT_TRUE(Stats(*again.stub, &restarted).ok());
  EXPECT_EQ(restarted.namespaces(0).output_nodes(), nodes);
}

// Steps until the store says NOT_PERSISTED (the disk filled); false if it
// never did or the server died.
bool FillUntilDegraded(Draftsvc& d, const std::string& session) {
  if (!OpenSession(*d.stub, session).ok()) return false;
  for (int i = 0; i < 20000 && d.process->Running(); ++i) {
    std::vector<int32_t> tokens(64);
    for (int j = 0; j < 64; ++j) tokens[j] = (i * 7919 + j * 104729) % 49999;
    v1::SessionDraft draft;
    if (!Step(*d.stub, session, tokens, &draft).ok()) return false;
    if (draft.persistence() == v1::PERSISTENCE_NOT_PERSISTED) return true;
  }
  return false;
}

// A real full file system (a 2 MiB tmpfs) where the test may mount one. A
// restart may find a few KiB free (RocksDB removes its failed files), so each
// life writes until the disk is full again.
TEST(DraftsvcStorageFaultTest, RealFullTmpfsNeverAborts) {
  const std::string work = FreshDir("storage_tmpfs");
  const std::string mnt = work + "/mnt";
  std::filesystem::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=2m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (not root?)";
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { umount2(dir.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string db = mnt + "/db";
  for (const char* sync : {"--sync=false", "--sync=true"}) {
    std::filesystem::remove_all(db);
    for (int life = 0; life < 4; ++life) {  // The first fills, 3 restarts.
      const std::string what = absl::StrCat("life", life, sync + 2);
      Draftsvc d = StartDraftsvc(db, work, what, {sync});
      ASSERT_GT(d.port, 0) << what << ":\n" << d.process->Log();
      ASSERT_TRUE(FillUntilDegraded(d, what))
          << what << ": never degraded or died:\n"
          << d.process->Log();
      ExpectServesDegraded(d, what);
      ExpectStopsWithoutCrash(d, what);
    }
  }
}

}  // namespace
}  // namespace lookahead::testing
