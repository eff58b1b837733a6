#include "draftsvc/service/proto_conversion.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lookahead::draftsvc {
namespace {

// The SourceBits a wire CandidateSource selects (PROMPT and OUTPUT: both
// tries); 0 for a value this server does not know.
uint32_t SourceBitsOf(int source) {
  switch (source) {
    case v1::DRAFT_SOURCE_PROMPT:
    case v1::DRAFT_SOURCE_OUTPUT:
      return CandidateSourceBit(CandidateSource::kPrompt) |
             CandidateSourceBit(CandidateSource::kOutput);
    case v1::DRAFT_SOURCE_NGRAM:
      return CandidateSourceBit(CandidateSource::kNgram);
    case v1::DRAFT_SOURCE_ASSISTANT:
      return CandidateSourceBit(CandidateSource::kAssistant);
    default:
      return 0;
  }
}

}  // namespace

v1::DraftSource ToProto(CandidateSource source) {
  switch (source) {
    case CandidateSource::kPrompt:
      return v1::DRAFT_SOURCE_PROMPT;
    case CandidateSource::kOutput:
      return v1::DRAFT_SOURCE_OUTPUT;
    case CandidateSource::kNgram:
      return v1::DRAFT_SOURCE_NGRAM;
    case CandidateSource::kAssistant:
      return v1::DRAFT_SOURCE_ASSISTANT;
  }
  return v1::DRAFT_SOURCE_UNSPECIFIED;
}

void ToProto(const MixedDraft& tree, v1::DraftTree* out) {
  const int n = static_cast<int>(tree.nodes.size());
  out->mutable_tokens()->Reserve(n);
  out->mutable_parents()->Reserve(n);
  out->mutable_depths()->Reserve(n);
  out->mutable_sources()->Reserve(n);
  out->mutable_scores()->Reserve(n);
  out->mutable_source_sets()->Reserve(n);
  for (const DraftNode& node : tree.nodes) {
    out->add_tokens(node.token);
    out->add_parents(node.parent);
    out->add_depths(node.depth);
    out->add_sources(ToProto(node.source));
    out->add_scores(node.score);
    const uint32_t set = node.source_set != 0 ? node.source_set
                                              : CandidateSourceBit(node.source);
    uint32_t wire = 0;
    for (int s = 0; s < kNumCandidateSources; ++s) {
      if ((set >> s & 1) != 0) {
        wire |= uint32_t{1} << ToProto(static_cast<CandidateSource>(s));
      }
    }
    out->add_source_sets(wire);
  }
}

// SessionStep.withheld_sources as a CandidateSourceBit set; values this server
// does not know are ignored (withholding them changes nothing).
uint32_t WithheldSources(const google::protobuf::RepeatedField<int>& sources) {
  uint32_t out = 0;
  for (int source : sources) out |= SourceBitsOf(source);
  return out;
}

// The entry's retrieval sources as a CandidateSourceBit set (empty:
// `defaults`): INVALID_ARGUMENT for values this server does not know,
// FAILED_PRECONDITION naming the flag for sources it does not run.
absl::StatusOr<uint32_t> SourcesFromProto(
    const google::protobuf::RepeatedField<int>& sources, uint32_t defaults,
    bool ngram_enabled, bool assistant_enabled) {
  if (sources.empty()) return defaults;
  uint32_t out = 0;
  for (int i = 0; i < sources.size(); ++i) {
    const uint32_t bits = SourceBitsOf(sources[i]);
    if (bits == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sources[", i, "] is ", sources[i],
                       ", not a CandidateSource this server knows (1..4)"));
    }
    if ((bits & CandidateSourceBit(CandidateSource::kNgram)) != 0 &&
        !ngram_enabled) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sources[", i,
          "] is DRAFT_SOURCE_NGRAM, which this server does not run "
          "(started with --ngram_pool=false)"));
    }
    if ((bits & CandidateSourceBit(CandidateSource::kAssistant)) != 0 &&
        !assistant_enabled) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sources[", i,
          "] is DRAFT_SOURCE_ASSISTANT, which this server does not run "
          "(start it with --assistant_model or --self_draft)"));
    }
    out |= bits;
  }
  return out;
}

// The entry's accepted tokens (and their offset, if set), predictions and
// n-grams as the index's neutral input (spans into `step`, which must
// outlive it).
StepInput ToStepInput(const v1::SessionStep& step) {
  StepInput input;
  input.accepted = step.accepted_tokens();
  if (step.has_accepted_offset()) {
    input.accepted_offset = step.accepted_offset();
  }
  input.predictions.reserve(step.predictions_size());
  for (const v1::PredictionTree& tree : step.predictions()) {
    PredictionInput p;
    p.root_after = tree.root_after();
    p.tokens = tree.tokens();
    p.parents = tree.parents();
    p.k = tree.k();
    p.top_tokens = tree.top_tokens();
    input.predictions.push_back(p);
  }
  input.ngrams.reserve(step.ngrams_size());
  for (const v1::Ngram& ngram : step.ngrams()) {
    input.ngrams.push_back(ngram.tokens());
  }
  return input;
}

// Maps the wire mode; INVALID_ARGUMENT for values this server does not know.
absl::StatusOr<DraftMode> FromProto(int mode) {
  switch (mode) {
    case v1::DRAFT_MODE_UNSPECIFIED:
    case v1::DRAFT_MODE_TRIE_HIERARCHICAL:
      return DraftMode::kHierarchical;
    case v1::DRAFT_MODE_TRIE_PARALLEL:
      return DraftMode::kParallel;
    case v1::DRAFT_MODE_OFF:
      return DraftMode::kOff;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown draft mode ", mode));
  }
}

// OpenSessionRequest.sampling as the engine's; INVALID_ARGUMENT naming the
// field. Unset fields mean greedy, no top-k, no nucleus cut (top_p 0 is
// proto3's unset, read as 1).
absl::StatusOr<engine::SamplingParams> SamplingFromProto(
    const v1::DraftSampling& sampling) {
  if (!std::isfinite(sampling.temperature()) || sampling.temperature() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.temperature ", sampling.temperature(),
                     " must be finite and >= 0 (0 = greedy)"));
  }
  if (sampling.top_k() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.top_k ", sampling.top_k(), " must be >= 0 (0 = off)"));
  }
  if (!(sampling.top_p() >= 0 && sampling.top_p() <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_p ", sampling.top_p(),
                     " must be in [0, 1] (0 = unset = 1 = off)"));
  }
  engine::SamplingParams params;
  params.temperature = sampling.temperature();
  params.top_k = sampling.top_k();
  params.top_p = sampling.top_p() == 0 ? 1.0f : sampling.top_p();
  params.seed = sampling.seed();
  RETURN_IF_ERROR(engine::ValidateSamplingParams(params));
  return params;
}

}  // namespace lookahead::draftsvc
