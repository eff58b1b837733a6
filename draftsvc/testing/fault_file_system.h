// FaultFileSystem: a RocksDB FileSystem that passes everything to the real
// (POSIX) one but makes writes fail on demand: ENOSPC (a full disk), EIO, or
// EROFS (a read-only remount). For tests and for the testonly binary
// draftsvc_fault_testing's --testing_store_fault_file; the draftsvc binary
// does not link it.
//
// While a fault is active every write-side operation of a file the store
// writes fails: Append, PositionedAppend, Truncate, Allocate, the marker's
// Write, and (for kIoError and kReadOnly) Sync/Fsync and new files too. A full
// disk still lets files be created and synced, as a real one does. A fault
// can also hit only the files with a given name (InjectForFile), and opens
// for reading can be made to fail (FailReads).
//
// Thread-safety: safe for concurrent use.
#ifndef LOOKAHEAD_DRAFTSVC_TESTING_FAULT_FILE_SYSTEM_H_
#define LOOKAHEAD_DRAFTSVC_TESTING_FAULT_FILE_SYSTEM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/file_system.h"

namespace lookahead::draftsvc {

enum class StoreFault {
  kNone,
  kNoSpace,   // ENOSPC: "No space left on device".
  kIoError,   // EIO.
  kReadOnly,  // EROFS: "Read-only file system".
};

// "nospace" | "eio" | "readonly" | "none" -> fault; false if unknown.
bool ParseStoreFault(absl::string_view text, StoreFault* fault);

class FaultFileSystem : public rocksdb::FileSystemWrapper {
 public:
  // Over the default (POSIX) file system.
  FaultFileSystem();

  // From now on, after `after_writes` more successful write operations,
  // every write fails with `fault` (kNone: writes work again).
  void Inject(StoreFault fault, int64_t after_writes = 0);
  // If set, the fault is instead read from this file before each write: the
  // file's absence means kNone, else its first word (ParseStoreFault; empty
  // or unknown = kNoSpace). Lets a test fill and free the "disk" of another
  // process.
  void SetControlFile(std::string path);

  // From now on, after `after_writes` more successful write operations on
  // files whose name ends with `name_suffix`, every write to those files
  // fails with `fault`, whatever Inject() says for the others (kNone: off).
  // E.g. only the ACK marker's writes ("LOOKAHEAD-ACK").
  void InjectForFile(std::string name_suffix, StoreFault fault,
                     int64_t after_writes = 0);
  // The next `times` opens for reading (sequential or random access) of a
  // file whose name ends with `name_suffix` fail with EIO.
  void FailReads(std::string name_suffix, int64_t times);

  // The error the next write to `fname` would get (OK if none). Counts the
  // write.
  rocksdb::IOStatus NextWrite(absl::string_view fname);
  // A sync of `fname`: fails like a write under kIoError and kReadOnly
  // (ENOSPC lets syncs through: the data already has its blocks).
  rocksdb::IOStatus NextSync(absl::string_view fname);
  // The fault in force now for `fname`, without counting a write.
  StoreFault CurrentFault(absl::string_view fname) const;
  // Writes failed so far.
  int64_t failed_writes() const { return failed_writes_.load(); }

  static const char* kClassName() { return "LookaheadFaultFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(
      const std::string& fname, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& fname, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(
      const std::string& fname, const std::string& old_fname,
      const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomRWFile(
      const std::string& fname, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSRandomRWFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewSequentialFile(
      const std::string& fname, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSSequentialFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomAccessFile(
      const std::string& fname, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
      rocksdb::IODebugContext* dbg) override;

 private:
  rocksdb::IOStatus ErrorFor(StoreFault fault) const;
  // The global fault (Inject / the control file).
  StoreFault GlobalFault() const;
  // Counts an open for reading of `fname`; the error it gets (OK if none).
  rocksdb::IOStatus NextRead(absl::string_view fname);
  // Opens `fname` for writing with `open` (the target's open into a
  // std::unique_ptr<File>*) and wraps the file in a `Wrapper` that injects
  // the faults; under kReadOnly the open itself fails.
  template <typename Wrapper, typename File, typename Open>
  rocksdb::IOStatus OpenForWriting(const std::string& fname,
                                   std::unique_ptr<File>* result, Open open);

  std::atomic<int> fault_{static_cast<int>(StoreFault::kNone)};
  std::atomic<int64_t> writes_before_fault_{0};
  std::atomic<int64_t> failed_writes_{0};
  std::string control_file_;  // Set before use; read-only afterwards.

  mutable absl::Mutex mu_;  // The per-file faults.
  std::string file_suffix_ ABSL_GUARDED_BY(mu_);
  StoreFault file_fault_ ABSL_GUARDED_BY(mu_) = StoreFault::kNone;
  int64_t file_writes_before_fault_ ABSL_GUARDED_BY(mu_) = 0;
  std::string read_suffix_ ABSL_GUARDED_BY(mu_);
  int64_t failing_reads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_TESTING_FAULT_FILE_SYSTEM_H_
