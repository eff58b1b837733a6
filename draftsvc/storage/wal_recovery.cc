#include "draftsvc/storage/wal_recovery.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "draftsvc/storage/trie_format.h"
#include "rocksdb/write_batch.h"

namespace lookahead::draftsvc {
namespace {

namespace fmt = trie_format;

constexpr char kMarkerMagic[] = "LKACK001";  // 8 bytes: format version 1.
constexpr char kRoundTagPrefix[] = "lkr1";

// FNV-1a 64 over `bytes`: enough to tell a torn or foreign marker.
uint64_t Checksum(absl::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Finds our round tag (LogData) in a WAL record; stops at the first one.
class RoundTagReader : public rocksdb::WriteBatch::Handler {
 public:
  rocksdb::Status PutCF(uint32_t, const rocksdb::Slice&,
                        const rocksdb::Slice&) override {
    return rocksdb::Status::OK();
  }
  rocksdb::Status DeleteCF(uint32_t, const rocksdb::Slice&) override {
    return rocksdb::Status::OK();
  }
  rocksdb::Status SingleDeleteCF(uint32_t, const rocksdb::Slice&) override {
    return rocksdb::Status::OK();
  }
  rocksdb::Status DeleteRangeCF(uint32_t, const rocksdb::Slice&,
                                const rocksdb::Slice&) override {
    return rocksdb::Status::OK();
  }
  rocksdb::Status MergeCF(uint32_t, const rocksdb::Slice&,
                          const rocksdb::Slice&) override {
    return rocksdb::Status::OK();
  }
  void LogData(const rocksdb::Slice& blob) override {
    absl::string_view b(blob.data(), blob.size());
    uint64_t round = 0;
    if (b.size() == 12 && b.substr(0, 4) == kRoundTagPrefix &&
        fmt::DecodeFixed64(b.substr(4), &round)) {
      round_ = round;
    }
  }
  bool Continue() override { return round_ == 0; }

  uint64_t round() const { return round_; }

 private:
  uint64_t round_ = 0;
};

// The file offset after writing a record of `n` payload bytes at `offset`
// with RocksDB's log::Writer (leveldb log format): 32 KiB blocks, each
// fragment a 7-byte header plus payload, a block tail shorter than a header
// zero-padded.
uint64_t AfterRecord(uint64_t offset, uint64_t n) {
  constexpr uint64_t kBlock = 32768, kHeader = 7;
  uint64_t left = n;
  do {
    uint64_t in_block = offset % kBlock;
    if (kBlock - in_block < kHeader) {
      offset += kBlock - in_block;
      in_block = 0;
    }
    const uint64_t avail = kBlock - in_block - kHeader;
    const uint64_t fragment = std::min(left, avail);
    offset += kHeader + fragment;
    left -= fragment;
  } while (left > 0);
  return offset;
}

std::string HumanBytes(int64_t bytes) {
  if (bytes < 10 * 1024) return absl::StrCat(bytes, " bytes");
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f MiB",
                static_cast<double>(bytes) / (1 << 20));
  return absl::StrCat(bytes, " bytes, ", buffer);
}

}  // namespace

bool ParseWalRecoveryMode(absl::string_view text, WalRecoveryMode* mode) {
  const std::string t = absl::AsciiStrToLower(text);
  if (t == "tolerate") {
    *mode = WalRecoveryMode::kTolerate;
  } else if (t == "strict") {
    *mode = WalRecoveryMode::kStrict;
  } else {
    return false;
  }
  return true;
}

std::string EncodeAckMarker(const AckMarker& m) {
  std::string out(kMarkerMagic, 8);
  for (uint64_t v : {m.round, m.sequence, m.wal_number, m.wal_bytes,
                     m.wal_first_round, m.ignore_from_round}) {
    out += fmt::EncodeFixed64(v);
  }
  out += fmt::EncodeFixed64(Checksum(out));
  return out;  // 8 + 6 * 8 + 8 = kAckMarkerBytes
}

std::optional<AckMarker> DecodeAckMarker(absl::string_view bytes) {
  if (bytes.size() < kAckMarkerBytes) return std::nullopt;
  bytes = bytes.substr(0, kAckMarkerBytes);
  if (bytes.substr(0, 8) != absl::string_view(kMarkerMagic, 8)) {
    return std::nullopt;
  }
  uint64_t v[7];
  for (int i = 0; i < 7; ++i) {
    if (!fmt::DecodeFixed64(bytes.substr(8 + 8 * i, 8), &v[i])) {
      return std::nullopt;
    }
  }
  if (v[6] != Checksum(bytes.substr(0, kAckMarkerBytes - 8))) {
    return std::nullopt;
  }
  AckMarker m;
  m.round = v[0];
  m.sequence = v[1];
  m.wal_number = v[2];
  m.wal_bytes = v[3];
  m.wal_first_round = v[4];
  m.ignore_from_round = v[5];
  return m;
}

std::string RoundTag(uint64_t round) {
  return absl::StrCat(kRoundTagPrefix, fmt::EncodeFixed64(round));
}

std::string WalFileName(uint64_t number) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%06llu.log",
                static_cast<unsigned long long>(number));
  return buffer;
}

