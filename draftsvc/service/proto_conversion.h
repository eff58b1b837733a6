// Conversions between lookahead.v1's DraftService messages and draftsvc's
// neutral types (CandidateSource, MixedDraft, StepInput, DraftMode,
// engine::SamplingParams): the only place below the handlers that reads or
// writes a generated message. Pure functions; thread-safe.
#ifndef LOOKAHEAD_DRAFTSVC_SERVICE_PROTO_CONVERSION_H_
#define LOOKAHEAD_DRAFTSVC_SERVICE_PROTO_CONVERSION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "draftsvc/index/draft_index.h"
#include "draftsvc/mix/draft_tree_builder.h"
#include "engine/model/sampler.h"
#include "proto/draft.pb.h"

namespace lookahead::draftsvc {

// The wire value of `source`.
v1::DraftSource ToProto(CandidateSource source);

// `tree` as the wire DraftTree (appended to `out`, which should be empty).
void ToProto(const MixedDraft& tree, v1::DraftTree* out);

// SessionStep.withheld_sources as a CandidateSourceBit set; values this server
// does not know are ignored (withholding them changes nothing).
uint32_t WithheldSources(const google::protobuf::RepeatedField<int>& sources);

// The entry's retrieval sources as a CandidateSourceBit set (empty:
// `defaults`): INVALID_ARGUMENT for values this server does not know,
// FAILED_PRECONDITION naming the flag for sources it does not run.
absl::StatusOr<uint32_t> SourcesFromProto(
    const google::protobuf::RepeatedField<int>& sources, uint32_t defaults,
    bool ngram_enabled, bool assistant_enabled);

// The entry's accepted tokens (and their offset, if set), predictions and
// n-grams as the index's neutral input (spans into `step`, which must
// outlive it).
StepInput ToStepInput(const v1::SessionStep& step);

// Maps the wire mode; INVALID_ARGUMENT for values this server does not know.
absl::StatusOr<DraftMode> FromProto(int mode);

// OpenSessionRequest.sampling as the engine's; INVALID_ARGUMENT naming the
// field. Unset fields mean greedy, no top-k, no nucleus cut (top_p 0 is
// proto3's unset, read as 1).
absl::StatusOr<engine::SamplingParams> SamplingFromProto(
    const v1::DraftSampling& sampling);

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SERVICE_PROTO_CONVERSION_H_
