// TrieStore under storage faults (a FaultFileSystem under real RocksDB on
// disk: ENOSPC, EIO, EROFS at chosen writes) and WAL damage: no abort,
// nothing acknowledged lost, the degraded state visible, recovery when the
// disk works again, and an honest report of what WAL recovery dropped.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "draftsvc/storage/trie_store.h"
#include "draftsvc/storage/wal_recovery.h"
#include "draftsvc/testing/fault_file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/file_system.h"

namespace lookahead::draftsvc {
namespace {

using ::testing::HasSubstr;
using Counts = std::map<std::vector<int32_t>, int64_t>;

constexpr char kNs[] = "fault";

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir =
      std::filesystem::path(base != nullptr ? base : "/tmp") /
      absl::StrCat("trie_store_fault_test_", name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

class Collector : public TrieScanVisitor {
 public:
  absl::Status OnNamespace(absl::string_view, int32_t) override {
    return absl::OkStatus();
  }
  absl::Status OnNode(absl::string_view, absl::Span<const int32_t> path,
                      int64_t count) override {
    counts[std::vector<int32_t>(path.begin(), path.end())] = count;
    return absl::OkStatus();
  }
  // Pool entries go into the same map as PoolPath(key, continuation).
  absl::Status OnNgram(absl::string_view, absl::Span<const int32_t> key,
                       absl::Span<const int32_t> continuation,
                       int64_t count) override {
    counts[PoolPath(key, continuation)] = count;
    return absl::OkStatus();
  }
  // A pool entry's place in Counts: -1 (no trie path starts so), then its
  // mutation path.
  static std::vector<int32_t> PoolPath(absl::Span<const int32_t> key,
                                       absl::Span<const int32_t> continuation) {
    std::vector<int32_t> path = NgramMutationPath(key, continuation);
    path.insert(path.begin(), -1);
    return path;
  }
  Counts counts;
};

Counts ScanCounts(const TrieStore& store) {
  Collector c;
  absl::Status s = store.Scan(c);
  EXPECT_TRUE(s.ok()) << s;
  return c.counts;
}

// With `pool`, batch i also changes the n-gram pool entry [i % 4] ->
// [i % 3]: deletes it if i % 5 == 4, sets it to 100 + i if i % 5 == 3, else
// adds 1 (so the backlog must keep the order of one entry's changes); if
// i % 11 == 10 it deletes the whole pool instead.
TrieMutation PoolMutation(int i) {
  TrieMutation m;
  m.table = TrieMutation::Table::kNgramPool;
  if (i % 11 == 10) {
    m.kind = TrieMutation::Kind::kDeleteSubtree;
    return m;  // Empty path: every entry.
  }
  m.path = NgramMutationPath({i % 4}, {i % 3});
  m.kind = i % 5 == 4   ? TrieMutation::Kind::kDeleteSubtree
           : i % 5 == 3 ? TrieMutation::Kind::kSetCount
                        : TrieMutation::Kind::kAdd;
  m.value = i % 5 == 3 ? 100 + i : i % 5 == 4 ? 0 : 1;
  return m;
}

// Batch number `i`: adds 1 to [i % 7] and [i % 7, i] (and PoolMutation(i)).
TrieMutationBatch Batch(int i, bool pool = false) {
  TrieMutationBatch b;
  b.name_space = kNs;
  b.vocab_size = 100000;
  b.mutations.push_back({TrieMutation::Kind::kAdd, {i % 7}, 1});
  b.mutations.push_back({TrieMutation::Kind::kAdd, {i % 7, i}, 1});
  if (pool) b.mutations.push_back(PoolMutation(i));
  return b;
}

void Apply(int i, Counts* counts, bool pool = false) {
  (*counts)[{i % 7}] += 1;
  (*counts)[{i % 7, i}] += 1;
  if (!pool) return;
  const std::vector<int32_t> entry = Collector::PoolPath({i % 4}, {i % 3});
  const TrieMutation m = PoolMutation(i);
  if (m.path.empty()) {
    // Pool entries are the Counts keys that start with -1 (PoolPath).
    counts->erase(counts->begin(), counts->lower_bound({0}));
    return;
  }
  switch (m.kind) {
    case TrieMutation::Kind::kAdd:
      (*counts)[entry] += m.value;
      break;
    case TrieMutation::Kind::kSetCount:
      (*counts)[entry] = m.value;
      break;
    case TrieMutation::Kind::kDeleteSubtree:
      counts->erase(entry);
      break;
  }
}

// Submits batch i and waits for its status.
absl::Status SubmitAndWait(TrieStore& store, int i, bool pool = false) {
  absl::Mutex mu;
  bool finished = false;
  absl::Status result;
  store.Submit(Batch(i, pool), [&](absl::Status s) {
    absl::MutexLock lock(&mu);
    result = std::move(s);
    finished = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&finished));
  return result;
}

bool WaitHealthy(const TrieStore& store, absl::Duration limit) {
  const absl::Time end = absl::Now() + limit;
  while (absl::Now() < end) {
    if (!store.degraded()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return !store.degraded();
}

struct FaultCase {
  bool sync;
  StoreFault fault;
};

class StoreFaultTest : public ::testing::TestWithParam<FaultCase> {
 protected:
  TrieStoreOptions Options() {
    TrieStoreOptions o;
    o.sync = GetParam().sync;
    o.sync_interval_ms = 5;  // Many WAL syncs: the old abort's path.
    o.resume_interval_ms = 20;
    o.file_system = fs_;
    o.on_health_change = [this](const StoreHealth& h) {
      absl::MutexLock lock(&mu_);
      transitions_.push_back(h.degraded);
    };
    return o;
  }
  std::vector<bool> transitions() {
    absl::MutexLock lock(&mu_);
    return transitions_;
  }
  std::shared_ptr<FaultFileSystem> fs_ = std::make_shared<FaultFileSystem>();
  absl::Mutex mu_;
  std::vector<bool> transitions_ ABSL_GUARDED_BY(mu_);
};

// The disk fails mid-traffic and comes back: every batch is answered (OK
// only while written), the store is degraded meanwhile, and afterwards the
// disk holds everything, the batches accepted while degraded included (their
// n-gram pool rows too: adds, sets and deletes of one entry, in order).
TEST_P(StoreFaultTest, DegradesThenRecoversAndRepersists) {
  const std::string dir = TempDir(absl::StrCat(
      "recover_", GetParam().sync, "_", static_cast<int>(GetParam().fault)));
  Counts all;
  {
    auto store = TrieStore::Open(dir, Options());
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(SubmitAndWait(**store, i, /*pool=*/true).ok());
      Apply(i, &all, /*pool=*/true);
    }
    ASSERT_TRUE((*store)->Flush().ok());
    EXPECT_FALSE((*store)->Health().degraded);

    fs_->Inject(GetParam().fault);
    for (int i = 20; i < 40; ++i) {
      absl::Status s = SubmitAndWait(**store, i, /*pool=*/true);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      EXPECT_THAT(s.message(), HasSubstr("not persisted"));
      Apply(i, &all, /*pool=*/true);
      absl::SleepFor(absl::Milliseconds(2));  // Let periodic syncs run.
    }
    const StoreHealth h = (*store)->Health();
    EXPECT_TRUE(h.degraded);
    EXPECT_GE(h.write_errors, 1);
    EXPECT_EQ(h.unpersisted_mutations, 60);
    EXPECT_FALSE(h.error.empty());
    EXPECT_EQ((*store)->Flush().code(), absl::StatusCode::kUnavailable);

    fs_->Inject(StoreFault::kNone);
    ASSERT_TRUE(WaitHealthy(**store, absl::Seconds(20)));
    const StoreHealth after = (*store)->Health();
    EXPECT_EQ(after.recoveries, 1);
    EXPECT_EQ(after.repersisted_mutations, 60);
    EXPECT_EQ(after.unpersisted_mutations, 0);
    ASSERT_TRUE(SubmitAndWait(**store, 40, /*pool=*/true).ok());
    Apply(40, &all, /*pool=*/true);
    EXPECT_TRUE((*store)->Flush().ok());
    EXPECT_TRUE((*store)->Close().ok());
  }
  EXPECT_EQ(transitions(), (std::vector<bool>{true, false}));
  auto reopened = TrieStore::Open(dir, TrieStoreOptions());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(ScanCounts(**reopened), all);
  EXPECT_FALSE((*reopened)->wal_recovery().LostAcknowledged());
}

// The disk never comes back: Close says what was not persisted, and the next
// start (on a working disk) has every acknowledged batch, and nothing beyond
// what was submitted (a round whose fsync failed may still be in the WAL:
// never acknowledged, yet on disk, as after a crash).
TEST_P(StoreFaultTest, AcknowledgedSurviveAPermanentFault) {
  const std::string dir = TempDir(absl::StrCat(
      "permanent_", GetParam().sync, "_", static_cast<int>(GetParam().fault)));
  Counts acked, attempted;
  {
    auto store = TrieStore::Open(dir, Options());
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 30; ++i) {
      if (i == 10) fs_->Inject(GetParam().fault, /*after_writes=*/3);
      absl::Status s = SubmitAndWait(**store, i);
      Apply(i, &attempted);
      if (s.ok()) {
        Apply(i, &acked);
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      }
    }
    EXPECT_TRUE((*store)->Health().degraded);
    absl::Status closed = (*store)->Close();
    EXPECT_EQ(closed.code(), absl::StatusCode::kUnavailable) << closed;
    EXPECT_THAT(closed.message(), HasSubstr("never persisted"));
  }
  auto reopened = TrieStore::Open(dir, TrieStoreOptions());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  const Counts disk = ScanCounts(**reopened);
  for (const auto& [path, count] : acked) {
    auto it = disk.find(path);
    EXPECT_TRUE(it != disk.end() && it->second >= count) << "acknowledged lost";
  }
  for (const auto& [path, count] : disk) EXPECT_LE(count, attempted[path]);
  EXPECT_FALSE((*reopened)->wal_recovery().LostAcknowledged())
      << (*reopened)->wal_recovery().Summary();
}

// Starting on a disk that cannot be written opens read-only, three times
// running, serving what is on disk; a fresh store there fails cleanly.
TEST_P(StoreFaultTest, StartsReadOnlyOnAFullDisk) {
  const std::string dir = TempDir(absl::StrCat(
      "start_", GetParam().sync, "_", static_cast<int>(GetParam().fault)));
  Counts acked;
  {
    auto store = TrieStore::Open(dir, TrieStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(SubmitAndWait(**store, i).ok());
      Apply(i, &acked);
    }
  }
  fs_->Inject(GetParam().fault);
  for (int start = 0; start < 3; ++start) {
    auto store = TrieStore::Open(dir, Options());
    ASSERT_TRUE(store.ok()) << "start " << start << ": " << store.status();
    EXPECT_TRUE((*store)->Health().degraded);
    EXPECT_EQ(ScanCounts(**store), acked);
    EXPECT_EQ(SubmitAndWait(**store, 100 + start).code(),
              absl::StatusCode::kUnavailable);
    EXPECT_EQ((*store)->Close().code(), absl::StatusCode::kUnavailable);
  }
  const std::string fresh = TempDir(absl::StrCat(
      "fresh_", GetParam().sync, "_", static_cast<int>(GetParam().fault)));
  auto none = TrieStore::Open(fresh, Options());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("cannot create trie store"));

  fs_->Inject(StoreFault::kNone);
  auto store = TrieStore::Open(dir, Options());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_FALSE((*store)->Health().degraded);
  EXPECT_EQ(ScanCounts(**store), acked);
}

std::string CaseName(const ::testing::TestParamInfo<FaultCase>& info) {
  static const char* const kFault[] = {"none", "nospace", "eio", "readonly"};
  return absl::StrCat(info.param.sync ? "sync_" : "async_",
                      kFault[static_cast<int>(info.param.fault)]);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, StoreFaultTest,
    ::testing::Values(FaultCase{false, StoreFault::kNoSpace},
                      FaultCase{true, StoreFault::kNoSpace},
                      FaultCase{false, StoreFault::kIoError},
                      FaultCase{true, StoreFault::kIoError},
                      FaultCase{true, StoreFault::kReadOnly}),
    CaseName);

// Past max_backlog_bytes the kept mutations go: the store stays degraded
// (the disk would no longer follow memory), the loss is counted, and the
// disk keeps a consistent older prefix.
TEST(StoreBacklogTest, OverflowStaysDegradedUntilRestart) {
  const std::string dir = TempDir("overflow");
  auto fs = std::make_shared<FaultFileSystem>();
  TrieStoreOptions o;
  o.resume_interval_ms = 10;
  o.max_backlog_bytes = 500;
  o.file_system = fs;
  Counts acked;
  {
    auto store = TrieStore::Open(dir, o);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(SubmitAndWait(**store, i).ok());
      Apply(i, &acked);
    }
    fs->Inject(StoreFault::kNoSpace);
    for (int i = 5; i < 50; ++i) SubmitAndWait(**store, i).IgnoreError();
    EXPECT_GT((*store)->Health().lost_mutations, 0);
    fs->Inject(StoreFault::kNone);
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_TRUE((*store)->Health().degraded);
    EXPECT_EQ((*store)->Close().code(), absl::StatusCode::kUnavailable);
  }
  auto reopened = TrieStore::Open(dir, TrieStoreOptions());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(ScanCounts(**reopened), acked);
}

// While the disk still fails, resume attempts stop at the probe file: the
// database is never closed and reopened, so reads and Submit go on against
// the open one. Once the disk works the reopen happens with no lock held
// that readers wait on: the hook, which runs in the middle of it, reads.
TEST(StoreResumeTest, ProbeSparesTheReopenAndReadersNeverWait) {
  const std::string dir = TempDir("probe");
  auto fs = std::make_shared<FaultFileSystem>();
  TrieStore* live = nullptr;  // Set once open; read by the hook.
  absl::Mutex mu;
  int hook_calls = 0;
  int64_t disk_bytes_in_hook = -1;
  absl::Status count_in_hook;
  StoreHealth health_in_hook;
  TrieStoreOptions o;
  o.resume_interval_ms = 1;
  o.max_resume_interval_ms = 1;  // No backoff: many attempts.
  o.file_system = fs;
  o.TEST_before_reopen = [&] {
    // On the writer thread, between closing and reopening the database: a
    // lock held across the reopen would deadlock here.
    const int64_t bytes = live->DiskBytes();
    absl::StatusOr<int64_t> count = live->GetCount(kNs, {0});
    const StoreHealth h = live->Health();
    live->Submit(Batch(1000), [](absl::Status) {});
    absl::MutexLock lock(&mu);
    ++hook_calls;
    disk_bytes_in_hook = bytes;
    count_in_hook = count.status();
    health_in_hook = h;
  };
  auto store = TrieStore::Open(dir, o);
  ASSERT_TRUE(store.ok()) << store.status();
  live = store->get();
  Counts all;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(SubmitAndWait(**store, i).ok());
    Apply(i, &all);
  }
  fs->Inject(StoreFault::kNoSpace);
  EXPECT_EQ(SubmitAndWait(**store, 5).code(), absl::StatusCode::kUnavailable);
  Apply(5, &all);
  const absl::Time end = absl::Now() + absl::Seconds(60);
  int i = 6;
  while ((*store)->Health().resume_attempts < 20 && absl::Now() < end) {
    EXPECT_GT((*store)->DiskBytes(), 0);
    EXPECT_TRUE((*store)->GetCount(kNs, {0}).ok());
    EXPECT_EQ(SubmitAndWait(**store, i).code(), absl::StatusCode::kUnavailable);
    Apply(i++, &all);
  }
  StoreHealth h = (*store)->Health();
  ASSERT_GE(h.resume_attempts, 20);
  EXPECT_EQ(h.reopen_attempts, 0) << "reopened a disk the probe found full";
  EXPECT_GE(h.write_errors, h.resume_attempts);
  EXPECT_THAT(h.error, HasSubstr("probe"));
  EXPECT_TRUE(h.degraded);
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(hook_calls, 0);
  }

  fs->Inject(StoreFault::kNone);
  ASSERT_TRUE(WaitHealthy(**store, absl::Seconds(60)));
  h = (*store)->Health();
  EXPECT_EQ(h.recoveries, 1);
  EXPECT_EQ(h.reopen_attempts, 1);
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(hook_calls, 1);
    EXPECT_EQ(disk_bytes_in_hook, 0);
    EXPECT_EQ(count_in_hook.code(), absl::StatusCode::kUnavailable)
        << count_in_hook;
    EXPECT_THAT(count_in_hook.message(), HasSubstr("reopened"));
    EXPECT_TRUE(health_in_hook.degraded);
  }
  Apply(1000, &all);  // Submitted by the hook.
  ASSERT_TRUE((*store)->Flush().ok());
  ASSERT_TRUE((*store)->Close().ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/LOOKAHEAD-PROBE"));
  auto reopened = TrieStore::Open(dir, TrieStoreOptions());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(ScanCounts(**reopened), all);
}

