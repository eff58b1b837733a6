#include "draftsvc/storage/store_info_log.h"

#include <cstdio>
#include <ctime>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace lookahead::draftsvc {
namespace {

std::string Format(const char* format, va_list ap) {
  char buffer[1024];
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(buffer, sizeof(buffer), format, copy);
  va_end(copy);
  if (n < 0) return std::string();
  if (static_cast<size_t>(n) < sizeof(buffer)) return std::string(buffer, n);
  std::string out(n + 1, '\0');
  std::vsnprintf(out.data(), out.size(), format, ap);
  out.resize(n);
  return out;
}

const char* LevelName(rocksdb::InfoLogLevel level) {
  switch (level) {
    case rocksdb::InfoLogLevel::DEBUG_LEVEL:
      return "DEBUG";
    case rocksdb::InfoLogLevel::INFO_LEVEL:
      return "INFO";
    case rocksdb::InfoLogLevel::WARN_LEVEL:
      return "WARN";
    case rocksdb::InfoLogLevel::ERROR_LEVEL:
      return "ERROR";
    case rocksdb::InfoLogLevel::FATAL_LEVEL:
      return "FATAL";
    case rocksdb::InfoLogLevel::HEADER_LEVEL:
      return "HEADER";
    default:
      return "?";
  }
}

// Parses RocksDB's "[(ignoring error) ]<file>: dropping <n> bytes; <reason>"
// (db_impl_open.cc, LogReporter::Corruption). Returns false otherwise.
bool ParseDropLine(absl::string_view line, WalDropLine* out) {
  constexpr absl::string_view kDropping = ": dropping ";
  const size_t at = line.find(kDropping);
  if (at == absl::string_view::npos) return false;
  absl::string_view file = line.substr(0, at);
  const size_t space = file.rfind(' ');
  if (space != absl::string_view::npos) file = file.substr(space + 1);
  absl::string_view rest = line.substr(at + kDropping.size());
  const size_t bytes_end = rest.find(" bytes");
  if (bytes_end == absl::string_view::npos) return false;
  int64_t bytes = 0;
  if (!absl::SimpleAtoi(rest.substr(0, bytes_end), &bytes)) return false;
  rest = rest.substr(bytes_end + 6);
  if (!rest.empty() && rest[0] == ';') rest.remove_prefix(1);
  while (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
  out->file = std::string(file);
  out->bytes = bytes;
  out->reason = std::string(rest);
  return true;
}

}  // namespace

StoreInfoLog::StoreInfoLog(const std::string& dir)
    : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), path_(dir + "/LOG") {}

void StoreInfoLog::Start(bool rotate) {
  absl::MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  if (rotate) std::rename(path_.c_str(), (path_ + ".old").c_str());
  file_ = std::fopen(path_.c_str(), rotate ? "w" : "a");
  std::string kept;
  kept.swap(buffered_);
  if (file_ != nullptr &&
      (std::fwrite(kept.data(), 1, kept.size(), file_) != kept.size() ||
       std::fflush(file_) != 0)) {
    std::fclose(file_);
    file_ = nullptr;
  }
}

StoreInfoLog::~StoreInfoLog() {
  absl::MutexLock lock(&mu_);
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

void StoreInfoLog::Logv(const char* format, va_list ap) {
  Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
}

void StoreInfoLog::Logv(const rocksdb::InfoLogLevel level, const char* format,
                        va_list ap) {
  if (level < GetInfoLogLevel()) return;
  const std::string line = Format(format, ap);
  WalDropLine drop;
  if (ParseDropLine(line, &drop)) {
    absl::MutexLock lock(&mu_);
    drops_.push_back(std::move(drop));
  }
  Write(LevelName(level), line);
}

void StoreInfoLog::Write(const char* level, const std::string& line) {
  const std::string text = absl::StrCat(
      absl::FormatTime("%Y/%m/%d-%H:%M:%E6S", absl::Now(), absl::UTCTimeZone()),
      " ", level, " ", line, line.empty() || line.back() != '\n' ? "\n" : "");
  absl::MutexLock lock(&mu_);
  if (!started_) {
    if (buffered_.size() + text.size() <= kMaxBufferedBytes) {
      buffered_ += text;
    }
    return;
  }
  if (file_ == nullptr) return;
  // The disk may be full: the first failed write ends this log (RocksDB's
  // own writer asserts here instead).
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() ||
      std::fflush(file_) != 0) {
    std::fclose(file_);
    file_ = nullptr;
  }
}

std::vector<WalDropLine> StoreInfoLog::TakeWalDrops() {
  absl::MutexLock lock(&mu_);
  std::vector<WalDropLine> out;
  out.swap(drops_);
  return out;
}

}  // namespace lookahead::draftsvc
