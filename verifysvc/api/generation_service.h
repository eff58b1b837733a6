// GenerationService: lookahead.v1.GenerationService over a Scheduler, the
// gRPC front end. Maps each request to a RawRequest, builds and validates it
// with the shared BuildRequest on the RPC's thread (microseconds to a
// millisecond), hands it to the scheduler, and streams what the scheduler
// emits as GenerateResponses; never blocks a gRPC reaction on the model.
// The only layer of verifysvc that includes generated proto headers.
// Thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_API_GENERATION_SERVICE_H_
#define LOOKAHEAD_VERIFYSVC_API_GENERATION_SERVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "engine/text/tokenizer.h"
#include "proto/generation.grpc.pb.h"
#include "verifysvc/serving/request_builder.h"
#include "verifysvc/serving/scheduler.h"

namespace lookahead::verifysvc {

// The client's request as the neutral RawRequest that BuildRequest checks.
RawRequest RawRequestFromProto(const lookahead::v1::GenerateRequest& request);

class GenerationServiceImpl final
    : public lookahead::v1::GenerationService::CallbackService {
 public:
  // `tokenizer` and `scheduler` are not owned and must outlive the service.
  // `info` is what ModelInfo returns.
  GenerationServiceImpl(const engine::Tokenizer* tokenizer,
                        Scheduler* scheduler, RequestLimits limits,
                        lookahead::v1::ModelInfoResponse info)
      : tokenizer_(tokenizer),
        scheduler_(scheduler),
        limits_(limits),
        info_(std::move(info)) {}

  grpc::ServerWriteReactor<lookahead::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context,
      const lookahead::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(
      grpc::CallbackServerContext* context,
      const lookahead::v1::TokenizeRequest* request,
      lookahead::v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(
      grpc::CallbackServerContext* context,
      const lookahead::v1::DetokenizeRequest* request,
      lookahead::v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfo(
      grpc::CallbackServerContext* context,
      const lookahead::v1::ModelInfoRequest* request,
      lookahead::v1::ModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* Stats(
      grpc::CallbackServerContext* context,
      const lookahead::v1::GenerationStatsRequest* request,
      lookahead::v1::GenerationStatsResponse* response) override;

 private:
  const engine::Tokenizer* const tokenizer_;
  Scheduler* const scheduler_;
  const RequestLimits limits_;
  const lookahead::v1::ModelInfoResponse info_;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_API_GENERATION_SERVICE_H_
