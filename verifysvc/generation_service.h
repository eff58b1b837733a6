// GenerationService: lookahead.v1.GenerationService over a Scheduler.
// Validates and tokenizes each request on the RPC's thread (microseconds to
// a millisecond), hands it to the scheduler, and streams what the scheduler
// emits; never blocks a gRPC reaction on the model. Thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_GENERATION_SERVICE_H_
#define LOOKAHEAD_VERIFYSVC_GENERATION_SERVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/generation.grpc.pb.h"
#include "verifysvc/scheduler.h"
#include "verifysvc/tokenizer.h"

namespace lookahead::verifysvc {

struct RequestLimits {
  // Prompt + output may not exceed this; also the KV cache's bound.
  int max_context_tokens = 2048;
  // Longest prompt accepted; <= max_context_tokens - 1.
  int max_prompt_tokens = 2047;
  // max_new_tokens when a request leaves it 0 (cut to the context left).
  int default_max_new_tokens = 256;
  // Draft tokens per step when a request leaves decoding_length 0, and the
  // most a request may ask for.
  int default_decoding_length = 32;
  int max_decoding_length = 64;
  // Draft branch depth when a request leaves branch_length 0; most allowed.
  int default_branch_length = 8;
  int max_branch_length = 32;
  int max_stop_strings = 16;
  int32_t vocab_size = 0;
};

// Turns a request into a SequenceSpec: tokenizes text (BOS as the model
// wants) or chat (the model's template, generation prompt appended), and
// applies defaults. INVALID_ARGUMENT naming the field, the limit and the
// flag that sets it.
absl::StatusOr<SequenceSpec> BuildSequenceSpec(
    const lookahead::v1::GenerateRequest& request, const Tokenizer& tokenizer,
    const RequestLimits& limits);

class GenerationServiceImpl final
    : public lookahead::v1::GenerationService::CallbackService {
 public:
  // `tokenizer` and `scheduler` are not owned and must outlive the service.
  // `info` is what ModelInfo returns.
  GenerationServiceImpl(const Tokenizer* tokenizer, Scheduler* scheduler,
                        RequestLimits limits,
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
  const Tokenizer* const tokenizer_;
  Scheduler* const scheduler_;
  const RequestLimits limits_;
  const lookahead::v1::ModelInfoResponse info_;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_GENERATION_SERVICE_H_
