// DraftClient: verifysvc's side of lookahead.v1.DraftService. Opens and
// closes draft sessions and, once per decoding step, reports the accepted
// tokens of a batch of sessions and fetches their draft trees in ONE RPC.
//
// draftsvc is optional at run time: every call has a deadline, and callers
// treat any error as "no drafts this step". A tree that breaks the DraftTree
// invariants (or holds ids outside the vocab) is dropped, never verified.
//
// Thread-safety: all methods are safe to call concurrently.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFTSVC_CLIENT_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFTSVC_CLIENT_H_

#include <grpcpp/security/credentials.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/model/draft_tree.h"
#include "proto/draft.grpc.pb.h"

namespace lookahead::verifysvc {

struct DraftClientOptions {
  // Deadline of each Step RPC. A step whose drafts arrive later runs without
  // drafts, so this bounds what a slow draftsvc can cost a decoding step.
  // Default 20 ms: retrieval takes microseconds; the rest is loopback RPC.
  absl::Duration step_deadline = absl::Milliseconds(20);
  // Deadline of OpenSession/CloseSession (prompt insertion is O(prompt)).
  absl::Duration session_deadline = absl::Milliseconds(500);
  // The channel's credentials (TLS, a client certificate for mutual TLS:
  // common/tls_files.h); null = plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// One session's share of a batched Step.
struct DraftRequest {
  std::string session_id;
  std::vector<int32_t> accepted_tokens;  // Accepted since the last Step.
  // Tokens of the session draftsvc applied before accepted_tokens[0]
  // (SessionStep.accepted_offset: a retried report is applied once); < 0:
  // unset.
  int64_t accepted_offset = -1;
  int32_t decoding_length = 0;           // Node budget; 0 = no tree.
  int32_t branch_length = 0;             // 0 = the session's.
  lookahead::v1::DraftMode mode = lookahead::v1::DRAFT_MODE_TRIE_HIERARCHICAL;
  // Sources the draft may use; empty = draftsvc's --draft_sources.
  std::vector<lookahead::v1::DraftSource> sources;
  // Sources this step's draft must not use (SessionStep.withheld_sources).
  std::vector<lookahead::v1::DraftSource> withheld_sources;
  // The verifier's predictions at the trees verified since the last Step
  // (root_after relative to accepted_tokens), oldest first.
  std::vector<lookahead::v1::PredictionTree> predictions;
  // N-grams harvested since the last Step (each 2+ ids).
  std::vector<std::vector<int32_t>> ngrams;
};

class DraftClient {
 public:
  // Creates a channel to `target` (e.g. "127.0.0.1:50061"); does not wait
  // for the server: an absent draftsvc shows up as per-call UNAVAILABLE.
  static std::unique_ptr<DraftClient> Create(const std::string& target,
                                             DraftClientOptions options);

  // `sampling`: the request's (default: greedy), for model-based drafts.
  // `sources`: what the session's drafts may use (empty: draftsvc's
  // defaults); FAILED_PRECONDITION if draftsvc does not run one of them.
  absl::Status OpenSession(
      absl::string_view session_id, absl::string_view name_space,
      int32_t vocab_size, absl::Span<const int32_t> prompt_tokens,
      int32_t branch_length, const lookahead::v1::DraftSampling& sampling = {},
      absl::Span<const lookahead::v1::DraftSource> sources = {},
      int32_t resumed_output_tokens = 0);

  // Returns one entry per request, in order: the session's draft tree, or
  // its error (NOT_FOUND: reopen the session). The outer status is the RPC's.
  // `vocab_size` bounds the token ids a returned tree may hold.
  absl::StatusOr<std::vector<absl::StatusOr<engine::DraftTree>>> Step(
      absl::Span<const DraftRequest> requests, int32_t vocab_size);

  absl::Status CloseSession(absl::string_view session_id);

  // draftsvc's assistant model's one-token pass in seconds, as its last
  // OpenSession answer measured it; 0 before one, or when it runs none.
  double assistant_seconds_per_token() const {
    return assistant_seconds_per_token_.load(std::memory_order_relaxed);
  }

 private:
  DraftClient(std::unique_ptr<lookahead::v1::DraftService::Stub> stub,
              DraftClientOptions options)
      : stub_(std::move(stub)), options_(options) {}

  const std::unique_ptr<lookahead::v1::DraftService::Stub> stub_;
  const DraftClientOptions options_;
  std::atomic<double> assistant_seconds_per_token_{0};
};

// Converts a wire tree into the verifier's DraftTree, with each node's
// primary source and source set mapped to engine tags (PROMPT and OUTPUT:
// kTrie; NGRAM: kNgram; ASSISTANT: kAssistant; others kUnknown; a tree
// without sources gets none). INVALID_ARGUMENT (naming the node) if the
// lists differ in length (sources and source_sets may be empty), a parent is
// not in [-1, i), a depth is inconsistent or a token is outside
// [0, vocab_size).
absl::StatusOr<engine::DraftTree> DraftTreeFromProto(
    const lookahead::v1::DraftTree& tree, int32_t vocab_size);

// The engine tag of a wire source (see DraftTreeFromProto).
engine::DraftSourceTag SourceTagFromProto(lookahead::v1::DraftSource source);
// The wire sources a set of engine tags stands for: kTrie -> PROMPT and
// OUTPUT, kNgram -> NGRAM, kAssistant -> ASSISTANT (kUnknown: none).
std::vector<lookahead::v1::DraftSource> SourcesToProto(
    engine::DraftSourceSet sources);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTS_DRAFTSVC_CLIENT_H_
