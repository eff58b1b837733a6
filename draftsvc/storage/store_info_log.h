// StoreInfoLog: the RocksDB info log (Options::info_log) of the trie store.
// It replaces RocksDB's own LOG writer, which aborts the process (a
// WritableFileWriter assertion) when it logs again after the disk filled up:
// this one writes <db>/LOG with stdio and simply stops writing on the first
// error. It also collects RocksDB's WAL-recovery drop lines ("<file>: dropping
// N bytes; <reason>") so the store can report them.
//
// Nothing touches <db>/LOG until Start(): lines logged before are kept in
// memory, so that a start that fails on another process's DB lock leaves
// that process's LOG alone.
//
// Thread-safety: safe for concurrent use (RocksDB logs from many threads).
#ifndef LOOKAHEAD_DRAFTSVC_STORAGE_STORE_INFO_LOG_H_
#define LOOKAHEAD_DRAFTSVC_STORAGE_STORE_INFO_LOG_H_

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/env.h"

namespace lookahead::draftsvc {

// One "dropping N bytes" report of RocksDB's WAL reader during recovery.
struct WalDropLine {
  std::string file;    // The WAL file, as RocksDB names it (full path).
  int64_t bytes = 0;   // Bytes RocksDB says it dropped.
  std::string reason;  // E.g. "Corruption: truncated record body".
};

class StoreInfoLog : public rocksdb::Logger {
 public:
  // Will log to `dir`/LOG once Start()ed; until then lines are kept in
  // memory (at most kMaxBufferedBytes; later ones only parsed). Never fails.
  explicit StoreInfoLog(const std::string& dir);
  ~StoreInfoLog() override;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override;
  void Logv(const rocksdb::InfoLogLevel level, const char* format,
            va_list ap) override;

  // From now on lines go to `dir`/LOG, the kept ones first. `rotate`: a
  // previous LOG is renamed LOG.old and LOG starts empty; else LOG is
  // appended to. REQUIRES for `rotate`: the caller holds the database's
  // lock (no live process uses this LOG). If the file cannot be opened it
  // logs nothing (lines are still parsed). Later calls do nothing.
  void Start(bool rotate);

  // The drop lines seen since the last call, oldest first.
  std::vector<WalDropLine> TakeWalDrops();

  static constexpr size_t kMaxBufferedBytes = size_t{1} << 20;

 private:
  void Write(const char* level, const std::string& line);

  const std::string path_;  // `dir`/LOG.
  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::string buffered_ ABSL_GUARDED_BY(mu_);       // Until Start().
  std::FILE* file_ ABSL_GUARDED_BY(mu_) = nullptr;  // Null once failed.
  std::vector<WalDropLine> drops_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_STORAGE_STORE_INFO_LOG_H_
