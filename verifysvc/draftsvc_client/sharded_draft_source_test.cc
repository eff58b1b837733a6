// ShardedDraftSource and its rendezvous routing.
//
// Routing: the hash is pinned (a changed hash would re-home every namespace
// of a running fleet during a rolling update), owners do not depend on the
// order of --draftsvc, namespaces spread about evenly, removing a shard moves
// only its namespaces and adding one moves namespaces only onto it.
// The source: handles, Propose's split and merge in the caller's order,
// Stats summed, over recording fakes; and two real DraftsvcSources, one on a
// loopback DraftService and one on a dead port, where only the dead shard's
// namespaces go without drafts.
#include "verifysvc/draftsvc_client/sharded_draft_source.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/draft.grpc.pb.h"
#include "verifysvc/draftsvc_client/draftsvc_source.h"

namespace lookahead::verifysvc {
namespace {

namespace v1 = ::lookahead::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Namespaces(int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(absl::StrCat("tenant-", i));
  return names;
}

std::vector<std::string> Shards(int n) {
  std::vector<std::string> shards;
  for (int i = 0; i < n; ++i) {
    shards.push_back(
        absl::StrCat("draftsvc-", i, ".draftsvc.lookahead.svc:50061"));
  }
  return shards;
}

TEST(ParseDraftsvcAddressesTest, SplitsTrimsAndRejectsBadLists) {
  EXPECT_THAT(*ParseDraftsvcAddresses(""), ElementsAre());
  EXPECT_THAT(*ParseDraftsvcAddresses("127.0.0.1:50061"),
              ElementsAre("127.0.0.1:50061"));
  EXPECT_THAT(*ParseDraftsvcAddresses(" a:1 , dns:///b:2 "),
              ElementsAre("a:1", "dns:///b:2"));
  for (const char* bad : {"a:1,,b:2", "a:1,", ",a:1", " , "}) {
    absl::StatusOr<std::vector<std::string>> got = ParseDraftsvcAddresses(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr("--draftsvc"));
    EXPECT_THAT(got.status().message(), HasSubstr("empty address"));
  }
  absl::StatusOr<std::vector<std::string>> twice =
      ParseDraftsvcAddresses("a:1,b:2,a:1");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(), HasSubstr("\"a:1\" twice"));
  std::vector<std::string> many;
  for (int i = 0; i <= kMaxDraftShards; ++i) many.push_back(absl::StrCat(i));
  absl::StatusOr<std::vector<std::string>> too_many =
      ParseDraftsvcAddresses(absl::StrJoin(many, ","));
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(too_many.status().message(), HasSubstr("at most"));
}

TEST(RendezvousTest, ScoresArePinned) {
  // Every replica, build and version must agree: these values may never
  // change (a change re-homes namespaces away from their tries).
  EXPECT_EQ(RendezvousScore("a:1", "default"), RendezvousScore("a:1", ""));
  EXPECT_NE(RendezvousScore("a:1", "x"), RendezvousScore("a:2", "x"));
  EXPECT_NE(RendezvousScore("a:1", "x"), RendezvousScore("a:1", "y"));
  // "ab" + "c" and "a" + "bc" are different pairs.
  EXPECT_NE(RendezvousScore("ab", "c"), RendezvousScore("a", "bc"));
  // Computed independently (Python: FNV-1a 64 of "address\0namespace",
  // then splitmix64's finalizer).
  EXPECT_EQ(RendezvousScore("127.0.0.1:50061", "default"),
            uint64_t{10397571727424587030u});
  EXPECT_EQ(RendezvousScore("draftsvc-1.draftsvc:50061", "tenant-7"),
            uint64_t{12267017195088071904u});
}

TEST(RendezvousTest, OwnerDoesNotDependOnTheListOrder) {
  std::vector<std::string> shards = Shards(5);
  std::vector<std::string> reversed(shards.rbegin(), shards.rend());
  for (const std::string& ns : Namespaces(500)) {
    EXPECT_EQ(shards[RendezvousShard(shards, ns)],
              reversed[RendezvousShard(reversed, ns)])
        << ns;
  }
}

TEST(RendezvousTest, SpreadsNamespacesEvenly) {
  const std::vector<std::string> names = Namespaces(4000);
  for (int n : {2, 3, 4, 8}) {
    const std::vector<std::string> shards = Shards(n);
    std::vector<int> counts(n);
    for (const std::string& ns : names) ++counts[RendezvousShard(shards, ns)];
    const double fair = double(names.size()) / n;
    for (int s = 0; s < n; ++s) {
      // A binomial's sd is < sqrt(fair) <= 45: within 15% is > 6 sd at n=2.
      EXPECT_GT(counts[s], 0.85 * fair) << n << " shards, shard " << s;
      EXPECT_LT(counts[s], 1.15 * fair) << n << " shards, shard " << s;
    }
  }
  // Namespaces with small differences spread too (tenant-1, tenant-2 ...).
  const std::vector<std::string> two = Shards(2);
  std::set<int> used;
  for (int i = 0; i < 8; ++i) {
    used.insert(RendezvousShard(two, absl::StrCat("ns", i)));
  }
  EXPECT_EQ(used.size(), 2u);
}

TEST(RendezvousTest, RemovingAShardMovesOnlyItsNamespaces) {
  const std::vector<std::string> names = Namespaces(2000);
  const std::vector<std::string> all = Shards(4);
  for (int removed = 0; removed < 4; ++removed) {
    std::vector<std::string> rest = all;
    rest.erase(rest.begin() + removed);
    int moved = 0;
    std::map<std::string, int> landed;
    for (const std::string& ns : names) {
      const std::string& before = all[RendezvousShard(all, ns)];
      const std::string& after = rest[RendezvousShard(rest, ns)];
      if (before != all[removed]) {
        EXPECT_EQ(after, before) << ns << " moved though its shard stayed";
      } else {
        ++moved;
        ++landed[after];
      }
    }
    EXPECT_GT(moved, 0);
    // The removed shard's namespaces spread over all the others.
    EXPECT_EQ(landed.size(), 3u) << "removed " << removed;
  }
}

TEST(RendezvousTest, AddingAShardMovesNamespacesOnlyOntoIt) {
  const std::vector<std::string> names = Namespaces(2000);
  const std::vector<std::string> three = Shards(3);
  const std::vector<std::string> four = Shards(4);
  int moved = 0;
  for (const std::string& ns : names) {
    const std::string& before = three[RendezvousShard(three, ns)];
    const std::string& after = four[RendezvousShard(four, ns)];
    if (after != before) {
      EXPECT_EQ(after, four[3]) << ns;
      ++moved;
    }
  }
  EXPECT_GT(moved, 0.2 * names.size());
  EXPECT_LT(moved, 0.3 * names.size());
}

// A DraftSource that records what reaches it. Propose answers an ask with
// budget > 0 with the one-node tree [id * 1000 + its handle].
class RecordingSource : public DraftSource {
 public:
  explicit RecordingSource(int id) : id_(id) {}
  std::string name() const override { return "trie"; }
  int64_t Open(const DraftPolicy& policy, absl::Span<const int32_t>) override {
    if (policy.name_space == "refused") return 0;
    opened.push_back(policy.name_space);
    opened_sources.push_back(policy.sources);
    return next_++;
  }
  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override {
    observed[handle].insert(observed[handle].end(), tokens.begin(),
                            tokens.end());
  }
  absl::Status Failure(int64_t handle) const override {
    return handle == fail_handle ? absl::FailedPreconditionError("refused")
                                 : absl::OkStatus();
  }
  void WaitOpened(int64_t handle, absl::Time) const override {
    waited.push_back(handle);
  }
  std::vector<engine::DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                         bool* called) override {
    *called = true;
    ++calls;
    std::vector<engine::DraftTree> trees(asks.size());
    for (size_t i = 0; i < asks.size(); ++i) {
      asked.push_back(asks[i].handle);
      withheld.push_back(asks[i].withheld);
      if (asks[i].budget == 0) continue;
      trees[i].tokens = {static_cast<int32_t>(id_ * 1000 + asks[i].handle)};
      trees[i].parents = {-1};
    }
    return trees;
  }
  void Close(int64_t handle) override { closed.push_back(handle); }
  DraftCost cost() const override { return {}; }
  DraftSourceStats Stats() const override { return stats; }