// The backlog is written on resume but the ACK marker after it is not: the
// store stays degraded (no recovery, no SERVING flap), and the backlog, now
// on disk, is not written a second time by the next, real, recovery.
// A disk with a little room again (the fault is gone, the probe would
// work) but less free space than resume_min_free_bytes stays degraded:
// resuming there would flap. Here the bar is set above any real volume.
TEST(StoreResumeTest, TooLittleFreeSpaceStaysDegraded) {
  const std::string dir = TempDir("min_free");
  auto fs = std::make_shared<FaultFileSystem>();
  TrieStoreOptions o;
  o.resume_interval_ms = 1;
  o.max_resume_interval_ms = 1;
  o.resume_min_free_bytes = int64_t{1} << 60;  // an exabyte
  o.file_system = fs;
  auto store = TrieStore::Open(dir, o);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(SubmitAndWait(**store, 0).ok());
  fs->Inject(StoreFault::kNoSpace);
  EXPECT_EQ(SubmitAndWait(**store, 1).code(), absl::StatusCode::kUnavailable);
  fs->Inject(StoreFault::kNone);
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while ((*store)->Health().resume_attempts < 10 && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const StoreHealth h = (*store)->Health();
  ASSERT_GE(h.resume_attempts, 10);
  EXPECT_TRUE(h.degraded);
  EXPECT_EQ(h.reopen_attempts, 0);
  EXPECT_EQ(h.recoveries, 0);
  EXPECT_THAT(h.error, HasSubstr("--store_resume_min_free_mib"));
}

TEST(StoreResumeTest, MarkerFailureAfterTheBacklogStaysDegraded) {
  const std::string dir = TempDir("marker");
  auto fs = std::make_shared<FaultFileSystem>();
  absl::Mutex mu;
  std::vector<bool> transitions;
  TrieStoreOptions o;
  o.resume_interval_ms = 1;
  o.max_resume_interval_ms = 1;
  o.file_system = fs;
  o.on_health_change = [&](const StoreHealth& h) {
    absl::MutexLock lock(&mu);
    transitions.push_back(h.degraded);
  };
  Counts all;
  {
    auto store = TrieStore::Open(dir, o);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(SubmitAndWait(**store, i).ok());
      Apply(i, &all);
    }
    fs->Inject(StoreFault::kNoSpace);
    for (int i = 5; i < 15; ++i) {
      EXPECT_EQ(SubmitAndWait(**store, i).code(),
                absl::StatusCode::kUnavailable);
      Apply(i, &all);
    }
    ASSERT_EQ((*store)->Health().unpersisted_mutations, 20);
    // The disk works again, but of the marker's writes only the next one
    // does: a resume writes it once before the backlog, once after.
    fs->InjectForFile(kAckMarkerFile, StoreFault::kNoSpace,
                      /*after_writes=*/1);
    fs->Inject(StoreFault::kNone);
    const absl::Time end = absl::Now() + absl::Seconds(60);
    while ((*store)->Health().repersisted_mutations < 20 && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    StoreHealth h = (*store)->Health();
    ASSERT_EQ(h.repersisted_mutations, 20);
    EXPECT_TRUE(h.degraded);
    EXPECT_TRUE((*store)->degraded());
    EXPECT_EQ(h.recoveries, 0);
    EXPECT_EQ(h.unpersisted_mutations, 0);
    EXPECT_THAT(h.error, HasSubstr(kAckMarkerFile));
    {
      absl::MutexLock lock(&mu);
      EXPECT_EQ(transitions, (std::vector<bool>{true}));
    }
    // A batch while still degraded goes to the (new) backlog.
    EXPECT_EQ(SubmitAndWait(**store, 15).code(),
              absl::StatusCode::kUnavailable);
    Apply(15, &all);

    fs->InjectForFile(kAckMarkerFile, StoreFault::kNone);
    ASSERT_TRUE(WaitHealthy(**store, absl::Seconds(60)));
    h = (*store)->Health();
    EXPECT_EQ(h.recoveries, 1);
    EXPECT_EQ(h.repersisted_mutations, 22);
    {
      absl::MutexLock lock(&mu);
      EXPECT_EQ(transitions, (std::vector<bool>{true, false}));
    }
    ASSERT_TRUE(SubmitAndWait(**store, 16).ok());
    Apply(16, &all);
    ASSERT_TRUE((*store)->Close().ok());
  }
  auto reopened = TrieStore::Open(dir, TrieStoreOptions());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(ScanCounts(**reopened), all) << "backlog written twice or lost";
  EXPECT_FALSE((*reopened)->wal_recovery().LostAcknowledged())
      << (*reopened)->wal_recovery().Summary();
}

// A second store on a live directory fails on its lock and leaves the live
// store's LOG (and LOG.old) as they are.
TEST(StoreInfoLogTest, ALockedStartLeavesTheLiveLogAlone) {
  const std::string dir = TempDir("log_lock");
  auto live = TrieStore::Open(dir, TrieStoreOptions());
  ASSERT_TRUE(live.ok()) << live.status();
  ASSERT_TRUE(SubmitAndWait(**live, 1).ok());
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string log = read(dir + "/LOG");
  ASSERT_FALSE(log.empty());
  const bool had_old = std::filesystem::exists(dir + "/LOG.old");
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto second = TrieStore::Open(dir, TrieStoreOptions());
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable)
        << second.status();
  }
  ASSERT_TRUE(std::filesystem::exists(dir + "/LOG"));
  // The live store may have logged more since; nothing else changed.
  EXPECT_EQ(read(dir + "/LOG").substr(0, log.size()), log);
  EXPECT_EQ(std::filesystem::exists(dir + "/LOG.old"), had_old);
  ASSERT_TRUE((*live)->Close().ok());
  // A start that holds the lock rotates it.
  auto next = TrieStore::Open(dir, TrieStoreOptions());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(read(dir + "/LOG.old").substr(0, log.size()), log);
}

