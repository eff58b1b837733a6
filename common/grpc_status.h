// The one conversion between absl::Status and grpc::Status used at every
// service edge. Codes map one to one (both follow google.rpc.Code).
#ifndef LOOKAHEAD_COMMON_GRPC_STATUS_H_
#define LOOKAHEAD_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include <grpcpp/support/status.h>

namespace lookahead {

// Returns a grpc::Status with the same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Returns an absl::Status with the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_GRPC_STATUS_H_