  std::vector<std::string> opened;
  std::vector<engine::DraftSourceSet> opened_sources;
  std::vector<engine::DraftSourceSet> withheld;  // per ask, as asked
  std::map<int64_t, std::vector<int32_t>> observed;
  std::vector<int64_t> asked;
  std::vector<int64_t> closed;
  int calls = 0;
  int64_t fail_handle = -1;
  mutable std::vector<int64_t> waited;
  DraftSourceStats stats;

 private:
  const int id_;
  int64_t next_ = 1;
};

DraftPolicy Policy(std::string ns) {
  DraftPolicy policy;
  policy.mode = DraftMode::kTrieHierarchical;
  policy.decoding_length = 8;
  policy.name_space = std::move(ns);
  return policy;
}

// Namespaces "ns<i>" until both shards of `source` own one, in order.
std::vector<std::string> OnePerShard(const ShardedDraftSource& source) {
  std::vector<std::string> names(source.shard_count());
  for (int i = 0, found = 0; found < source.shard_count(); ++i) {
    const std::string ns = absl::StrCat("ns", i);
    std::string& slot = names[source.ShardOf(ns)];
    if (slot.empty()) {
      slot = ns;
      ++found;
    }
  }
  return names;
}

class ShardedDraftSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<ShardedDraftSource::Shard> shards;
    for (int i = 0; i < 2; ++i) {
      auto fake = std::make_unique<RecordingSource>(i + 1);
      fakes_.push_back(fake.get());
      shards.push_back({absl::StrCat("shard-", i, ":1"), std::move(fake)});
    }
    auto source = ShardedDraftSource::Create(std::move(shards));
    ASSERT_TRUE(source.ok()) << source.status();
    source_ = *std::move(source);
  }

  std::vector<RecordingSource*> fakes_;
  std::unique_ptr<ShardedDraftSource> source_;
};

