// A request's wire bytes to its proto message, for the GenerationService
// methods registered raw (grpc::ByteBuffer in): invalid UTF-8 in a string
// field becomes INVALID_ARGUMENT naming the field instead of gRPC's bare
// UNIMPLEMENTED and a libprotobuf ERROR line per request. And a log that a
// flood of bad requests cannot flood. Thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_API_WIRE_REQUEST_H_
#define LOOKAHEAD_VERIFYSVC_API_WIRE_REQUEST_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"

namespace lookahead::verifysvc {

// Parses `wire` into `*request` iff every string field in it (nested ones
// included) is valid UTF-8 and the bytes parse; else INVALID_ARGUMENT
// naming the field path ("chat.messages[2].role") and nothing of its
// bytes. Valid requests parse exactly as gRPC's generated handler would.
absl::Status ParseWireRequest(const grpc::ByteBuffer& wire,
                              google::protobuf::Message* request);

// `message` serialized as gRPC's generated handler would send it.
grpc::ByteBuffer SerializeResponse(const google::protobuf::Message& message);

// Writes at most one line per `interval` to stdout; the next line written
// says how many were left out in between.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(absl::Duration interval) : interval_(interval) {}

  void Log(absl::string_view line) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const absl::Duration interval_;

  absl::Mutex mu_;
  absl::Time next_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t left_out_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_API_WIRE_REQUEST_H_
