// Honest WAL recovery for the trie store: what RocksDB's recovery dropped of
// the writes the store had acknowledged.
//
// RocksDB's point-in-time recovery silently stops at the first damaged WAL
// record; its LOG names at most the one torn record, not the acknowledged
// writes after it (a WAL cut in half loses megabytes and logs "dropping 200
// bytes"). So the store keeps its own evidence, outside the WAL:
//   * every write round carries its round number as WAL-only LogData;
//   * after each acknowledged round the store overwrites the small ACK marker
//     file (<db>/LOOKAHEAD-ACK) with {round, last sequence number, WAL file
//     number, WAL size} of that round;
//   * at open a WalFilter sees every WAL record RocksDB reads (its round, its
//     size) and the info log collects RocksDB's own "dropping N bytes" lines.
// Recovered sequence < marker sequence means acknowledged writes were lost:
// records = acknowledged rounds after the last round read back, bytes =
// acknowledged WAL bytes after the end of the last record read back (the
// WAL's physical layout, 32 KiB blocks of 7-byte-header fragments, is
// replayed exactly), updates = sequence numbers missing.
//
// Thread-safety: the types here are thread-compatible.
#ifndef LOOKAHEAD_DRAFTSVC_STORAGE_WAL_RECOVERY_H_
#define LOOKAHEAD_DRAFTSVC_STORAGE_WAL_RECOVERY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "draftsvc/storage/store_info_log.h"
#include "rocksdb/wal_filter.h"

namespace lookahead::draftsvc {

// What to do when recovery dropped acknowledged writes.
enum class WalRecoveryMode {
  // Start with what survived and report the loss (log, Stats, metrics).
  kTolerate,
  // Refuse to open (FAILED_PRECONDITION naming the loss); the directory is
  // left as it was (the analysis opens it read-only).
  kStrict,
};

// "tolerate" | "strict" -> mode; false if unknown.
bool ParseWalRecoveryMode(absl::string_view text, WalRecoveryMode* mode);

// The ACK marker: the last acknowledged round. Persisted (LOOKAHEAD-ACK,
// kAckMarkerBytes, little-endian, checksummed): DO NOT CHANGE the layout of
// version 1.
struct AckMarker {
  uint64_t round = 0;            // Last acknowledged write round.
  uint64_t sequence = 0;         // RocksDB's last sequence number after it.
  uint64_t wal_number = 0;       // WAL file holding it (<number>.log).
  uint64_t wal_bytes = 0;        // That WAL's size after it.
  uint64_t wal_first_round = 0;  // First round written into that WAL.
  // Rounds >= this (0: none) failed to write and were never acknowledged; a
  // copy RocksDB may still find in the WAL is skipped at the next open (the
  // store re-writes them from memory).
  uint64_t ignore_from_round = 0;
};
inline constexpr char kAckMarkerFile[] = "LOOKAHEAD-ACK";
inline constexpr size_t kAckMarkerBytes = 64;
std::string EncodeAckMarker(const AckMarker& marker);
// nullopt iff `bytes` is not a valid version-1 marker.
std::optional<AckMarker> DecodeAckMarker(absl::string_view bytes);

// The WAL-only LogData blob that tags a write round: "lkr1" + fixed64 round.
std::string RoundTag(uint64_t round);

// What one WAL file gave back during recovery.
struct WalReadBack {
  int64_t records = 0;      // Records RocksDB read (applied or skipped).
  int64_t ignored = 0;      // Failed rounds skipped (>= ignore_from_round).
  uint64_t last_round = 0;  // Largest round tag read (0: none).
  uint64_t end_offset = 0;  // File offset after the last record read.
};

// Sees every record RocksDB reads while recovering (read-write or
// read-only open); skips failed rounds. Set as DBOptions::wal_filter for the
// duration of one DB::Open.
class RoundWalFilter : public rocksdb::WalFilter {
 public:
  explicit RoundWalFilter(uint64_t ignore_from_round)
      : ignore_from_round_(ignore_from_round) {}

  WalProcessingOption LogRecordFound(unsigned long long log_number,
                                     const std::string& log_file_name,
                                     const rocksdb::WriteBatch& batch,
                                     rocksdb::WriteBatch* new_batch,
                                     bool* batch_changed) override;
  const char* Name() const override { return "lookahead.RoundWalFilter"; }

  // Per WAL file number.
  const std::map<uint64_t, WalReadBack>& read_back() const {
    return read_back_;
  }
  // Largest round tag read in any file (0: none).
  uint64_t max_round() const { return max_round_; }

 private:
  const uint64_t ignore_from_round_;
  std::map<uint64_t, WalReadBack> read_back_;
  uint64_t max_round_ = 0;
};

// What recovery dropped. "Acknowledged" means the store reported the round
// written (its `done` callbacks ran OK).
struct WalRecoveryReport {
  bool marker_found = false;    // False for a new store or one from before.
  std::string wal_file;         // The WAL that lost acknowledged writes.
  int64_t dropped_records = 0;  // Acknowledged write rounds not recovered.
  int64_t dropped_bytes = 0;    // Acknowledged WAL bytes not recovered.
  int64_t dropped_updates = 0;  // Sequence numbers (key updates) missing.
  // Bytes RocksDB itself reported dropping (its LOG lines), acknowledged or
  // not: a torn record of a write that failed or was cut off is expected.
  int64_t rocksdb_dropped_bytes = 0;
  std::vector<WalDropLine> rocksdb_lines;
  int64_t records_read = 0;     // WAL records read back, all files.
  int64_t records_ignored = 0;  // Failed rounds skipped.

  // True iff acknowledged writes were lost, or (without a marker, nothing to
  // compare with) RocksDB reported dropping anything.
  bool LostAcknowledged() const {
    return dropped_records > 0 || (!marker_found && rocksdb_dropped_bytes > 0);
  }
  // One line for logs and errors.
  std::string Summary() const;
};

// Builds the report from the marker (if any), the filter's read-back, the
// info log's drop lines and the recovered last sequence number.
WalRecoveryReport AnalyzeWalRecovery(const std::optional<AckMarker>& marker,
                                     const RoundWalFilter& filter,
                                     std::vector<WalDropLine> lines,
                                     uint64_t recovered_sequence);

// "<6-digit number>.log", RocksDB's WAL file name.
std::string WalFileName(uint64_t number);

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_STORAGE_WAL_RECOVERY_H_