TEST_F(ShardedDraftSourceTest, CreateRejectsBadShardLists) {
  EXPECT_FALSE(ShardedDraftSource::Create({}).ok());
  std::vector<ShardedDraftSource::Shard> twice;
  twice.push_back({"a:1", std::make_unique<RecordingSource>(1)});
  twice.push_back({"a:1", std::make_unique<RecordingSource>(2)});
  absl::StatusOr<std::unique_ptr<ShardedDraftSource>> got =
      ShardedDraftSource::Create(std::move(twice));
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("listed twice"));
  std::vector<ShardedDraftSource::Shard> null;
  null.push_back({"a:1", nullptr});
  EXPECT_FALSE(ShardedDraftSource::Create(std::move(null)).ok());
}

TEST_F(ShardedDraftSourceTest, RoutesEachNamespaceToItsShard) {
  const std::vector<std::string> names = OnePerShard(*source_);
  const int64_t a = source_->Open(Policy(names[0]), {1, 2});
  const int64_t b = source_->Open(Policy(names[1]), {3});
  const int64_t a2 = source_->Open(Policy(names[0]), {4});
  EXPECT_THAT(fakes_[0]->opened, ElementsAre(names[0], names[0]));
  EXPECT_THAT(fakes_[1]->opened, ElementsAre(names[1]));
  EXPECT_EQ(source_->Open(Policy("refused"), {1}), 0);
  // The empty namespace is the default one.
  EXPECT_EQ(source_->ShardOf(""), source_->ShardOf("default"));

  source_->Observe(a, {7, 8});
  source_->Observe(b, {9});
  source_->Observe(12345, {1});  // unknown: ignored
  EXPECT_THAT(fakes_[0]->observed[1], ElementsAre(7, 8));
  EXPECT_THAT(fakes_[1]->observed[1], ElementsAre(9));

  // The caller's order, interleaved across shards; budget 0 gets no tree.
  bool called = false;
  std::vector<engine::DraftTree> trees =
      source_->Propose({{b, 4}, {a2, 4}, {12345, 4}, {a, 0}, {a, 4}}, &called);
  EXPECT_TRUE(called);
  ASSERT_EQ(trees.size(), 5u);
  EXPECT_THAT(trees[0].tokens, ElementsAre(2001));  // shard 2, handle 1
  EXPECT_THAT(trees[1].tokens, ElementsAre(1002));  // shard 1, handle 2
  EXPECT_TRUE(trees[2].empty());                    // unknown handle
  EXPECT_TRUE(trees[3].empty());                    // budget 0
  EXPECT_THAT(trees[4].tokens, ElementsAre(1001));
  EXPECT_EQ(fakes_[0]->calls, 1);  // one call per shard per Propose
  EXPECT_EQ(fakes_[1]->calls, 1);
  EXPECT_THAT(fakes_[0]->asked, ElementsAre(2, 1, 1));
  EXPECT_THAT(fakes_[1]->asked, ElementsAre(1));

  // A Propose with asks for one shard only leaves the other alone.
  trees = source_->Propose({{b, 4}}, &called);
  EXPECT_EQ(fakes_[0]->calls, 1);
  EXPECT_EQ(fakes_[1]->calls, 2);
  trees = source_->Propose({}, &called);
  EXPECT_FALSE(called);

  fakes_[1]->fail_handle = 1;
  EXPECT_FALSE(source_->Failure(b).ok());
  EXPECT_TRUE(source_->Failure(a).ok());
  source_->WaitOpened(b, absl::InfiniteFuture());
  source_->WaitOpened(12345, absl::InfiniteFuture());  // unknown: ignored
  EXPECT_TRUE(fakes_[0]->waited.empty());
  EXPECT_THAT(fakes_[1]->waited, ElementsAre(1));

  source_->Close(a);
  source_->Close(b);
  source_->Close(a);  // twice: ignored
  EXPECT_THAT(fakes_[0]->closed, ElementsAre(1));
  EXPECT_THAT(fakes_[1]->closed, ElementsAre(1));
  source_->Observe(a, {1});  // closed: ignored
  EXPECT_EQ(fakes_[0]->observed[1].size(), 2u);
}

