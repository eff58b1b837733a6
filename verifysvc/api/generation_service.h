// GenerationService: lookahead.v1.GenerationService over a Scheduler, the
// gRPC front end. Maps each request to a RawRequest, builds and validates it
// with the shared BuildRequest on the RPC's thread (microseconds to a
// millisecond), hands it to the scheduler, and streams what the scheduler
// emits as GenerateResponses; never blocks a gRPC reaction on the model.
// Generate and Tokenize, whose requests carry strings, are registered raw:
// their wire bytes are checked for invalid UTF-8 before parsing
// (common/wire_request.h), so a bad byte is INVALID_ARGUMENT naming the
// field.
// With ApiKeys, every RPC needs "authorization: Bearer <key>" metadata
// (UNAUTHENTICATED, RESOURCE_EXHAUSTED over the key's rate with a
// "retry-after" trailer in seconds), and Generate's namespace is the key's
// (PERMISSION_DENIED naming both when it names another).
// The only layer of verifysvc that includes generated proto headers.
// Thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_API_GENERATION_SERVICE_H_
#define LOOKAHEAD_VERIFYSVC_API_GENERATION_SERVICE_H_

#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/wire_request.h"
#include "engine/text/tokenizer.h"
#include "proto/generation.grpc.pb.h"
#include "verifysvc/api/api_keys.h"
#include "verifysvc/serving/request_builder.h"
#include "verifysvc/serving/scheduler.h"

namespace lookahead::verifysvc {

class StreamWriter;  // generation_service.cc

// The client's request as the neutral RawRequest that BuildRequest checks.
RawRequest RawRequestFromProto(const lookahead::v1::GenerateRequest& request);

// The callback service with Generate and Tokenize taking wire bytes.
using GenerationServiceBase =
    lookahead::v1::GenerationService::WithRawCallbackMethod_Generate<
        lookahead::v1::GenerationService::WithRawCallbackMethod_Tokenize<
            lookahead::v1::GenerationService::WithCallbackMethod_Detokenize<
                lookahead::v1::GenerationService::WithCallbackMethod_ModelInfo<
                    lookahead::v1::GenerationService::WithCallbackMethod_Stats<
                        lookahead::v1::GenerationService::Service>>>>>;

class GenerationServiceImpl final : public GenerationServiceBase {
 public:
  // `tokenizer` and `scheduler` are not owned and must outlive the service.
  // `info` is what ModelInfo returns. The byte limits come from `limits`
  // and the tokenizer's vocabulary (FitLimitsToTokenizer). `api_keys`: the
  // keys every call must present; null = none (not owned; outlives the
  // service).
  GenerationServiceImpl(const engine::Tokenizer* tokenizer,
                        Scheduler* scheduler, RequestLimits limits,
                        lookahead::v1::ModelInfoResponse info,
                        ApiKeys* api_keys = nullptr);
  // After the server that serves it has shut down (its calls are done).
  ~GenerationServiceImpl() override;

  // A GenerateRequest in, GenerateResponses out, as wire bytes.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  // A TokenizeRequest in, a TokenizeResponse out, as wire bytes.
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
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
  ApiKeys* const api_keys_;
  // Starts Generate's stream writes on a thread of its own.
  const std::unique_ptr<StreamWriter> writer_;

  // The grant of the call's key; nullopt when no keys are configured.
  absl::StatusOr<std::optional<KeyGrant>> Authorize(
      grpc::CallbackServerContext* context);
  // Requests whose bytes did not parse (invalid UTF-8): one line a minute.
  RateLimitedLog wire_rejections_{"verifysvc", absl::Minutes(1)};
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_API_GENERATION_SERVICE_H_
