// Two draftsvc shards behind two verifysvc replicas, on loopback with the
// real model. Replica A lists the shards in one order, replica B in the
// other: rendezvous hashing does not care, and both must send a namespace
// to the same shard.
//
//  (a) Namespaces spread over both shards: each shard's draftsvc Stats lists
//      exactly the namespaces the rendezvous hash gives it, and each gets
//      some.
//  (b) B drafts from A's outputs in the same namespace: B's EDL on a prompt A
//      answered is clearly above B's EDL on it in a fresh namespace, and
//      both outputs equal plain decoding.
//  (c) kill -9 of one shard while streams run on both replicas in
//      namespaces of both shards: every stream finishes OK with the tokens
//      of plain decoding; afterwards the other shard's namespaces still
//      draft, the killed one's decode plain (and its shard_up gauge says 0);
//      after a restart on the same database and port they draft again.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/service_pair.h"
#include "verifysvc/draftsvc_client/sharded_draft_source.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

constexpr int kNewTokens = 48;
// The streams of the kill test are longer, so that they are still running
// when the shard dies.
constexpr int kStreamTokens = 160;
// The verifier's backoff is at most 2 s; it gets this long after a restart.
constexpr int kResumeWithinMs = 20000;

const char* const kPrompts[] = {
    "List the months of the year, one per line, each with its number of days.",
    "Write a Python function that checks whether a number is prime.",
};

v1::GenerateRequest Request(const char* prompt, const std::string& ns) {
  v1::GenerateRequest request = ChatRequest(prompt, kNewTokens);
  request.mutable_draft()->set_namespace_(ns);
  return request;
}

class ServiceShardsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    PairOptions options;
    options.name = "shards";
    options.draftsvc_shards = 2;
    // Four servers and other tests share two cores in CI, so (b) must
    // measure what replica A taught the shard, not the machine's load (CI
    // once saw EDL 1.42 from 10 of 10 accepted tokens with asynchronous
    // answers). A dead shard still fails its calls at once (connection
    // refused), so (c) is unchanged. The drafts measured are the shards'
    // alone (--local_drafts=false, --recycled_drafts=false): a sequence's
    // own text, or the model's predictions the replica recycled from its
    // earlier requests, would draft for a namespace whose shard is down.
    options.verifysvc_flags = WaitForDraftsFlags();
    options.verifysvc_flags.push_back("--local_drafts=false");
    options.verifysvc_flags.push_back("--recycled_drafts=false");
    absl::StatusOr<std::unique_ptr<ServicePair>> pair =
        ServicePair::Start(options);
    ASSERT_TRUE(pair.ok()) << pair.status();
    pair_ = pair->release();
    // Replica B lists the shards the other way round.
    absl::StatusOr<int> b = pair_->StartReplica(
        {absl::StrCat("--draftsvc=", pair_->draftsvc_address(1), ",",
                      pair_->draftsvc_address(0))});
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(*b, kB);
    // Each replica's HTTP front took a port of its own.
    for (int replica : {kA, kB}) {
      ASSERT_GT(pair_->http_port(replica), 0) << replica;
      httplib::Client client("127.0.0.1", pair_->http_port(replica));
      client.set_read_timeout(std::chrono::seconds(10));
      httplib::Result health = client.Get("/health");
      ASSERT_TRUE(health) << "replica " << replica << ": no HTTP /health";
      EXPECT_EQ(health->status, 200) << health->body;
    }
    EXPECT_NE(pair_->http_port(kA), pair_->http_port(kB));
  }
  static void TearDownTestSuite() {
    delete pair_;
    pair_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(pair_, nullptr); }
  void TearDown() override {
    if (HasFailure()) std::printf("%s\n", pair_->Logs().c_str());
  }

  static std::vector<std::string> Addresses() {
    return {pair_->draftsvc_address(0), pair_->draftsvc_address(1)};
  }
  // The shard verifysvc routes `ns` to (the test computes it itself).
  static int ShardOf(const std::string& ns) {
    return verifysvc::RendezvousShard(Addresses(), ns);
  }
  // The first name "<prefix><i>" that lives on `shard`.
  static std::string NamespaceOn(int shard, const std::string& prefix) {
    for (int i = 0;; ++i) {
      const std::string ns = absl::StrCat(prefix, i);
      if (ShardOf(ns) == shard) return ns;
    }
  }
  // The namespaces draftsvc shard `shard` knows.
  static std::set<std::string> KnownTo(int shard) {
    std::set<std::string> names;
    absl::StatusOr<v1::StatsResponse> stats = pair_->DraftStats("", shard);
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (!stats.ok()) return names;
    for (const v1::NamespaceStats& n : stats->namespaces()) {
      names.insert(n.namespace_());
    }
    return names;
  }
  // Generates on `replica` and checks the status and tokens against
  // `plain`.
  static Generation Checked(int replica, const v1::GenerateRequest& request,
                            const Generation& plain) {
    Generation got = pair_->GenerateOn(replica, request);
    EXPECT_TRUE(got.status.ok())
        << "replica " << replica << ": " << got.status.error_message();
    EXPECT_EQ(got.tokens, plain.tokens)
        << "replica " << replica << " " << request.ShortDebugString()
        << "\n  drafted: " << TokensToString(got.tokens)
        << "\n  plain:   " << TokensToString(plain.tokens);
    return got;
  }
  // verifysvc replica `replica`'s lookahead_draftsvc_shard_up for shard
  // `shard`: "1", "0", or "" if absent.
  static std::string ShardUp(int replica, int shard) {
    httplib::Client client("127.0.0.1", pair_->metrics_port(replica));
    client.set_read_timeout(std::chrono::seconds(10));
    httplib::Result result = client.Get("/metrics");
    if (!result || result->status != 200) return "";
    const std::string series =
        absl::StrCat("lookahead_draftsvc_shard_up{shard=\"",
                     pair_->draftsvc_address(shard), "\"} ");
    const size_t at = result->body.find(series);
    if (at == std::string::npos) return "";
    return result->body.substr(at + series.size(), 1);
  }

  static constexpr int kA = 0;
  static constexpr int kB = 1;
  static inline ServicePair* pair_ = nullptr;
};

