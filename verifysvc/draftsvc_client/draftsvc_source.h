// DraftsvcSource: the DraftSource backed by draftsvc's token tries (the
// session's prompt trie and its namespace's global output trie), through
// DraftSessions (sessions kept alive across draftsvc outages and restarts).
//
// Emitted tokens are buffered per sequence and reported with the next
// Propose that asks draftsvc for drafts; a sequence that wants none still
// reports once kMaxUnreportedTokens have piled up (keeping the global trie
// fresh and noticing a restarted draftsvc), and Close reports the rest, so
// every answer reaches the global trie.
//
// Thread-safety: Open, Observe, Propose and Close belong to the scheduler
// thread; Stats is thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_DRAFTSVC_SOURCE_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_DRAFTSVC_SOURCE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "verifysvc/drafts/draft_source.h"
#include "verifysvc/draftsvc_client/draftsvc_sessions.h"

namespace lookahead::verifysvc {

class DraftsvcSource : public DraftSource {
 public:
  // Accepted tokens a sequence may hold back from draftsvc while it wants
  // no drafts: at most one report-only round trip per this many steps.
  static constexpr int kMaxUnreportedTokens = 64;

  // A source over a channel to draftsvc at `target` (e.g.
  // "127.0.0.1:50061"); does not wait for it: an absent draftsvc only means
  // no drafts. `vocab_size` bounds the token ids of its trees.
  static std::unique_ptr<DraftsvcSource> Connect(
      const std::string& target, int32_t vocab_size,
      const DraftClientOptions& client_options,
      DraftSessionsOptions session_options);

  std::string name() const override { return "trie"; }
  int64_t Open(const DraftPolicy& policy,
               absl::Span<const int32_t> prompt) override;
  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override;
  std::vector<engine::DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                         bool* called) override;
  void Close(int64_t handle) override;
  DraftCost cost() const override { return {}; }  // microseconds
  DraftSourceStats Stats() const override;

 private:
  DraftsvcSource(std::unique_ptr<DraftClient> client,
                 std::unique_ptr<DraftSessions> sessions)
      : client_(std::move(client)), sessions_(std::move(sessions)) {}

  const std::unique_ptr<DraftClient> client_;
  const std::unique_ptr<DraftSessions> sessions_;  // uses client_
  // Per open handle: tokens emitted since the last report.
  std::map<int64_t, std::vector<int32_t>> fresh_;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_DRAFTSVC_SOURCE_H_
