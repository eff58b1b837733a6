// Hand-made gRPC requests for hostile-input tests: bytes sent exactly as
// given (no client-side serialization, so no client-side UTF-8 check), and
// a serialized message with one placeholder swapped for bad bytes.
#ifndef LOOKAHEAD_TESTS_RAW_GRPC_CALL_H_
#define LOOKAHEAD_TESTS_RAW_GRPC_CALL_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "google/protobuf/message.h"

namespace lookahead::testing {

// What a call with a hand-made request body got back.
struct RawReply {
  grpc::Status status;
  int messages = 0;
};

// Sends `body` as the one request message of `method` ("/pkg.Service/M") to
// 127.0.0.1:`port` on a generic stub; reads every response message.
RawReply RawCall(int port, const std::string& method, const std::string& body);

// `message` serialized, with the one occurrence of `placeholder` replaced
// by `bytes` of the same length (so every length prefix stays right).
std::string WireWith(const google::protobuf::Message& message,
                     const std::string& placeholder, const std::string& bytes);

}  // namespace lookahead::testing

#endif  // LOOKAHEAD_TESTS_RAW_GRPC_CALL_H_
