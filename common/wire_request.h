// A request's wire bytes to its proto message, for gRPC methods registered
// raw (grpc::ByteBuffer in; verifysvc's GenerationService, draftsvc's
// DraftService): invalid UTF-8 in a string field becomes INVALID_ARGUMENT
// naming the field instead of gRPC's bare UNIMPLEMENTED and a libprotobuf
// ERROR line per request. And a log that a flood of bad requests cannot
// flood. Thread-safe.
#ifndef LOOKAHEAD_COMMON_WIRE_REQUEST_H_
#define LOOKAHEAD_COMMON_WIRE_REQUEST_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"

namespace lookahead {

// Parses `wire` into `*request` iff every string field in it (nested ones
// included) is valid UTF-8 and the bytes parse; else INVALID_ARGUMENT
// naming the field path ("chat.messages[2].role") and nothing of its
// bytes. Valid requests parse exactly as gRPC's generated handler would.
absl::Status ParseWireRequest(const grpc::ByteBuffer& wire,
                              google::protobuf::Message* request);

// `message` serialized as gRPC's generated handler would send it.
grpc::ByteBuffer SerializeResponse(const google::protobuf::Message& message);

// Writes at most one line per `interval` to stdout, prefixed with
// "<program>: "; the next line written says how many were left out in
// between.
class RateLimitedLog {
 public:
  RateLimitedLog(std::string program, absl::Duration interval)
      : program_(std::move(program)), interval_(interval) {}

  void Log(absl::string_view line) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string program_;
  const absl::Duration interval_;

  absl::Mutex mu_;
  absl::Time next_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t left_out_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_WIRE_REQUEST_H_
