#include "verifysvc/draftsvc_client/draftsvc_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace lookahead::verifysvc {
namespace v1 = ::lookahead::v1;
namespace {

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace

std::unique_ptr<DraftClient> DraftClient::Create(const std::string& target,
                                                 DraftClientOptions options) {
  grpc::ChannelArguments args;
  // Reconnect quickly after a draftsvc restart (gRPC backs off up to this).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  auto channel = grpc::CreateCustomChannel(
      target,
      options.credentials != nullptr ? options.credentials
                                     : grpc::InsecureChannelCredentials(),
      args);
  return std::unique_ptr<DraftClient>(
      new DraftClient(lookahead::v1::DraftService::NewStub(channel), options));
}

absl::Status DraftClient::OpenSession(
    absl::string_view session_id, absl::string_view name_space,
    int32_t vocab_size, absl::Span<const int32_t> prompt_tokens,
    int32_t branch_length, const v1::DraftSampling& sampling,
    absl::Span<const v1::DraftSource> sources,
    int32_t resumed_output_tokens) {
  lookahead::v1::OpenSessionRequest request;
  request.set_session_id(std::string(session_id));
  request.set_namespace_(std::string(name_space));
  request.set_vocab_size(vocab_size);
  request.mutable_prompt_tokens()->Add(prompt_tokens.begin(),
                                       prompt_tokens.end());
  request.set_branch_length(branch_length);
  if (sampling.ByteSizeLong() > 0) *request.mutable_sampling() = sampling;
  for (v1::DraftSource source : sources) request.add_sources(source);
  request.set_resumed_output_tokens(resumed_output_tokens);
  lookahead::v1::OpenSessionResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, options_.session_deadline);
  grpc::Status status = stub_->OpenSession(&context, request, &response);
  if (status.ok()) {
    assistant_seconds_per_token_.store(
        std::max(0.0, response.assistant_seconds_per_token()),
        std::memory_order_relaxed);
  }
  return FromGrpcStatus(status);
}

absl::StatusOr<std::vector<absl::StatusOr<engine::DraftTree>>>
DraftClient::Step(absl::Span<const DraftRequest> requests, int32_t vocab_size) {
  lookahead::v1::StepRequest request;
  for (const DraftRequest& r : requests) {
    lookahead::v1::SessionStep* step = request.add_steps();
    step->set_session_id(r.session_id);
    step->mutable_accepted_tokens()->Add(r.accepted_tokens.begin(),
                                         r.accepted_tokens.end());
    if (r.accepted_offset >= 0) step->set_accepted_offset(r.accepted_offset);
    step->set_decoding_length(r.decoding_length);
    step->set_branch_length(r.branch_length);
    step->set_mode(r.mode);
    for (v1::DraftSource source : r.sources) step->add_sources(source);
    for (v1::DraftSource source : r.withheld_sources) {
      step->add_withheld_sources(source);
    }
    for (const v1::PredictionTree& p : r.predictions) {
      *step->add_predictions() = p;
    }
    for (const std::vector<int32_t>& ngram : r.ngrams) {
      step->add_ngrams()->mutable_tokens()->Add(ngram.begin(), ngram.end());
    }
  }
  lookahead::v1::StepResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, options_.step_deadline);
  grpc::Status status = stub_->Step(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  if (response.drafts_size() != static_cast<int>(requests.size())) {
    return absl::InternalError(
        absl::StrCat("draftsvc answered ", response.drafts_size(),
                     " drafts for ", requests.size(), " sessions"));
  }
  std::vector<absl::StatusOr<engine::DraftTree>> trees;
  trees.reserve(requests.size());
  for (const lookahead::v1::SessionDraft& draft : response.drafts()) {
    if (draft.code() != 0) {
      trees.push_back(absl::Status(static_cast<absl::StatusCode>(draft.code()),
                                   draft.message()));
    } else {
      trees.push_back(DraftTreeFromProto(draft.tree(), vocab_size));
      if (trees.back().ok()) {
        trees.back()->source_seconds = draft.assistant_seconds();
      }
    }
  }
  return trees;
}

