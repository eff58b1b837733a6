// ShardedDraftSource: one DraftSource over several draftsvc shards (one
// DraftSource each, in production a DraftsvcSource per --draftsvc address)
// that sends every namespace to exactly one shard, chosen by rendezvous
// hashing: the shard whose (address, namespace) hash is highest. So a
// namespace's trie, n-gram pool and assistant state live on one draftsvc,
// and every verifier replica configured with the same addresses (in any
// order) picks the same shard for it without talking to the others.
// Removing a shard moves only the namespaces it held; adding one takes about
// 1/N of the namespaces from the others, and only those.
//
// The hash is fixed (FNV-1a 64 over "address\0namespace" with a 64-bit
// finalizer), never a per-process seeded one, so it is the same in every
// replica, build and restart. The empty namespace is the default one.
//
// Each shard keeps its own sessions, backoff and fallback: a down or slow
// shard proposes empty trees for its namespaces (plain decoding) while the
// others keep drafting. Propose asks the shards that have work in parallel,
// so a slow shard costs its namespaces' step at most its own deadline, and
// the others' answers are not delayed by more than that either.
//
// Thread-safety: as DraftSource: Open, Observe, ObserveVerified,
// ObserveNgrams, Failure, OpenAnswered, WaitOpened, WantsPredictions,
// Propose and Close belong to the scheduler thread; Stats and ShardStats are
// thread-safe (the shards' Stats are).
#ifndef LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_SHARDED_DRAFT_SOURCE_H_
#define LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_SHARDED_DRAFT_SOURCE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/metrics.h"
#include "verifysvc/drafts/draft_source.h"
#include "verifysvc/draftsvc_client/draftsvc_client.h"
#include "verifysvc/draftsvc_client/draftsvc_sessions.h"

namespace lookahead::verifysvc {

// Most shards one --draftsvc may list.
inline constexpr int kMaxDraftShards = 64;

// The --draftsvc value as shard addresses: comma-separated gRPC targets
// (host:port, or dns:///host:port of ONE pod), whitespace around each
// ignored; empty = no shards (no drafts). INVALID_ARGUMENT naming --draftsvc
// for an empty entry ("a,,b", a trailing comma), a repeated address, or more
// than kMaxDraftShards.
absl::StatusOr<std::vector<std::string>> ParseDraftsvcAddresses(
    absl::string_view flag);

// The stable 64-bit rendezvous score of `name_space` on the shard at
// `address` (the same in every process and build).
uint64_t RendezvousScore(absl::string_view address,
                         absl::string_view name_space);

// Index in `addresses` (non-empty) of the shard that owns `name_space`
// (empty = "default"): the highest RendezvousScore; ties go to the smaller
// address, so the answer does not depend on the list's order.
int RendezvousShard(absl::Span<const std::string> addresses,
                    absl::string_view name_space);

class ShardedDraftSource : public DraftSource {
 public:
  struct Shard {
    std::string address;  // what the routing hashes: the --draftsvc entry
    std::unique_ptr<DraftSource> source;
  };
  // One shard's health, for per-shard metrics.
  struct ShardHealth {
    std::string address;
    DraftSourceStats stats;
  };

  // INVALID_ARGUMENT if `shards` is empty or longer than kMaxDraftShards, a
  // source is null, or an address repeats.
  static absl::StatusOr<std::unique_ptr<ShardedDraftSource>> Create(
      std::vector<Shard> shards);

  // The index of the shard that drafts `name_space` (empty = "default").
  int ShardOf(absl::string_view name_space) const;
  int shard_count() const { return static_cast<int>(shards_.size()); }
  const std::string& address(int shard) const { return shards_[shard].address; }

  // The first shard's name ("trie" for draftsvc): every shard runs the same
  // kind of source.
  std::string name() const override;
  // Sources the verifier serves in its own process (bits of
  // engine::DraftSourceTag; --assistant_model: kAssistant): a request that
  // names them is not asked of draftsvc for them, one that names only them
  // opens no draftsvc session, and every step withholds them from draftsvc
  // (DraftAsk::withheld), so that draftsvc's defaults, which a request
  // naming no sources gets, never run them twice.
  void ServeInProcess(engine::DraftSourceSet sources) { in_process_ = sources; }

  int64_t Open(const DraftPolicy& policy,
               absl::Span<const int32_t> prompt) override;
  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override;
  bool WantsPredictions(int64_t handle) const override;
  void ObserveVerified(int64_t handle,
                       const VerifiedPredictions& predictions) override;
  void ObserveNgrams(int64_t handle,
                     absl::Span<const std::vector<int32_t>> ngrams) override;
  absl::Status Failure(int64_t handle) const override;
  bool OpenAnswered(int64_t handle) const override;
  void WaitOpened(int64_t handle, absl::Time deadline) const override;
  // Splits `asks` by shard, asks each shard with any (in parallel when more
  // than one has some) and returns the trees in the caller's order.
  std::vector<engine::DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                         bool* called) override;
  void Close(int64_t handle) override;
  DraftCost cost() const override;
  // Sums failures, reopened and open_sessions; available iff every shard
  // is (ShardStats tells which is not).
  DraftSourceStats Stats() const override;
  // Every shard's, in shard order.
  std::vector<double> TakeCallSeconds() override;
  std::vector<ShardHealth> ShardStats() const;

 private:
  explicit ShardedDraftSource(std::vector<Shard> shards);

  struct Route {
    int shard = 0;
    int64_t inner = 0;  // the shard's own handle
  };
  // The route of `handle`, or null for an unknown one.
  const Route* Find(int64_t handle) const;

  const std::vector<Shard> shards_;
  const std::vector<std::string> addresses_;  // shards_[i].address
  std::map<int64_t, Route> routes_;           // per open handle
  int64_t next_handle_ = 1;
  engine::DraftSourceSet in_process_ = 0;
};

// One DraftsvcSource per address (each with its own channel, sessions and
// backoff) behind a ShardedDraftSource; null for no addresses (no drafts).
// Connecting never waits: an absent shard only means no drafts for its
// namespaces. INVALID_ARGUMENT as ShardedDraftSource::Create.
absl::StatusOr<std::unique_ptr<ShardedDraftSource>> ConnectDraftsvcShards(
    const std::vector<std::string>& addresses, int32_t vocab_size,
    const DraftClientOptions& client_options,
    const DraftSessionsOptions& session_options);

// Registers `source`'s gauges in `registry`: lookahead_draft_sessions_open
// (all shards) and lookahead_draftsvc_shard_up{shard=<address>} (1 while
// the verifier's last call to it succeeded). `source` must outlive the
// registry's scrapes.
absl::Status AddDraftShardMetrics(metrics::Registry* registry,
                                  const ShardedDraftSource* source);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_DRAFTSVC_CLIENT_SHARDED_DRAFT_SOURCE_H_