TEST(FaultFileSystemTest, TruncateFailsUnderAFault) {
  const std::string dir = TempDir("truncate");
  std::filesystem::create_directories(dir);
  FaultFileSystem fs;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  ASSERT_TRUE(
      fs.NewWritableFile(dir + "/f", rocksdb::FileOptions(), &file, nullptr)
          .ok());
  ASSERT_TRUE(file->Append("abcdef", rocksdb::IOOptions(), nullptr).ok());
  fs.Inject(StoreFault::kNoSpace);
  rocksdb::IOStatus s = file->Truncate(3, rocksdb::IOOptions(), nullptr);
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  fs.Inject(StoreFault::kNone);
  EXPECT_TRUE(file->Truncate(3, rocksdb::IOOptions(), nullptr).ok());
  EXPECT_TRUE(file->Close(rocksdb::IOOptions(), nullptr).ok());
  EXPECT_EQ(std::filesystem::file_size(dir + "/f"), 3u);
}

// ---- WAL recovery ----

// A crash image of a live store: its directory copied while it runs (after
// a Flush, so the WAL holds every acknowledged round).
std::string CrashImage(const std::string& dir, const std::string& name,
                       Counts* acked, int rounds) {
  auto store = TrieStore::Open(dir, TrieStoreOptions());
  EXPECT_TRUE(store.ok()) << store.status();
  for (int i = 0; i < rounds; ++i) {
    // Some rounds span several 32 KiB WAL blocks.
    TrieMutationBatch b = Batch(i);
    for (int j = 0; j < (i % 5 == 0 ? 3000 : 3); ++j) {
      b.mutations.push_back({TrieMutation::Kind::kAdd, {i % 7, i, j}, 1});
      (*acked)[{i % 7, i, j}] += 1;
    }
    Apply(i, acked);
    absl::Mutex mu;
    bool finished = false;
    (*store)->Submit(std::move(b), [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      absl::MutexLock lock(&mu);
      finished = true;
    });
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&finished));  // One round per batch.
  }
  EXPECT_TRUE((*store)->Flush().ok());
  const std::string image = TempDir(name);
  std::filesystem::copy(dir, image, std::filesystem::copy_options::recursive);
  return image;
}