TEST_F(ServiceShardsTest, NamespacesSpreadOverBothShards) {
  // Three names of each shard, from the first of "spread-0", "spread-1",
  // ...: the shards' ports are random, so six fixed names all land on one
  // shard in 1 run of 32. Sixteen names on one shard (1 in 32768) would
  // mean the hash does not spread.
  std::vector<std::string> names;
  int per_shard[2] = {0, 0};
  for (int i = 0; i < 16 && names.size() < 6; ++i) {
    const std::string ns = absl::StrCat("spread-", i);
    const int shard = ShardOf(ns);
    if (per_shard[shard] == 3) continue;
    ++per_shard[shard];
    names.push_back(ns);
  }
  ASSERT_EQ(names.size(), 6u)
      << "of 16 namespaces, fewer than 3 hash to one shard (3 wanted on "
         "each; got "
      << per_shard[0] << " and " << per_shard[1] << ")";
  for (size_t i = 0; i < names.size(); ++i) {
    const v1::GenerateRequest request = Request(kPrompts[i % 2], names[i]);
    const Generation got = pair_->GenerateOn(i % 2 == 0 ? kA : kB, request);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  }
  for (const std::string& ns : names) {
    ASSERT_TRUE(pair_->WaitForOutputNodes(ns).ok())
        << ns << " never reached a shard";
  }
  std::set<std::string> on[2] = {KnownTo(0), KnownTo(1)};
  for (const std::string& ns : names) {
    const int shard = ShardOf(ns);
    std::printf("namespace %s -> shard %d (%s)\n", ns.c_str(), shard,
                pair_->draftsvc_address(shard).c_str());
    EXPECT_TRUE(on[shard].count(ns)) << ns << " missing on shard " << shard;
    EXPECT_FALSE(on[1 - shard].count(ns))
        << ns << " also on shard " << 1 - shard;
  }
}

TEST_F(ServiceShardsTest, ReplicaBDraftsFromReplicaAsOutputs) {
  const char* const prompt =
      "Describe the water cycle in four short sentences.";
  const std::string shared = "learned";
  const std::string fresh = "untouched";
  const Generation plain = pair_->Reference(Request(prompt, shared));
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();

  Checked(kA, Request(prompt, shared), plain);
  ASSERT_TRUE(pair_->WaitForOutputNodes(shared).ok());
  const Generation on_b = Checked(kB, Request(prompt, shared), plain);
  const Generation cold = Checked(kB, Request(prompt, fresh), plain);
  std::printf(
      "replica B: EDL %.2f (%lld of %lld draft tokens accepted) in \"%s\" "
      "(shard %d, fed by replica A) vs %.2f (%lld of %lld) in \"%s\" "
      "(shard %d)\n",
      on_b.usage.edl(), (long long)on_b.usage.accepted_draft_tokens(),
      (long long)on_b.usage.draft_tokens(), shared.c_str(), ShardOf(shared),
      cold.usage.edl(), (long long)cold.usage.accepted_draft_tokens(),
      (long long)cold.usage.draft_tokens(), fresh.c_str(), ShardOf(fresh));
  // Each step waits for its draft (WaitForDraftsFlags above), so what B drafts
  // is what the shard learned from A. What shows it is the margin over the
  // untouched namespace.
  EXPECT_GT(on_b.usage.edl(), 2.0);
  EXPECT_GT(on_b.usage.edl(), cold.usage.edl() + 0.5);
  EXPECT_GT(on_b.usage.accepted_draft_tokens(),
            cold.usage.accepted_draft_tokens());
}