// With the assistant served in the verifier's process, draftsvc is asked
// for the other sources a request names, and not opened for a request that
// names the assistant alone; a request that names none gets draftsvc's
// defaults as before, with the assistant withheld from every step so that
// draftsvc's own assistant (if its defaults hold one) never drafts too.
TEST_F(ShardedDraftSourceTest, SourcesServedInProcessAreNotAskedOfDraftsvc) {
  using engine::DraftSourceTag;
  using engine::SourceBit;
  source_->ServeInProcess(SourceBit(DraftSourceTag::kAssistant));
  const std::string ns = OnePerShard(*source_)[0];
  DraftPolicy mixed = Policy(ns);
  mixed.sources =
      SourceBit(DraftSourceTag::kTrie) | SourceBit(DraftSourceTag::kAssistant);
  EXPECT_NE(source_->Open(mixed, {1}), 0);
  DraftPolicy alone = Policy(ns);
  alone.sources = SourceBit(DraftSourceTag::kAssistant);
  EXPECT_EQ(source_->Open(alone, {1}), 0);
  const int64_t defaults = source_->Open(Policy(ns), {1});
  EXPECT_NE(defaults, 0);
  EXPECT_THAT(fakes_[0]->opened_sources,
              ElementsAre(SourceBit(DraftSourceTag::kTrie), 0));
  DraftAsk ask{defaults, 4, DraftMode::kTrieHierarchical};
  ask.withheld = SourceBit(DraftSourceTag::kTrie);  // the step's own gate
  bool called = false;
  source_->Propose({ask}, &called);
  EXPECT_THAT(fakes_[0]->withheld,
              ElementsAre(SourceBit(DraftSourceTag::kTrie) |
                          SourceBit(DraftSourceTag::kAssistant)));
}

