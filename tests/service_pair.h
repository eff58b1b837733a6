// The real service pair for end-to-end tests: draftsvc (one process per
// shard, PairOptions::draftsvc_shards) and a verifysvc child process (more
// with StartReplica) on loopback ports, gRPC stubs to all, and a Generate
// helper that drains a response stream into tokens, text and usage. Every
// verifysvc gets --draftsvc listing every shard, --http_port=0 and a port
// file (http_port()). The binaries' paths come from env DRAFTSVC_BINARY and
// VERIFYSVC_BINARY (set by BUILD); logs and the RocksDB directories go below
// $TEST_TMPDIR/<name> (shard 0: db/, draftsvc.*; shard i: db<i>/,
// draftsvc<i>.*).
//
// Thread-safety: Generate, Reference, Stats, DraftStats and FlushDrafts may
// be called from many threads at once; Start/Kill/Restart need the caller to
// be the only user of the pair at that moment.
#ifndef LOOKAHEAD_TESTS_SERVICE_PAIR_H_
#define LOOKAHEAD_TESTS_SERVICE_PAIR_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "proto/draft.grpc.pb.h"
#include "proto/generation.grpc.pb.h"
#include "tests/server_process.h"

namespace lookahead::testing {

// verifysvc flags for a test that counts what draftsvc taught a verifier,
// not how loaded the machine is (other tests share CI's two cores): each
// drafted step waits for its own answer, up to 500 ms (an asynchronous one
// lands a step late or not at all under load), and a slow round trip does
// not stop a sequence asking.
inline std::vector<std::string> WaitForDraftsFlags() {
  return {"--draft_sync", "--draft_deadline_ms=500",
          "--charge_draft_calls=false"};
}

struct PairOptions {
  // Subdirectory of $TEST_TMPDIR for this pair's db, port files and logs;
  // a fresh name gives a fresh (empty) draftsvc database.
  std::string name = "pair";
  // Extra flags, appended after the defaults (--host, --port, --db_path /
  // --draftsvc).
  std::vector<std::string> draftsvc_flags;
  std::vector<std::string> verifysvc_flags;
  // Without draftsvc, verifysvc gets --draftsvc= (no drafts at all).
  bool with_draftsvc = true;
  // draftsvc processes, each with its own database; verifysvc's --draftsvc
  // lists them all (namespaces are spread over them by rendezvous hashing).
  int draftsvc_shards = 1;
  // Model load takes seconds (and more on a busy machine).
  int start_timeout_ms = 120000;
};

// What one Generate stream delivered.
struct Generation {
  grpc::Status status;
  std::vector<int32_t> tokens;  // every message's token_ids, in order
  std::string text;             // every message's text, in order
  lookahead::v1::Usage usage;   // from the last message
  bool has_usage = false;
  // Every message's logprobs, in order (empty unless the request set
  // logprobs).
  std::vector<lookahead::v1::TokenLogprobs> logprobs;
  int messages = 0;
};

// Lossless: EXPECTs `fast`'s tokens (drafts on) to equal `plain`'s (drafts
// off), printing both on a difference.
void ExpectSameTokens(const Generation& fast, const Generation& plain);

// Hooks into one stream, for cancellation and deadline tests.
struct StreamHooks {
  // > 0: the call's deadline, from now.
  int deadline_ms = 0;
  // Called after each message (the first one is number 1); may call
  // context->TryCancel().
  std::function<void(grpc::ClientContext* context, int message_number)>
      on_message;
};

// Request builders. Greedy, drafts at the server default, no stop strings.
lookahead::v1::GenerateRequest ChatRequest(const std::string& user,
                                           int max_new_tokens);
lookahead::v1::GenerateRequest TokensRequest(const std::vector<int32_t>& ids,
                                             int max_new_tokens);
// temperature 0.8, top_p 0.95 with `seed`.
void SetSeededSampling(lookahead::v1::GenerateRequest* request, uint64_t seed);
void SetDraftMode(lookahead::v1::GenerateRequest* request,
                  lookahead::v1::DraftMode mode);

// Tokens as "[a b c]" for failure messages.
std::string TokensToString(const std::vector<int32_t>& tokens);

class ServicePair {
 public:
  // Starts draftsvc (unless !with_draftsvc), then verifysvc pointed at it,
  // and waits until both serve.
  static absl::StatusOr<std::unique_ptr<ServicePair>> Start(
      PairOptions options);
  ~ServicePair();

  // One streaming Generate call on its own ClientContext.
  Generation Generate(const lookahead::v1::GenerateRequest& request,
                      const StreamHooks& hooks = {});
  // The same request with draft.mode = DRAFT_MODE_OFF: the plain-decoding
  // baseline every drafted output must equal.
  Generation Reference(lookahead::v1::GenerateRequest request);

  // Starts another verifysvc replica on the same draftsvc shards (the
  // pair's verifysvc flags, then `extra_flags`); returns its number (1, 2,
  // ...; the pair's own verifysvc is replica 0).
  absl::StatusOr<int> StartReplica(std::vector<std::string> extra_flags = {});
  // Generate on replica `replica` (0: the pair's verifysvc).
  Generation GenerateOn(int replica,
                        const lookahead::v1::GenerateRequest& request,
                        const StreamHooks& hooks = {});

