#include "draftsvc/testing/fault_file_system.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace lookahead::draftsvc {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

class FaultWritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultWritableFile(std::unique_ptr<rocksdb::FSWritableFile> file,
                    FaultFileSystem* fs, std::string fname)
      : FSWritableFileOwnerWrapper(std::move(file)),
        fs_(fs),
        fname_(std::move(fname)) {}

  IOStatus Append(const Slice& data, const IOOptions& options,
                  IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite(fname_);
    return s.ok() ? target()->Append(data, options, dbg) : s;
  }
  IOStatus Append(const Slice& data, const IOOptions& options,
                  const rocksdb::DataVerificationInfo& info,
                  IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite(fname_);
    return s.ok() ? target()->Append(data, options, info, dbg) : s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                            const IOOptions& options,
                            IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite(fname_);
    return s.ok() ? target()->PositionedAppend(data, offset, options, dbg) : s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                            const IOOptions& options,
                            const rocksdb::DataVerificationInfo& info,
                            IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite(fname_);
    return s.ok() ? target()->PositionedAppend(data, offset, options, info, dbg)
                  : s;
  }
  IOStatus Truncate(uint64_t size, const IOOptions& options,
                    IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite(fname_);
    return s.ok() ? target()->Truncate(size, options, dbg) : s;
  }
  IOStatus Allocate(uint64_t offset, uint64_t len, const IOOptions& options,
                    IODebugContext* dbg) override {
    if (fs_->CurrentFault(fname_) != StoreFault::kNone) {
      return IOStatus::NoSpace("fault injection", std::strerror(ENOSPC));
    }
    return target()->Allocate(offset, len, options, dbg);
  }
  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = fs_->NextSync(fname_);
    return s.ok() ? target()->Sync(options, dbg) : s;
  }
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    return Sync(options, dbg);
  }

 private:
  FaultFileSystem* const fs_;
  const std::string fname_;
};

class FaultRandomRWFile : public rocksdb::FSRandomRWFileOwnerWrapper {
 public:
  FaultRandomRWFile(std::unique_ptr<rocksdb::FSRandomRWFile> file,
                    FaultFileSystem* fs, std::string fname)
      : FSRandomRWFileOwnerWrapper(std::move(file)),
        fs_(fs),
        fname_(std::move(fname)) {}

  IOStatus Write(uint64_t offset, const Slice& data, const IOOptions& options,
                 IODebugContext* dbg) override {
    IOStatus s = fs_->NextWrite(fname_);
    return s.ok() ? target()->Write(offset, data, options, dbg) : s;
  }
  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = fs_->NextSync(fname_);
    return s.ok() ? target()->Sync(options, dbg) : s;
  }
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    return Sync(options, dbg);
  }

 private:
  FaultFileSystem* const fs_;
  const std::string fname_;
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

void FaultFileSystem::InjectForFile(std::string name_suffix, StoreFault fault,
                                    int64_t after_writes) {
  absl::MutexLock lock(&mu_);
  file_suffix_ = std::move(name_suffix);
  file_fault_ = fault;
  file_writes_before_fault_ = after_writes;
}

void FaultFileSystem::FailReads(std::string name_suffix, int64_t times) {
  absl::MutexLock lock(&mu_);
  read_suffix_ = std::move(name_suffix);
  failing_reads_ = times;
}

StoreFault FaultFileSystem::CurrentFault(absl::string_view fname) const {
  {
    absl::MutexLock lock(&mu_);
    if (file_fault_ != StoreFault::kNone && !file_suffix_.empty() &&
        absl::EndsWith(fname, file_suffix_) && file_writes_before_fault_ <= 0) {
      return file_fault_;
    }
  }
  return GlobalFault();
}

StoreFault FaultFileSystem::GlobalFault() const {
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

IOStatus FaultFileSystem::NextWrite(absl::string_view fname) {
  {
    absl::MutexLock lock(&mu_);
    if (file_fault_ != StoreFault::kNone && !file_suffix_.empty() &&
        absl::EndsWith(fname, file_suffix_)) {
      if (file_writes_before_fault_ > 0) {
        --file_writes_before_fault_;
      } else {
        failed_writes_.fetch_add(1);
        return ErrorFor(file_fault_);
      }
    }
  }
  if (control_file_.empty() &&
      static_cast<StoreFault>(fault_.load()) != StoreFault::kNone &&
      writes_before_fault_.fetch_sub(1) > 0) {
    return IOStatus::OK();
  }
  IOStatus s = ErrorFor(GlobalFault());
  if (!s.ok()) failed_writes_.fetch_add(1);
  return s;
}

IOStatus FaultFileSystem::NextRead(absl::string_view fname) {
  absl::MutexLock lock(&mu_);
  if (failing_reads_ > 0 && !read_suffix_.empty() &&
      absl::EndsWith(fname, read_suffix_)) {
    --failing_reads_;
    return IOStatus::IOError("fault injection (read)", std::strerror(EIO));
  }
  return IOStatus::OK();
}

template <typename Wrapper, typename File, typename Open>
IOStatus FaultFileSystem::OpenForWriting(const std::string& fname,
                                         std::unique_ptr<File>* result,
                                         Open open) {
  if (CurrentFault(fname) == StoreFault::kReadOnly) return NextWrite(fname);
  std::unique_ptr<File> file;
  IOStatus s = open(&file);
  if (s.ok()) result->reset(new Wrapper(std::move(file), this, fname));
  return s;
}

IOStatus FaultFileSystem::NextSync(absl::string_view fname) {
  const StoreFault f = CurrentFault(fname);
  if (f == StoreFault::kIoError || f == StoreFault::kReadOnly) {
    return NextWrite(fname);
  }
  return IOStatus::OK();
}

IOStatus FaultFileSystem::NewWritableFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  return OpenForWriting<FaultWritableFile>(fname, result, [&](auto* file) {
    return target()->NewWritableFile(fname, options, file, dbg);
  });
}

IOStatus FaultFileSystem::ReopenWritableFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  return OpenForWriting<FaultWritableFile>(fname, result, [&](auto* file) {
    return target()->ReopenWritableFile(fname, options, file, dbg);
  });
}

IOStatus FaultFileSystem::ReuseWritableFile(
    const std::string& fname, const std::string& old_fname,
    const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  return OpenForWriting<FaultWritableFile>(fname, result, [&](auto* file) {
    return target()->ReuseWritableFile(fname, old_fname, options, file, dbg);
  });
}

IOStatus FaultFileSystem::NewRandomRWFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSRandomRWFile>* result, IODebugContext* dbg) {
  return OpenForWriting<FaultRandomRWFile>(fname, result, [&](auto* file) {
    return target()->NewRandomRWFile(fname, options, file, dbg);
  });
}

IOStatus FaultFileSystem::NewSequentialFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSSequentialFile>* result, IODebugContext* dbg) {
  IOStatus s = NextRead(fname);
  return s.ok() ? target()->NewSequentialFile(fname, options, result, dbg) : s;
}

IOStatus FaultFileSystem::NewRandomAccessFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSRandomAccessFile>* result, IODebugContext* dbg) {
  IOStatus s = NextRead(fname);
  return s.ok() ? target()->NewRandomAccessFile(fname, options, result, dbg)
                : s;
}

}  // namespace lookahead::draftsvc