rocksdb::WalFilter::WalProcessingOption RoundWalFilter::LogRecordFound(
    unsigned long long log_number, const std::string& /*log_file_name*/,
    const rocksdb::WriteBatch& batch, rocksdb::WriteBatch* /*new_batch*/,
    bool* batch_changed) {
  *batch_changed = false;
  WalReadBack& file = read_back_[log_number];
  ++file.records;
  file.end_offset = AfterRecord(file.end_offset, batch.GetDataSize());
  RoundTagReader reader;
  batch.Iterate(&reader).PermitUncheckedError();
  const uint64_t round = reader.round();
  if (round != 0 && ignore_from_round_ != 0 && round >= ignore_from_round_) {
    ++file.ignored;
    return WalProcessingOption::kIgnoreCurrentRecord;
  }
  file.last_round = std::max(file.last_round, round);
  max_round_ = std::max(max_round_, round);
  return WalProcessingOption::kContinueProcessing;
}

WalRecoveryReport AnalyzeWalRecovery(const std::optional<AckMarker>& marker,
                                     const RoundWalFilter& filter,
                                     std::vector<WalDropLine> lines,
                                     uint64_t recovered_sequence) {
  WalRecoveryReport r;
  for (const WalDropLine& line : lines) r.rocksdb_dropped_bytes += line.bytes;
  r.rocksdb_lines = std::move(lines);
  for (const auto& [number, file] : filter.read_back()) {
    r.records_read += file.records;
    r.records_ignored += file.ignored;
  }
  if (!marker.has_value()) return r;
  r.marker_found = true;
  if (recovered_sequence >= marker->sequence) return r;
  r.dropped_updates =
      static_cast<int64_t>(marker->sequence - recovered_sequence);
  r.wal_file = WalFileName(marker->wal_number);
  // Rounds are consecutive (a round number is used again after a failed
  // write), so the last round read back anywhere bounds what survived.
  auto it = filter.read_back().find(marker->wal_number);
  const bool read_marker_wal =
      it != filter.read_back().end() && it->second.records > it->second.ignored;
  const uint64_t last_round = filter.max_round() != 0
                                  ? filter.max_round()
                                  : marker->wal_first_round - 1;
  r.dropped_records =
      last_round < marker->round
          ? static_cast<int64_t>(marker->round - last_round)
          : 1;  // Fewer updates than acknowledged, yet every round read back.
  if (read_marker_wal) {
    r.dropped_bytes =
        marker->wal_bytes > it->second.end_offset
            ? static_cast<int64_t>(marker->wal_bytes - it->second.end_offset)
            : 0;
  } else {
    r.dropped_bytes = static_cast<int64_t>(marker->wal_bytes);
  }
  return r;
}

std::string WalRecoveryReport::Summary() const {
  std::string out;
  if (dropped_records > 0) {
    out =
        absl::StrCat("WAL recovery dropped ", dropped_records,
                     " acknowledged write records (", HumanBytes(dropped_bytes),
                     " of ", wal_file, ", ", dropped_updates, " key updates)");
  } else if (!marker_found && rocksdb_dropped_bytes > 0) {
    out = absl::StrCat("WAL recovery dropped ", rocksdb_dropped_bytes,
                       " bytes (no acknowledgement record to compare with)");
  } else {
    out = absl::StrCat("WAL recovery lost nothing acknowledged (", records_read,
                       " records read back");
    if (records_ignored > 0) {
      absl::StrAppend(&out, ", ", records_ignored,
                      " never-acknowledged failed writes skipped");
    }
    if (rocksdb_dropped_bytes > 0) {
      absl::StrAppend(&out, ", a torn unacknowledged tail of ",
                      rocksdb_dropped_bytes, " bytes dropped");
    }
    absl::StrAppend(&out, ")");
    return out;
  }
  for (const WalDropLine& line : rocksdb_lines) {
    absl::StrAppend(&out, "; RocksDB: ", line.file, " dropping ", line.bytes,
                    " bytes (", line.reason, ")");
  }
  return out;
}

}  // namespace lookahead::draftsvc