TEST_F(ServiceShardsTest, KillingOneShardFailsNoRequest) {
  const int killed = 1;
  const int kept = 0;
  const std::string doomed = NamespaceOn(killed, "doomed-");
  const std::string spared = NamespaceOn(kept, "spared-");
  std::printf("killing shard %d (%s, namespace %s); shard %d keeps %s\n",
              killed, pair_->draftsvc_address(killed).c_str(), doomed.c_str(),
              kept, spared.c_str());

  // Warm both namespaces (from both replicas) and make their tries durable.
  std::vector<v1::GenerateRequest> requests;
  std::vector<Generation> plain;
  for (const std::string& ns : {doomed, spared}) {
    for (const char* prompt : kPrompts) {
      requests.push_back(Request(prompt, ns));
      requests.back().set_max_new_tokens(kStreamTokens);
      plain.push_back(pair_->Reference(requests.back()));
      ASSERT_TRUE(plain.back().status.ok())
          << plain.back().status.error_message();
      Checked(kA, requests.back(), plain.back());
    }
    ASSERT_TRUE(pair_->WaitForOutputNodes(ns).ok());
  }
  ASSERT_TRUE(pair_->FlushDrafts().ok());
  EXPECT_EQ(ShardUp(kA, killed), "1");
  EXPECT_EQ(ShardUp(kB, killed), "1");

  // Eight streams: both replicas x both namespaces x both prompts. The shard
  // dies once every stream has its first message.
  const int streams = 2 * static_cast<int>(requests.size());
  std::mutex mu;
  std::condition_variable cv;
  int first_messages = 0;
  std::atomic<int> finished{0};
  std::vector<Generation> got(streams);
  std::vector<std::thread> clients;
  for (int i = 0; i < streams; ++i) {
    clients.emplace_back([&, i] {
      StreamHooks hooks;
      hooks.on_message = [&](grpc::ClientContext*, int message) {
        if (message != 1) return;
        std::lock_guard<std::mutex> lock(mu);
        ++first_messages;
        cv.notify_all();
      };
      got[i] = pair_->GenerateOn(i % 2 == 0 ? kA : kB, requests[i / 2], hooks);
      finished.fetch_add(1);
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(120),
                [&] { return first_messages == streams; });
  }
  pair_->KillDraftsvc(killed);
  const int running_at_kill = streams - finished.load();
  for (std::thread& t : clients) t.join();
  std::printf("killed shard %d with %d of %d streams running\n", killed,
              running_at_kill, streams);
  EXPECT_GT(running_at_kill, 0) << "every stream ended before the kill";
  for (int i = 0; i < streams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i, " on replica ", i % 2, ": ",
                              requests[i / 2].ShortDebugString()));
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, plain[i / 2].tokens)
        << "\n  with the kill: " << TokensToString(got[i].tokens)
        << "\n  drafts off:    " << TokensToString(plain[i / 2].tokens);
  }

  // While the shard is down: its namespaces decode plain on both replicas,
  // the other shard's keep drafting.
  for (int replica : {kA, kB}) {
    SCOPED_TRACE(
        absl::StrCat("replica ", replica, " with shard ", killed, " down"));
    const Generation down = Checked(replica, requests[0], plain[0]);
    EXPECT_EQ(down.usage.draft_tokens(), 0) << "drafted from a dead shard";
    const Generation up = Checked(replica, requests[2], plain[2]);
    EXPECT_GT(up.usage.draft_tokens(), 0) << "the live shard stopped drafting";
    EXPECT_GT(up.usage.accepted_draft_tokens(), 0);
    EXPECT_EQ(ShardUp(replica, killed), "0");
    EXPECT_EQ(ShardUp(replica, kept), "1");
    std::printf(
        "replica %d, shard %d down: %s EDL %.2f (%lld draft tokens), %s EDL "
        "%.2f (%lld draft tokens)\n",
        replica, killed, doomed.c_str(), down.usage.edl(),
        (long long)down.usage.draft_tokens(), spared.c_str(), up.usage.edl(),
        (long long)up.usage.draft_tokens());
  }

  // Back on the same database and port: the killed shard's namespaces draft
  // again from what was flushed.
  ASSERT_TRUE(pair_->RestartDraftsvc(killed).ok()) << pair_->Logs();
  for (int replica : {kA, kB}) {
    SCOPED_TRACE(absl::StrCat("replica ", replica, " after the restart"));
    const auto restarted = std::chrono::steady_clock::now();
    Generation again;
    while (true) {
      again = Checked(replica, requests[0], plain[0]);
      if (again.usage.accepted_draft_tokens() > 0) break;
      const double ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - restarted)
                            .count();
      ASSERT_LT(ms, kResumeWithinMs) << "drafts did not resume";
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::printf("replica %d: %s drafts again, EDL %.2f\n", replica,
                doomed.c_str(), again.usage.edl());
    EXPECT_EQ(ShardUp(replica, killed), "1");
  }
}

}  // namespace
}  // namespace lookahead::testing