  absl::StatusOr<lookahead::v1::GenerationStatsResponse> Stats();
  // Polls Stats every 20 ms until `done` holds (true) or `timeout_ms` passes
  // (false); *last gets the last snapshot read.
  bool WaitForStats(
      const std::function<bool(const lookahead::v1::GenerationStatsResponse&)>&
          done,
      int timeout_ms, lookahead::v1::GenerationStatsResponse* last);
  // draftsvc's Stats for `ns` (empty: every namespace) from shard `shard`.
  absl::StatusOr<lookahead::v1::StatsResponse> DraftStats(
      const std::string& ns = "", int shard = 0);
  // Output-trie nodes of namespace `ns` summed over every shard (0 if no
  // shard knows it; a namespace lives on one shard).
  absl::StatusOr<int64_t> OutputNodes(const std::string& ns);
  // Polls OutputNodes(ns) every 20 ms until it is positive and returns it;
  // NotFound after `timeout_ms`. The verifier reports a finished
  // sequence's last tokens on a worker thread, after the client has them.
  absl::StatusOr<int64_t> WaitForOutputNodes(const std::string& ns,
                                             int timeout_ms = 10000);
  // Draft tokens draftsvc shard 0 has proposed, over every namespace and
  // source (0 if it does not answer): positive once a Step was answered.
  int64_t ProposedDraftTokens();
  // Flushes every shard.
  absl::Status FlushDrafts();

  // SIGKILLs draftsvc shard `shard` (verifysvc keeps running).
  void KillDraftsvc(int shard = 0);
  // Sends `signal` to draftsvc shard `shard` without waiting (SIGSTOP,
  // SIGCONT).
  void SignalDraftsvc(int signal, int shard = 0);
  // Starts draftsvc shard `shard` again on its database and port.
  absl::Status RestartDraftsvc(int shard = 0);

  lookahead::v1::GenerationService::Stub& generation() { return *generation_; }
  int draftsvc_shards() const { return static_cast<int>(shards_.size()); }
  int draftsvc_port(int shard = 0) const { return shards_[shard].port; }
  // "127.0.0.1:<port>": the shard's address in verifysvc's --draftsvc (what
  // the rendezvous hash sees).
  std::string draftsvc_address(int shard = 0) const;
  int verifysvc_port() const { return verifysvc_port_; }
  // Replica `replica`'s HTTP port (it runs with --http_port=0; replica 0
  // is the pair's verifysvc), or 0 if it has none.
  int http_port(int replica = 0) const;
  // The servers' Prometheus /metrics ports (HTTP on 127.0.0.1).
  int draftsvc_metrics_port(int shard = 0) const {
    return shards_[shard].metrics_port;
  }
  int verifysvc_metrics_port() const { return verifysvc_metrics_port_; }
  // Replica `replica`'s /metrics port (0: the pair's verifysvc).
  int metrics_port(int replica) const;
  // Both servers' output so far, and how they ended if they did, for
  // failure messages.
  std::string Logs();

 private:
  explicit ServicePair(PairOptions options);
  // Starts draftsvc shard `shard` on `port` (0: a free one).
  absl::Status StartDraftsvc(int shard, int port);
  absl::Status StartVerifysvc();
  // What SpawnVerifysvc bound.
  struct Ports {
    int grpc = 0;
    int http = 0;
    int metrics = 0;
  };
  // Spawns verifysvc number `replica` with `extra_flags`.
  absl::StatusOr<Ports> SpawnVerifysvc(
      int replica, const std::vector<std::string>& extra_flags,
      std::unique_ptr<ServerProcess>* process);
  // The stub of shard `shard`, or null.
  lookahead::v1::DraftService::Stub* drafts(int shard);

  struct DraftShard {
    int starts = 0;
    int port = 0;
    int metrics_port = 0;
    std::unique_ptr<ServerProcess> process;
    std::unique_ptr<lookahead::v1::DraftService::Stub> stub;
  };

  const PairOptions options_;
  const std::string dir_;
  std::vector<DraftShard> shards_;  // empty without draftsvc
  int verifysvc_port_ = 0;
  int verifysvc_metrics_port_ = 0;
  std::unique_ptr<ServerProcess> verifysvc_;
  std::unique_ptr<lookahead::v1::GenerationService::Stub> generation_;
  // Ports of replica 0, 1, 2, ... at that index.
  std::vector<Ports> ports_;
  // Replicas 1, 2, ... (StartReplica) at index replica - 1.
  std::vector<std::unique_ptr<ServerProcess>> replicas_;
  std::vector<std::unique_ptr<lookahead::v1::GenerationService::Stub>>
      replica_stubs_;
};

// Expects each entry of `needles` in `message` (case-insensitively); an
// entry "a|b" is satisfied by either alternative.
void ExpectMentions(const std::string& message,
                    const std::vector<std::string>& needles);

// Prints both servers' logs (ServicePair::Logs) when it goes out of scope
// if the running test has failed by then.
class PrintLogsOnFailure {
 public:
  explicit PrintLogsOnFailure(ServicePair& pair) : pair_(pair) {}
  ~PrintLogsOnFailure();
  PrintLogsOnFailure(const PrintLogsOnFailure&) = delete;
  PrintLogsOnFailure& operator=(const PrintLogsOnFailure&) = delete;

 private:
  ServicePair& pair_;
};

// A gtest fixture whose suite shares one ServicePair started from the
// derived fixture's `static PairOptions Options()` (CRTP), stopped after the
// suite. A failing test prints both servers' log tails.
template <typename Derived>
class SharedPairTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<ServicePair>> pair =
        ServicePair::Start(Derived::Options());
    ASSERT_TRUE(pair.ok()) << pair.status();
    pair_ = pair->release();
  }
  static void TearDownTestSuite() {
    delete pair_;
    pair_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(pair_, nullptr); }
  void TearDown() override {
    if (HasFailure()) std::printf("%s\n", pair_->Logs().c_str());
  }

  static inline ServicePair* pair_ = nullptr;
};

}  // namespace lookahead::testing

#endif  // LOOKAHEAD_TESTS_SERVICE_PAIR_H_
