#include "tests/raw_grpc_call.h"

#include <grpcpp/generic/generic_stub.h>

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lookahead::testing {

RawReply RawCall(int port, const std::string& method, const std::string& body) {
  grpc::GenericStub stub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto wait = [&] {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    return ok;
  };
  RawReply reply;
  call->StartCall(nullptr);
  if (wait()) {
    grpc::Slice slice(body);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, nullptr);
    if (wait()) {
      call->WritesDone(nullptr);
      wait();
    }
    grpc::ByteBuffer response;
    for (;;) {
      call->Read(&response, nullptr);
      if (!wait()) break;
      ++reply.messages;
    }
  }
  call->Finish(&reply.status, nullptr);
  wait();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return reply;
}

std::string WireWith(const google::protobuf::Message& message,
                     const std::string& placeholder, const std::string& bytes) {
  EXPECT_EQ(placeholder.size(), bytes.size());
  std::string wire = message.SerializeAsString();
  const size_t at = wire.find(placeholder);
  EXPECT_NE(at, std::string::npos);
  EXPECT_EQ(wire.find(placeholder, at + 1), std::string::npos);
  if (at != std::string::npos) wire.replace(at, bytes.size(), bytes);
  return wire;
}

}  // namespace lookahead::testing
