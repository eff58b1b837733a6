#include "common/wire_request.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/wire_validation.h"

namespace lookahead {

absl::Status ParseWireRequest(const grpc::ByteBuffer& wire,
                              google::protobuf::Message* request) {
  grpc::Slice slice;
  if (!wire.DumpToSingleSlice(&slice).ok()) {
    return absl::InvalidArgumentError("request body could not be read");
  }
  const absl::string_view bytes(reinterpret_cast<const char*>(slice.begin()),
                                slice.size());
  absl::Status checked = CheckWireUtf8(bytes, *request->GetDescriptor());
  if (!checked.ok()) return checked;
  if (!request->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request is not a valid ", request->GetDescriptor()->full_name()));
  }
  return absl::OkStatus();
}

grpc::ByteBuffer SerializeResponse(const google::protobuf::Message& message) {
  grpc::ByteBuffer buffer;
  bool own_buffer = false;
  // Fails only past 2 GiB, which no response of ours comes near.
  grpc::SerializationTraits<google::protobuf::Message>::Serialize(
      message, &buffer, &own_buffer);
  return buffer;
}

void RateLimitedLog::Log(absl::string_view line) {
  const absl::Time now = absl::Now();
  int64_t left_out = 0;
  {
    absl::MutexLock lock(&mu_);
    if (now < next_) {
      ++left_out_;
      return;
    }
    next_ = now + interval_;
    left_out = left_out_;
    left_out_ = 0;
  }
  if (left_out > 0) {
    std::printf("%s: %s (and %lld more like it not logged)\n", program_.c_str(),
                std::string(line).c_str(), static_cast<long long>(left_out));
  } else {
    std::printf("%s: %s\n", program_.c_str(), std::string(line).c_str());
  }
  std::fflush(stdout);
}

}  // namespace lookahead
