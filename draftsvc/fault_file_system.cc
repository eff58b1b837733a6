#include "draftsvc/fault_file_system.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"

namespace lookahead::draftsvc {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

class FaultWritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultWritableFile(std::unique_ptr<rocksdb::FSWritableFile> file,
                    FaultFileSystem* fs)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs) {}

  IOStatus Append(const Slice& data, const IOOptions& options,
                  IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite();
    return s.ok() ? target()->Append(data, options, dbg) : s;
  }
  IOStatus Append(const Slice& data, const IOOptions& options,
                  const rocksdb::DataVerificationInfo& info,
                  IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite();
    return s.ok() ? target()->Append(data, options, info, dbg) : s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                            const IOOptions& options,
                            IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite();
    return s.ok() ? target()->PositionedAppend(data, offset, options, dbg) : s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                            const IOOptions& options,
                            const rocksdb::DataVerificationInfo& info,
                            IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite();
    return s.ok() ? target()->PositionedAppend(data, offset, options, info, dbg)
                  : s;
  }
  IOStatus Allocate(uint64_t offset, uint64_t len, const IOOptions& options,
                    IODebugContext* dbg) override {
    if (fs_->CurrentFault() != StoreFault::kNone) {
      return IOStatus::NoSpace("fault injection", std::strerror(ENOSPC));
    }
    return target()->Allocate(offset, len, options, dbg);
  }
  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override {
    const StoreFault f = fs_->CurrentFault();
    if (f == StoreFault::kIoError || f == StoreFault::kReadOnly) {
      return fs_->NextWrite();
    }
    return target()->Sync(options, dbg);
  }
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    return Sync(options, dbg);
  }

 private:
  FaultFileSystem* const fs_;
};

class FaultRandomRWFile : public rocksdb::FSRandomRWFileOwnerWrapper {
 public:
  FaultRandomRWFile(std::unique_ptr<rocksdb::FSRandomRWFile> file,
                    FaultFileSystem* fs)
      : FSRandomRWFileOwnerWrapper(std::move(file)), fs_(fs) {}

  IOStatus Write(uint64_t offset, const Slice& data, const IOOptions& options,
                 IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite();
    return s.ok() ? target()->Write(offset, data, options, dbg) : s;
  }
  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override {
    const StoreFault f = fs_->CurrentFault();
    if (f == StoreFault::kIoError || f == StoreFault::kReadOnly) {
      return fs_->NextWrite();
    }
    return target()->Sync(options, dbg);
  }
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    return Sync(options, dbg);
  }

 private:
  FaultFileSystem* const fs_;
};

}  // namespace

bool ParseStoreFault(absl::string_view text, StoreFault* fault) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "none") {
    *fault = StoreFault::kNone;
  } else if (t == "nospace" || t == "enospc") {
    *fault = StoreFault::kNoSpace;
  } else if (t == "eio" || t == "ioerror") {
    *fault = StoreFault::kIoError;
  } else if (t == "readonly" || t == "erofs") {
    *fault = StoreFault::kReadOnly;
  } else {
    return false;
  }
  return true;
}

FaultFileSystem::FaultFileSystem()
    : FileSystemWrapper(rocksdb::FileSystem::Default()) {}

void FaultFileSystem::Inject(StoreFault fault, int64_t after_writes) {
  writes_before_fault_.store(after_writes);
  fault_.store(static_cast<int>(fault));
}

void FaultFileSystem::SetControlFile(std::string path) {
  control_file_ = std::move(path);
}

StoreFault FaultFileSystem::CurrentFault() const {
  if (!control_file_.empty()) {
    std::ifstream in(control_file_);
    if (!in.good()) return StoreFault::kNone;
    std::string word;
    in >> word;
    StoreFault fault = StoreFault::kNoSpace;
    if (!ParseStoreFault(word, &fault)) fault = StoreFault::kNoSpace;
    return fault;
  }
  if (writes_before_fault_.load() > 0) return StoreFault::kNone;
  return static_cast<StoreFault>(fault_.load());
}

IOStatus FaultFileSystem::ErrorFor(StoreFault fault) const {
  switch (fault) {
    case StoreFault::kNone:
      return IOStatus::OK();
    case StoreFault::kNoSpace:
      return IOStatus::NoSpace("fault injection", std::strerror(ENOSPC));
    case StoreFault::kIoError:
      return IOStatus::IOError("fault injection", std::strerror(EIO));
    case StoreFault::kReadOnly:
      return IOStatus::IOError("fault injection", std::strerror(EROFS));
  }
  return IOStatus::IOError("fault injection");
}

IOStatus FaultFileSystem::NextWrite() {
  if (control_file_.empty() &&
      static_cast<StoreFault>(fault_.load()) != StoreFault::kNone &&
      writes_before_fault_.fetch_sub(1) > 0) {
    return IOStatus::OK();
  }
  IOStatus s = ErrorFor(CurrentFault());
  if (!s.ok()) failed_writes_.fetch_add(1);
  return s;
}

IOStatus FaultFileSystem::NewWritableFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  if (CurrentFault() == StoreFault::kReadOnly) return NextWrite();
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s = target()->NewWritableFile(fname, options, &file, dbg);
  if (s.ok()) result->reset(new FaultWritableFile(std::move(file), this));
  return s;
}

IOStatus FaultFileSystem::ReopenWritableFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  if (CurrentFault() == StoreFault::kReadOnly) return NextWrite();
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s = target()->ReopenWritableFile(fname, options, &file, dbg);
  if (s.ok()) result->reset(new FaultWritableFile(std::move(file), this));
  return s;
}

IOStatus FaultFileSystem::ReuseWritableFile(
    const std::string& fname, const std::string& old_fname,
    const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  if (CurrentFault() == StoreFault::kReadOnly) return NextWrite();
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s =
      target()->ReuseWritableFile(fname, old_fname, options, &file, dbg);
  if (s.ok()) result->reset(new FaultWritableFile(std::move(file), this));
  return s;
}

IOStatus FaultFileSystem::NewRandomRWFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSRandomRWFile>* result, IODebugContext* dbg) {
  if (CurrentFault() == StoreFault::kReadOnly) return NextWrite();
  std::unique_ptr<rocksdb::FSRandomRWFile> file;
  IOStatus s = target()->NewRandomRWFile(fname, options, &file, dbg);
  if (s.ok()) result->reset(new FaultRandomRWFile(std::move(file), this));
  return s;
}

}  // namespace lookahead::draftsvc