TEST_F(ShardedDraftSourceTest, StatsSumTheShards) {
  fakes_[0]->stats = {true, 2, 1, 5};
  fakes_[1]->stats = {true, 3, 4, 6};
  DraftSourceStats stats = source_->Stats();
  EXPECT_TRUE(stats.available);
  EXPECT_EQ(stats.failures, 5);
  EXPECT_EQ(stats.reopened, 5);
  EXPECT_EQ(stats.open_sessions, 11);
  fakes_[1]->stats.available = false;
  EXPECT_FALSE(source_->Stats().available);
  std::vector<ShardedDraftSource::ShardHealth> health = source_->ShardStats();
  ASSERT_EQ(health.size(), 2u);
  EXPECT_EQ(health[0].address, "shard-0:1");
  EXPECT_TRUE(health[0].stats.available);
  EXPECT_EQ(health[1].address, "shard-1:1");
  EXPECT_FALSE(health[1].stats.available);
}

// Answers every Step entry that asks for drafts with the tree [42].
class TinyDraftService final : public v1::DraftService::Service {
 public:
  grpc::Status OpenSession(grpc::ServerContext*, const v1::OpenSessionRequest*,
                           v1::OpenSessionResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status Step(grpc::ServerContext*, const v1::StepRequest* request,
                    v1::StepResponse* response) override {
    for (const v1::SessionStep& step : request->steps()) {
      v1::SessionDraft* draft = response->add_drafts();
      if (step.decoding_length() == 0) continue;
      v1::DraftTree* tree = draft->mutable_tree();
      tree->add_tokens(42);
      tree->add_parents(-1);
      tree->add_depths(1);
    }
    return grpc::Status::OK;
  }
  grpc::Status CloseSession(grpc::ServerContext*,
                            const v1::CloseSessionRequest*,
                            v1::CloseSessionResponse*) override {
    return grpc::Status::OK;
  }
};

// A port nothing listens on (bound, then released).
int DeadPort() {
  TinyDraftService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  server->Shutdown();
  server->Wait();
  return port;
}

TEST(ShardedDraftsvcTest, ADeadShardCostsOnlyItsNamespacesTheirDrafts) {
  TinyDraftService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string live = absl::StrCat("127.0.0.1:", port);
  const std::string dead = absl::StrCat("127.0.0.1:", DeadPort());

  DraftClientOptions client;
  client.step_deadline = absl::Milliseconds(200);
  client.session_deadline = absl::Milliseconds(500);
  DraftSessionsOptions sessions;
  sessions.replica_id = "test";
  std::vector<ShardedDraftSource::Shard> shards;
  for (const std::string& address : {live, dead}) {
    shards.push_back(
        {address, DraftsvcSource::Connect(address, 100, client, sessions)});
  }
  auto created = ShardedDraftSource::Create(std::move(shards));
  ASSERT_TRUE(created.ok()) << created.status();
  ShardedDraftSource& source = **created;
  const std::vector<std::string> names = OnePerShard(source);
  const int64_t on_live = source.Open(Policy(names[0]), {1, 2, 3});
  const int64_t on_dead = source.Open(Policy(names[1]), {1, 2, 3});
  ASSERT_NE(on_live, 0);
  ASSERT_NE(on_dead, 0);

  // Sessions open on a worker: ask until the live shard answers.
  std::vector<engine::DraftTree> trees;
  for (int attempt = 0; attempt < 500; ++attempt) {
    bool called = false;
    trees = source.Propose({{on_dead, 4}, {on_live, 4}}, &called);
    ASSERT_EQ(trees.size(), 2u);
    if (!trees[1].empty() && !source.ShardStats()[1].stats.available) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(trees[0].empty()) << "the dead shard drafted";
  EXPECT_THAT(trees[1].tokens, ElementsAre(42));
  std::vector<ShardedDraftSource::ShardHealth> health = source.ShardStats();
  EXPECT_TRUE(health[0].stats.available);
  EXPECT_EQ(health[1].address, dead);
  EXPECT_FALSE(source.Stats().available);
  source.Close(on_live);
  source.Close(on_dead);
  server->Shutdown();
  server->Wait();
}

}  // namespace
}  // namespace lookahead::verifysvc