std::string NewestWal(const std::string& dir) {
  std::string newest;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".log" && e.path().string() > newest) {
      newest = e.path().string();
    }
  }
  return newest;
}

TEST(WalRecoveryTest, TruncatedWalIsReportedAndStrictRefuses) {
  Counts acked;
  const std::string image =
      CrashImage(TempDir("wal_live"), "wal_image", &acked, 60);
  const std::string wal = NewestWal(image);
  ASSERT_FALSE(wal.empty());
  const uint64_t size = std::filesystem::file_size(wal);
  std::filesystem::resize_file(wal, size / 2);

  TrieStoreOptions strict;
  strict.wal_recovery = WalRecoveryMode::kStrict;
  auto refused = TrieStore::Open(image, strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("refusing to start with --wal_recovery=strict"));
  EXPECT_THAT(refused.status().message(), HasSubstr("acknowledged write"));
  EXPECT_EQ(std::filesystem::file_size(wal), size / 2) << "strict changed it";

  auto store = TrieStore::Open(image, TrieStoreOptions());
  ASSERT_TRUE(store.ok()) << store.status();
  const WalRecoveryReport& r = (*store)->wal_recovery();
  EXPECT_TRUE(r.LostAcknowledged());
  EXPECT_EQ(r.wal_file, std::filesystem::path(wal).filename().string());
  EXPECT_GT(r.dropped_records, 0);
  EXPECT_LT(r.dropped_records, 60);
  EXPECT_GE(r.dropped_bytes, static_cast<int64_t>(size - size / 2));
  EXPECT_LE(r.dropped_bytes, static_cast<int64_t>(size));
  EXPECT_GT(r.dropped_updates, 0);
  EXPECT_THAT(r.Summary(), HasSubstr("WAL recovery dropped"));
  // What survived is a prefix: every surviving count <= acknowledged.
  Counts got = ScanCounts(**store);
  EXPECT_LT(got.size(), acked.size());
  for (const auto& [path, count] : got) EXPECT_LE(count, acked[path]);
  ASSERT_TRUE((*store)->Close().ok());
  // The loss was reported once; the next start compares with what survived.
  auto again = TrieStore::Open(image, strict);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE((*again)->wal_recovery().LostAcknowledged());
}

