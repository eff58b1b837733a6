// FaultFileSystem: a RocksDB FileSystem that passes everything to the real
// (POSIX) one but makes writes fail on demand: ENOSPC (a full disk), EIO, or
// EROFS (a read-only remount). For tests and for draftsvc's TEST-ONLY flag
// --testing_store_fault_file; production stores never use it.
//
// While a fault is active every write-side operation of a file the store
// writes fails: Append, PositionedAppend, Truncate, Allocate, the marker's
// Write, and (for kIoError and kReadOnly) Sync/Fsync and new files too. A full
// disk still lets files be created and synced, as a real one does.
//
// Thread-safety: safe for concurrent use.
#ifndef LOOKAHEAD_DRAFTSVC_FAULT_FILE_SYSTEM_H_
#define LOOKAHEAD_DRAFTSVC_FAULT_FILE_SYSTEM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
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

  // The error the next write would get (OK if none). Counts the write.
  rocksdb::IOStatus NextWrite();
  // The fault in force now, without counting a write.
  StoreFault CurrentFault() const;
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

 private:
  rocksdb::IOStatus ErrorFor(StoreFault fault) const;

  std::atomic<int> fault_{static_cast<int>(StoreFault::kNone)};
  std::atomic<int64_t> writes_before_fault_{0};
  std::atomic<int64_t> failed_writes_{0};
  std::string control_file_;  // Set before use; read-only afterwards.
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_FAULT_FILE_SYSTEM_H_
