// The real draftsvc binary on a store that cannot be written: it must never
// abort (the old behaviour: SIGABRT in RocksDB's writable-file writer, and
// the same on every restart), it serves drafts from memory, reports the
// degraded state (Stats, health service "lookahead.v1.DraftService.storage",
// lookahead_store_degraded) and recovers when the disk works again.
//
// The full disk is --testing_store_fault_file of the testonly
// //draftsvc/testing:draftsvc_fault_testing (writes fail with ENOSPC while
// the file exists); RealFullTmpfs also mounts a real
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

// Mounts `source` read-only at `target` (a bind mount), or returns false
// where this machine does not allow it (not root, no mount namespace).
bool BindMountReadOnly(const std::string& source, const std::string& target) {
  if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return false;
  }
  if (mount(nullptr, target.c_str(), nullptr,
            MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
    umount2(target.c_str(), MNT_DETACH);
    return false;
  }
  return true;
}

// A database directory on a real read-only bind mount: draftsvc opens it
// read-only and serves what it holds (degraded), naming the real cause, not
// a lock held by some other process. A stop then reports the updates it
// could not write (exit code 3). With no database there, it fails with one
// line that says what to do.
TEST(DraftsvcStorageFaultTest, ReadOnlyBindMountServesDegraded) {
  const std::string work = FreshDir("storage_readonly");
  const std::string src = work + "/src";
  const std::string mnt = work + "/mnt";
  std::filesystem::create_directories(mnt);
  const int64_t nodes = Populate(src + "/db", work);
  ASSERT_GT(nodes, 0);
  if (!BindMountReadOnly(src, mnt)) {
    GTEST_SKIP() << "cannot make a read-only bind mount here (not root?)";
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { umount2(dir.c_str(), MNT_DETACH); }
  } unmount{mnt};
  for (const char* sync : {"--sync=true", "--sync=false"}) {
    const std::string what = absl::StrCat("ro", sync + 2);
    Draftsvc d = StartDraftsvc(mnt + "/db", work, what, {sync});
    ASSERT_GT(d.port, 0) << what << " did not serve:\n" << d.process->Log();
    v1::StatsResponse stats;
    ASSERT_TRUE(Stats(*d.stub, &stats).ok());
    ASSERT_EQ(stats.namespaces_size(), 1);
    EXPECT_EQ(stats.namespaces(0).output_nodes(), nodes) << what;
    EXPECT_NE(stats.store().error().find("is not writable"), std::string::npos)
        << stats.store().error();
    EXPECT_EQ(stats.store().error().find("locked"), std::string::npos)
        << stats.store().error();
    ExpectServesDegraded(d, what);  // Also makes updates it cannot write.
    const int status = d.process->Kill(SIGTERM);
    const std::string log = d.process->Log();
    ASSERT_TRUE(WIFEXITED(status)) << what << ":\n" << log;
    EXPECT_EQ(WEXITSTATUS(status), 3) << what << ":\n" << log;
    EXPECT_NE(log.find("were never persisted"), std::string::npos) << log;
  }
  // Only read: nothing is lost, an orderly stop exits 0.
  Draftsvc reader = StartDraftsvc(mnt + "/db", work, "reader", {"--sync"});
  ASSERT_GT(reader.port, 0) << reader.process->Log();
  v1::StatsResponse stats;
  ASSERT_TRUE(Stats(*reader.stub, &stats).ok());
  const int status = reader.process->Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << status << ":\n" << reader.process->Log();

  Draftsvc fresh = StartDraftsvc(mnt + "/fresh", work, "ro_fresh", {});
  EXPECT_EQ(fresh.port, 0);
  const int fresh_status = fresh.process->Kill(0);
  EXPECT_TRUE(WIFEXITED(fresh_status) && WEXITSTATUS(fresh_status) == 1)
      << fresh_status;
  const std::string log = fresh.process->Log();
  EXPECT_NE(log.find("Read-only file system"), std::string::npos) << log;
  EXPECT_NE(log.find("--db_path"), std::string::npos) << log;
  EXPECT_EQ(log.find("locked"), std::string::npos) << log;
}

// Two servers on one directory: the second names the process that holds it.
TEST(DraftsvcStorageFaultTest, SecondServerNamesTheLockHolder) {
  const std::string work = FreshDir("storage_locked");
  const std::string db = work + "/db";
  Draftsvc first = StartDraftsvc(db, work, "first", {});
  ASSERT_GT(first.port, 0) << first.process->Log();
  Draftsvc second = StartDraftsvc(db, work, "second", {});
  EXPECT_EQ(second.port, 0);
  const int status = second.process->Kill(0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  const std::string log = second.process->Log();
  EXPECT_NE(log.find(absl::StrCat("is locked: process ", first.process->pid(),
                                  " holds its LOCK file")),
            std::string::npos)
      << log;
  EXPECT_EQ(first.process->Kill(SIGTERM), 0) << first.process->Log();
}

// SIGTERM at any moment of a start (flags, recovery of a populated store,
// loading an assistant model, serving) is an orderly stop: exit code 0 and
// no failure banner. --self_draft loads the embedded model (tools/setup.sh),
// which takes long enough that some signals arrive mid-start.
TEST(DraftsvcStorageFaultTest, SigtermInEveryPhaseStopsCleanly) {
  const std::string work = FreshDir("storage_sigterm");
  const std::string db = work + "/db";
  ASSERT_GT(Populate(db, work), 0);
  int stopped_while_starting = 0;
  for (const bool assistant : {false, true}) {
    for (int delay_ms : {0, 5, 20, 50, 100, 200, 400}) {
      const std::string what =
          absl::StrCat(assistant ? "assistant" : "trie", "_delay", delay_ms);
      std::vector<std::string> args = {
          DraftsvcBinary(), "--host=127.0.0.1", "--port=0",
          "--metrics_port=0", "--db_path=" + db,          "--sync"};
      if (assistant) args.push_back("--self_draft");
      ServerProcess p(args, absl::StrCat(work, "/port.", what),
                      absl::StrCat(work, "/server.", what, ".log"));
      // From main() on; before it, the dynamic loader runs and SIGTERM's
      // default action ends the process (status 143 in a shell, no output).
      ASSERT_TRUE(p.WaitUntilCatches(SIGTERM)) << what << ":\n" << p.Log();
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      const int status = p.Kill(SIGTERM);
      const std::string log = p.Log();
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << what << ": status " << status << ":\n" << log;
      EXPECT_EQ(log.find("SIGTERM received"), std::string::npos) << log;
      EXPECT_EQ(log.find("PC: @"), std::string::npos) << log;
      if (log.find("draftsvc: signal 15 while ") != std::string::npos) {
        ++stopped_while_starting;
      }
    }
  }
  EXPECT_GT(stopped_while_starting, 0);
  // Every stop left the store whole.
  Draftsvc d = StartDraftsvc(db, work, "after", {"--wal_recovery=strict"});
  ASSERT_GT(d.port, 0) << d.process->Log();
  EXPECT_EQ(d.process->Kill(SIGTERM), 0) << d.process->Log();
}

}  // namespace
}  // namespace lookahead::testing