// The dropped bytes are exact: cutting the WAL where the report says the
// lost records began leaves no torn record (RocksDB drops nothing more) and
// gives the same report. A wrong layout would cut inside a record.
TEST(WalRecoveryTest, DroppedBytesAreExact) {
  Counts acked;
  const std::string image =
      CrashImage(TempDir("exact_live"), "exact_image", &acked, 41);
  const std::string wal = NewestWal(image);
  const uint64_t size = std::filesystem::file_size(wal);
  const std::string copy = TempDir("exact_copy");
  std::filesystem::copy(image, copy, std::filesystem::copy_options::recursive);
  std::filesystem::resize_file(wal, size - 1);  // Tears the last record.
  int64_t dropped = 0;
  {
    auto store = TrieStore::Open(image, TrieStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    const WalRecoveryReport& r = (*store)->wal_recovery();
    EXPECT_EQ(r.dropped_records, 1) << r.Summary();
    EXPECT_GT(r.rocksdb_dropped_bytes, 0) << r.Summary();
    dropped = r.dropped_bytes;
  }
  ASSERT_GT(dropped, 0);
  const std::string copy_wal = NewestWal(copy);
  std::filesystem::resize_file(copy_wal, size - dropped);
  auto store = TrieStore::Open(copy, TrieStoreOptions());
  ASSERT_TRUE(store.ok()) << store.status();
  const WalRecoveryReport& r = (*store)->wal_recovery();
  EXPECT_EQ(r.dropped_records, 1) << r.Summary();
  EXPECT_EQ(r.dropped_bytes, dropped) << r.Summary();
  EXPECT_EQ(r.rocksdb_dropped_bytes, 0) << r.Summary();
}

TEST(WalRecoveryTest, IntactCrashImageLosesNothing) {
  Counts acked;
  const std::string image =
      CrashImage(TempDir("intact_live"), "intact_image", &acked, 30);
  TrieStoreOptions strict;
  strict.wal_recovery = WalRecoveryMode::kStrict;
  auto store = TrieStore::Open(image, strict);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_FALSE((*store)->wal_recovery().LostAcknowledged());
  EXPECT_GT((*store)->wal_recovery().records_read, 0);
  EXPECT_EQ(ScanCounts(**store), acked);
}

// Strict mode cannot skip the analysis: if the read-only open fails (here
// reading CURRENT once) it refuses, with the directory unchanged, instead of
// letting the read-write open retire the WAL unexamined.
TEST(WalRecoveryTest, StrictRefusesWhenTheAnalysisCannotRun) {
  Counts acked;
  const std::string image =
      CrashImage(TempDir("noanalysis_live"), "noanalysis_image", &acked, 10);
  auto files = [&] {
    std::map<std::string, uintmax_t> out;
    for (const auto& e : std::filesystem::directory_iterator(image)) {
      const std::string name = e.path().filename().string();
      if (name == "LOG" || name == "LOG.old") continue;
      out[name] = std::filesystem::file_size(e.path());
    }
    return out;
  };
  const auto before = files();
  auto fs = std::make_shared<FaultFileSystem>();
  fs->FailReads("/CURRENT", 1);
  TrieStoreOptions strict;
  strict.wal_recovery = WalRecoveryMode::kStrict;
  strict.file_system = fs;
  auto refused = TrieStore::Open(image, strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("cannot check WAL"));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("refusing to start with --wal_recovery=strict"));
  EXPECT_EQ(files(), before) << "strict changed the directory";

  // It was the read that failed: the next strict start works, loses nothing.
  auto store = TrieStore::Open(image, strict);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_GT((*store)->wal_recovery().records_read, 0);
  EXPECT_EQ(ScanCounts(**store), acked);
}

TEST(WalRecoveryTest, StrictCreatesAFreshStore) {
  TrieStoreOptions strict;
  strict.wal_recovery = WalRecoveryMode::kStrict;
  auto store = TrieStore::Open(TempDir("strict_fresh"), strict);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(SubmitAndWait(**store, 1).ok());
}

TEST(AckMarkerTest, RoundTripsAndRejectsDamage) {
  AckMarker m{7, 1234, 4, 99999, 3, 0};
  const std::string bytes = EncodeAckMarker(m);
  ASSERT_EQ(bytes.size(), kAckMarkerBytes);
  auto back = DecodeAckMarker(bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->round, 7u);
  EXPECT_EQ(back->sequence, 1234u);
  EXPECT_EQ(back->wal_bytes, 99999u);
  std::string torn = bytes;
  torn[20] ^= 1;
  EXPECT_FALSE(DecodeAckMarker(torn).has_value());
  EXPECT_FALSE(DecodeAckMarker(bytes.substr(0, 30)).has_value());
}

}  // namespace
}  // namespace lookahead::draftsvc