absl::Status DraftClient::CloseSession(absl::string_view session_id) {
  lookahead::v1::CloseSessionRequest request;
  request.set_session_id(std::string(session_id));
  lookahead::v1::CloseSessionResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, options_.session_deadline);
  return FromGrpcStatus(stub_->CloseSession(&context, request, &response));
}

absl::StatusOr<engine::DraftTree> DraftTreeFromProto(
    const lookahead::v1::DraftTree& tree, int32_t vocab_size) {
  const int n = tree.tokens_size();
  if (tree.parents_size() != n || tree.depths_size() != n ||
      (tree.sources_size() != 0 && tree.sources_size() != n) ||
      (tree.source_sets_size() != 0 && tree.source_sets_size() != n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft tree lists differ in length: ", n, " tokens, ",
                     tree.parents_size(), " parents, ", tree.depths_size(),
                     " depths, ", tree.sources_size(), " sources, ",
                     tree.source_sets_size(), " source sets"));
  }
  engine::DraftTree out;
  out.tokens.reserve(n);
  out.parents.reserve(n);
  for (int i = 0; i < tree.sources_size(); ++i) {
    out.sources.push_back(SourceTagFromProto(tree.sources(i)));
  }
  for (int i = 0; i < tree.source_sets_size(); ++i) {
    engine::DraftSourceSet set = 0;
    for (int s = 0; s < 32; ++s) {
      if ((tree.source_sets(i) >> s) & 1) {
        set |= engine::SourceBit(
            SourceTagFromProto(static_cast<v1::DraftSource>(s)));
      }
    }
    out.source_sets.push_back(set);
  }
  // Scores are optional estimates (best first); a list of another length
  // is ignored rather than trusted.
  if (tree.scores_size() == n) {
    out.scores.assign(tree.scores().begin(), tree.scores().end());
  }
  for (int i = 0; i < n; ++i) {
    const int32_t token = tree.tokens(i);
    const int32_t parent = tree.parents(i);
    if (token < 0 || token >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft node ", i, " has token ", token, " outside [0, ",
                       vocab_size, ")"));
    }
    if (parent < -1 || parent >= i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft node ", i, " has parent ", parent, " outside [-1, ", i, ")"));
    }
    const int32_t expected_depth = parent < 0 ? 1 : tree.depths(parent) + 1;
    if (tree.depths(i) != expected_depth) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft node ", i, " has depth ", tree.depths(i),
                       ", its parent implies ", expected_depth));
    }
    out.tokens.push_back(token);
    out.parents.push_back(parent);
  }
  return out;
}

engine::DraftSourceTag SourceTagFromProto(v1::DraftSource source) {
  switch (source) {
    case v1::DRAFT_SOURCE_PROMPT:
    case v1::DRAFT_SOURCE_OUTPUT:
      return engine::DraftSourceTag::kTrie;
    case v1::DRAFT_SOURCE_NGRAM:
      return engine::DraftSourceTag::kNgram;
    case v1::DRAFT_SOURCE_ASSISTANT:
      return engine::DraftSourceTag::kAssistant;
    default:
      return engine::DraftSourceTag::kUnknown;
  }
}

std::vector<v1::DraftSource> SourcesToProto(engine::DraftSourceSet sources) {
  std::vector<v1::DraftSource> out;
  if (sources & engine::SourceBit(engine::DraftSourceTag::kTrie)) {
    out.push_back(v1::DRAFT_SOURCE_PROMPT);
    out.push_back(v1::DRAFT_SOURCE_OUTPUT);
  }
  if (sources & engine::SourceBit(engine::DraftSourceTag::kNgram)) {
    out.push_back(v1::DRAFT_SOURCE_NGRAM);
  }
  if (sources & engine::SourceBit(engine::DraftSourceTag::kAssistant)) {
    out.push_back(v1::DRAFT_SOURCE_ASSISTANT);
  }
  return out;
}

}  // namespace lookahead::verifysvc
