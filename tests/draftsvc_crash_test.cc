// Crash test of draftsvc's durability promise (rocksdb db_crashtest style).
//
// The driver (this process) starts the REAL draftsvc binary in --sync mode on
// a loopback port with a temp RocksDB directory. Writer threads insert
// through real gRPC (OpenSession, then Step with accepted tokens); every
// ACKNOWLEDGED Step is replayed into an oracle kept here, outside the server.
// The driver SIGKILLs the server at random moments (>= 20 times), then opens
// the RocksDB directory itself and checks that
//   * every acknowledged write is there: count(path) >= the oracle's count
//     from acknowledged Steps;
//   * nothing was invented: count(path) <= the count if every attempted
//     Step had been applied, and no path outside that set exists;
//   * the trie is consistent: every node's parent exists and
//     count(parent) >= count(child).
// Pruning is disabled (huge capacity), so counts only grow. The oracle's
// windowing is DraftIndex's own (the thing under test is durability, not
// window extraction): a sink-less copy of the index maps Steps to paths.
//
// The namespace's n-gram pool gets the same checks. Steps also carry Jacobi
// n-grams and recycled predictions (PredictionTree), built so that pool
// entries only ever add up, in any order: the pool never prunes (huge
// capacity), every prediction continuation is one token out of 8 (so a key
// never holds more than --ngram_continuations_per_key = 8 and nothing is
// evicted or merged as a prefix), and each n-gram's first token is used
// once in the whole test (its entries are its own). Then, per entry
// (key, continuation) of the store:
//   * acknowledged: count >= the count the acknowledged Steps give it (the
//     index's own pool, in a driver-side replica, computes it);
//   * not invented: the entry was produced by an attempted Step, count <=
//     the count if every attempted Step had been applied.
// After each restart the server must also serve them: Stats' ngram_entries
// lies between the acknowledged and the attempted entry counts (the
// restored pool), and a session whose context ends in an acknowledged
// n-gram's first token gets a draft (DRAFT_SOURCE_NGRAM only) whose root
// children include the n-gram's second token.
//
// PoolIsExactlyTheAcknowledgedPrefixAfterSigkill checks the pool's exact
// state with prunes, evictions and merges on (a tiny pool): with one writer
// the store must hold exactly the pool of the acknowledged Steps, or of
// those plus the one in flight.
//
// The server binary's path comes from env DRAFTSVC_BINARY (set by BUILD).
#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/client_callback.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "draftsvc/index/draft_index.h"
#include "draftsvc/storage/trie_mutation.h"
#include "draftsvc/storage/trie_store.h"
#include "gtest/gtest.h"
#include "proto/draft.grpc.pb.h"
#include "proto/draft.pb.h"
#include "tests/draftsvc_storage_harness.h"
#include "tests/server_process.h"

extern char** environ;

namespace lookahead::draftsvc {
namespace {

namespace v1 = ::lookahead::v1;
using Path = std::vector<int32_t>;
using Counts = std::map<Path, int64_t>;
using ::lookahead::testing::ChildProcess;
using ::lookahead::testing::ServerProcess;

constexpr char kNamespace[] = "crash";
constexpr int32_t kVocab = 49152;
constexpr int32_t kBranchLength = 4;
constexpr int kKills = 22;
constexpr int kWriters = 3;
// Token ranges that keep pool entries apart (see the top): Steps' accepted
// tokens and prediction tree nodes are < kNgramFirstToken; n-gram first
// tokens are unique, from kNgramFirstToken up; their other tokens in
// [kNgramOtherToken, kNgramFirstToken); predictions in
// [kPredictionToken, kPredictionToken + kPredictionValues).
constexpr int32_t kNgramOtherToken = 2000;
constexpr int32_t kNgramFirstToken = 10000;
constexpr int32_t kPredictionToken = 30000;
constexpr int32_t kPredictionValues = 8;
static_assert(kPredictionToken < kVocab - kPredictionValues);
// Pool options of both the server (flags) and the replicas.
constexpr int kNgramMaxKeyTokens = 4;
constexpr int kNgramContinuationsPerKey = kPredictionValues;
constexpr int64_t kNgramCapacity = int64_t{1} << 30;

// Applies kAdd mutations (the only trie kind without pruning) to a map, and
// the pool's mutations (set-counts of entries that only grow) to another.
class CountingSink : public MutationSink {
 public:
  void Submit(TrieMutationBatch batch,
              std::function<void(absl::Status)> done) override {
    {
      absl::MutexLock lock(&mu_);
      for (const TrieMutation& m : batch.mutations) {
        if (m.table == TrieMutation::Table::kNgramPool) {
          // The pool's count of the entry after this change.
          if (m.kind == TrieMutation::Kind::kSetCount) {
            pool_[m.path] = m.value;
          } else if (m.kind == TrieMutation::Kind::kAdd) {
            pool_[m.path] += m.value;
          } else {
            unexpected_kinds_++;  // A prune, an eviction or a merge.
          }
          continue;
        }
        if (m.kind != TrieMutation::Kind::kAdd) {
          unexpected_kinds_++;
          continue;
        }
        counts_[m.path] += m.value;
      }
    }
    if (done) done(absl::OkStatus());
  }
  Counts counts() const {
    absl::MutexLock lock(&mu_);
    return counts_;
  }
  // Pool entries as NgramMutationPath(key, continuation) -> count.
  Counts pool() const {
    absl::MutexLock lock(&mu_);
    return pool_;
  }
  int unexpected_kinds() const {
    absl::MutexLock lock(&mu_);
    return unexpected_kinds_;
  }

 private:
  mutable absl::Mutex mu_;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  Counts pool_ ABSL_GUARDED_BY(mu_);
  int unexpected_kinds_ ABSL_GUARDED_BY(mu_) = 0;
};

// An in-driver replica of the index whose sink records the expected counts.
struct Replica {
  Replica() : index(MakeOptions(), &sink) {}
  static IndexOptions MakeOptions() {
    IndexOptions o;
    o.default_branch_length = kBranchLength;
    o.capacity_nodes = int64_t{1} << 40;
    o.ngram.max_key_tokens = kNgramMaxKeyTokens;
    o.ngram.max_continuations_per_key = kNgramContinuationsPerKey;
    o.ngram.capacity_entries = kNgramCapacity;
    return o;
  }
  CountingSink sink;
  DraftIndex index;
};

// What the store holds after a kill.
class NodeCollector : public TrieScanVisitor {
 public:
  absl::Status OnNamespace(absl::string_view ns, int32_t vocab) override {
    vocabs[std::string(ns)] = vocab;
    return absl::OkStatus();
  }
  absl::Status OnNode(absl::string_view ns, absl::Span<const int32_t> path,
                      int64_t count) override {
    if (ns != kNamespace) {
      return absl::InternalError(absl::StrCat("unexpected namespace ", ns));
    }
    counts[Path(path.begin(), path.end())] = count;
    return absl::OkStatus();
  }
  absl::Status OnNgram(absl::string_view ns, absl::Span<const int32_t> key,
                       absl::Span<const int32_t> continuation,
                       int64_t count) override {
    if (ns != kNamespace) {
      return absl::InternalError(absl::StrCat("unexpected namespace ", ns));
    }
    pool[NgramMutationPath(key, continuation)] = count;
    return absl::OkStatus();
  }
  std::map<std::string, int32_t> vocabs;
  Counts counts;
  Counts pool;  // NgramMutationPath(key, continuation) -> count.
};

// Whether wait status `status` of a server we SIGKILLed says that it was
// killed by us. A server that exited 0 after logging a SIGTERM/SIGINT was
// stopped from outside (a stale pid in someone else's kill on this shared
// machine): tolerated, its store is still checked. Anything else (a crash,
// an exit of its own) fails the test.
void ExpectKilledByUs(int status, const std::string& log, int life) {
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
      (log.find("signal 15, shutting down") != std::string::npos ||
       log.find("signal 2, shutting down") != std::string::npos)) {
    std::fprintf(stderr, "warning: life %d was stopped by an outside signal\n",
                 life);
    return;
  }
  ADD_FAILURE() << "draftsvc ended on its own in life " << life
                << " (wait status " << status << "):\n"
                << log;
}

// The real draftsvc binary in --sync mode on a free loopback port.
// The pool flags of AcknowledgedStepsSurviveSigkill (the replicas' options).
std::vector<std::string> GrowOnlyPoolFlags() {
  return {
      absl::StrCat("--ngram_max_key_tokens=", kNgramMaxKeyTokens),
      absl::StrCat("--ngram_continuations_per_key=", kNgramContinuationsPerKey),
      absl::StrCat("--ngram_capacity_entries=", kNgramCapacity)};
}

std::unique_ptr<ServerProcess> StartServer(
    const std::string& binary, const std::string& db_path,
    const std::string& work_dir, const std::string& generation,
    const std::vector<std::string>& extra_flags = {}) {
  std::vector<std::string> argv = {
      binary,
      "--host=127.0.0.1",
      "--port=0",
      "--metrics_port=0",
      "--db_path=" + db_path,
      "--sync",
      absl::StrCat("--branch_length=", kBranchLength),
      "--capacity_nodes=2147483646"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  return std::make_unique<ServerProcess>(
      argv, absl::StrCat(work_dir, "/port.", generation),
      absl::StrCat(work_dir, "/server.", generation, ".log"));
}

// N-grams whose Step was acknowledged durable (for the draft check).
struct AckedNgrams {
  absl::Mutex mu;
  std::vector<std::vector<int32_t>> ngrams ABSL_GUARDED_BY(mu);
};

// A Step entry's pool input: with some probability a Jacobi n-gram (2 or 3
// tokens, its first from `next_first`, used once) and a prediction tree
// (1..3 nodes below the root after `root_after` of the accepted tokens,
// k = 1..2 predictions per row out of kPredictionValues tokens).
void AddPoolInput(std::mt19937& rng, int accepted,
                  std::atomic<int32_t>& next_first, v1::SessionStep* step) {
  if (rng() % 3 == 0) {
    const int32_t first = next_first.fetch_add(1);
    if (first < kPredictionToken) {
      v1::Ngram* ngram = step->add_ngrams();
      ngram->add_tokens(first);
      for (int i = 1 + static_cast<int>(rng() % 2); i > 0; --i) {
        ngram->add_tokens(kNgramOtherToken +
                          rng() % (kNgramFirstToken - kNgramOtherToken));
      }
    }
  }
  if (rng() % 2 == 0) {
    v1::PredictionTree* tree = step->add_predictions();
    tree->set_root_after(static_cast<int32_t>(rng() % (accepted + 1)));
    const int nodes = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < nodes; ++i) {
      tree->add_tokens(static_cast<int32_t>(rng() % 24));
      tree->add_parents(i == 0 ? -1 : static_cast<int32_t>(rng() % i));
    }
    const int k = 1 + static_cast<int>(rng() % 2);
    tree->set_k(k);
    for (int i = 0; i < k * (nodes + 1); ++i) {
      tree->add_top_tokens(kPredictionToken + rng() % kPredictionValues);
    }
  }
}

// The index's input for `step` (spans into it).
StepInput ToInput(const v1::SessionStep& step) {
  StepInput input;
  input.accepted = step.accepted_tokens();
  for (const v1::PredictionTree& tree : step.predictions()) {
    PredictionInput p;
    p.root_after = tree.root_after();
    p.tokens = tree.tokens();
    p.parents = tree.parents();
    p.k = tree.k();
    p.top_tokens = tree.top_tokens();
    input.predictions.push_back(p);
  }
  for (const v1::Ngram& ngram : step.ngrams()) {
    input.ngrams.push_back(ngram.tokens());
  }
  return input;
}

// One writer's loop against one server life: opens a session, then Steps
// until an RPC fails (the server was killed) or `stop` is set. Each Step is
// applied to `upper` before it is sent and to `acked` once acknowledged
// (code 0 and PERSISTENCE_DURABLE).
void WriterLife(v1::DraftService::Stub& stub, const std::string& session_id,
                std::mt19937& rng, Replica& acked, Replica& upper,
                const std::atomic<bool>& stop, std::atomic<int64_t>& acks,
                std::atomic<int32_t>& next_ngram_first,
                AckedNgrams& acked_ngrams) {
  std::vector<int32_t> prompt(4 + rng() % 6);
  for (auto& t : prompt) t = rng() % 64;
  v1::OpenSessionRequest open;
  open.set_session_id(session_id);
  open.set_namespace_(kNamespace);
  open.set_vocab_size(kVocab);
  for (int32_t t : prompt) open.add_prompt_tokens(t);
  v1::OpenSessionResponse opened;
  grpc::ClientContext open_context;
  open_context.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::seconds(10));
  if (!stub.OpenSession(&open_context, open, &opened).ok()) return;
  for (Replica* r : {&acked, &upper}) {
    ASSERT_TRUE(
        r->index.OpenSession(session_id, kNamespace, kVocab, prompt, 0).ok());
  }
  while (!stop.load()) {
    // A small alphabet with a skewed distribution: windows repeat, so
    // counts above 1 and shared prefixes are common.
    std::vector<int32_t> tokens(1 + rng() % 8);
    for (auto& t : tokens) {
      t = static_cast<int32_t>(rng() % 8 == 0 ? rng() % 2000 : rng() % 24);
    }
    v1::StepRequest request;
    v1::SessionStep* step = request.add_steps();
    step->set_session_id(session_id);
    for (int32_t t : tokens) step->add_accepted_tokens(t);
    step->set_decoding_length(8);
    AddPoolInput(rng, static_cast<int>(tokens.size()), next_ngram_first, step);
    {
      const absl::Status applied =
          upper.index.Append(session_id, ToInput(*step), nullptr);
      ASSERT_TRUE(applied.ok()) << applied;
    }
    v1::StepResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    grpc::Status status = stub.Step(&context, request, &response);
    if (!status.ok() || response.drafts_size() != 1 ||
        response.drafts(0).code() != 0 ||
        response.drafts(0).persistence() != v1::PERSISTENCE_DURABLE) {
      // Unacknowledged: may or may not be on disk. (A healthy --sync server
      // answers an entry it ran DURABLE; anything else ends this life.)
      if (status.ok() && response.drafts_size() == 1) {
        EXPECT_EQ(response.drafts(0).code(), 0) << response.drafts(0).message();
        EXPECT_EQ(response.drafts(0).persistence(), v1::PERSISTENCE_DURABLE);
      }
      return;
    }
    ASSERT_TRUE(acked.index.Append(session_id, ToInput(*step), nullptr).ok());
    acks.fetch_add(1);
    if (step->ngrams_size() > 0) {
      absl::MutexLock lock(&acked_ngrams.mu);
      for (const v1::Ngram& ngram : step->ngrams()) {
        acked_ngrams.ngrams.emplace_back(ngram.tokens().begin(),
                                         ngram.tokens().end());
      }
    }
  }
}

// One request, one response over a generic bidi stream (used for server
// reflection, whose protos this tree does not compile).
class OneShotBidi
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  OneShotBidi(grpc::GenericStub& stub, const std::string& method,
              const std::string& request) {
    grpc::Slice slice(request);
    request_ = grpc::ByteBuffer(&slice, 1);
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(10));
    stub.PrepareBidiStreamingCall(&context_, method, grpc::StubOptions(), this);
    StartWrite(&request_);
    StartRead(&response_);
    StartCall();
  }
  void OnWriteDone(bool /*ok*/) override { StartWritesDone(); }
  void OnReadDone(bool /*ok*/) override {}
  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    done_ = true;
  }
  // Waits for the end of the call; returns its status and the response.
  grpc::Status Await(std::string* response) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    *response = Bytes(response_);
    return status_;
  }
  static std::string Bytes(const grpc::ByteBuffer& buffer) {
    std::vector<grpc::Slice> slices;
    std::string out;
    if (buffer.Dump(&slices).ok()) {
      for (const auto& s : slices) {
        out.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    return out;
  }

 private:
  grpc::ClientContext context_;
  grpc::ByteBuffer request_, response_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

// main.cc wiring: the standard health service says SERVING and server
// reflection lists the DraftService.
void ExpectHealthAndReflection(std::shared_ptr<grpc::Channel> channel) {
  // HealthCheckResponse{status: SERVING (1)}.
  EXPECT_EQ(::lookahead::testing::HealthStatus(channel, ""), 1);

  grpc::GenericStub stub(channel);
  // ServerReflectionRequest{list_services: ""} is field 7, empty string.
  OneShotBidi reflection(
      stub, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      std::string("\x3a\x00", 2));
  std::string listed;
  const grpc::Status status = reflection.Await(&listed);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_NE(listed.find("lookahead.v1.DraftService"), std::string::npos)
      << listed;
}

// Pool entries on disk against both oracles (see the top); returns how
// many entries there are.
int64_t VerifyPool(const Counts& disk, const Counts& lower, const Counts& upper,
                   int kill) {
  int missing = 0, invented = 0;
  for (const auto& [entry, want] : lower) {
    auto it = disk.find(entry);
    const int64_t got = it == disk.end() ? 0 : it->second;
    if (got < want && ++missing <= 5) {
      ADD_FAILURE() << "after kill " << kill
                    << ": acknowledged n-gram pool entry with key length "
                    << entry[0] << " starting " << entry[1] << " has count "
                    << got << " < " << want;
    }
  }
  EXPECT_EQ(missing, 0) << "acknowledged pool updates lost after kill " << kill;
  for (const auto& [entry, count] : disk) {
    auto it = upper.find(entry);
    if ((it == upper.end() || count > it->second || count < 1) &&
        ++invented <= 5) {
      ADD_FAILURE() << "after kill " << kill << ": pool entry count " << count
                    << " above anything attempted (or < 1)";
    }
  }
  EXPECT_EQ(invented, 0);
  return static_cast<int64_t>(disk.size());
}

// Checks what is on disk against both oracles; returns the node count.
// With `lower_pool` (and `upper_pool`), the pool too; *pool_entries gets
// the entries on disk.
int64_t VerifyStore(const std::string& db_path, const Counts& lower,
                    const Counts& upper, int kill,
                    const Counts* lower_pool = nullptr,
                    const Counts* upper_pool = nullptr,
                    int64_t* pool_entries = nullptr) {
  auto store = TrieStore::Open(db_path, TrieStoreOptions());
  EXPECT_TRUE(store.ok()) << "after kill " << kill << ": " << store.status();
  if (!store.ok()) return 0;
  NodeCollector collected;
  absl::Status scanned = (*store)->Scan(collected);
  EXPECT_TRUE(scanned.ok()) << scanned;
  const Counts& disk = collected.counts;
  if (!disk.empty()) {
    EXPECT_EQ(collected.vocabs[kNamespace], kVocab);
  }
  int missing = 0;
  for (const auto& [path, want] : lower) {
    auto it = disk.find(path);
    const int64_t got = it == disk.end() ? 0 : it->second;
    if (got < want && ++missing <= 5) {
      ADD_FAILURE() << "after kill " << kill << ": acknowledged path of "
                    << path.size() << " tokens starting " << path[0]
                    << " has count " << got << " < " << want;
    }
  }
  EXPECT_EQ(missing, 0) << "acknowledged writes lost after kill " << kill;
  int invented = 0, inconsistent = 0;
  for (const auto& [path, count] : disk) {
    auto it = upper.find(path);
    if ((it == upper.end() || count > it->second) && ++invented <= 5) {
      ADD_FAILURE() << "after kill " << kill << ": count " << count
                    << " above anything attempted";
    }
    if (path.size() > 1) {
      auto parent = disk.find(Path(path.begin(), path.end() - 1));
      if ((parent == disk.end() || parent->second < count) &&
          ++inconsistent <= 5) {
        ADD_FAILURE() << "after kill " << kill
                      << ": node without a parent or with a larger count "
                         "than its parent";
      }
    }
    if (count < 1) ++inconsistent;
  }
  EXPECT_EQ(invented, 0);
  EXPECT_EQ(inconsistent, 0);
  if (lower_pool != nullptr) {
    const int64_t entries =
        VerifyPool(collected.pool, *lower_pool, *upper_pool, kill);
    if (pool_entries != nullptr) *pool_entries = entries;
  }
  EXPECT_TRUE((*store)->Close().ok());
  return static_cast<int64_t>(disk.size());
}

// After a restart, before any writer: the restored pool is served. Stats'
// ngram_entries lies in [acknowledged entries, attempted entries], and for
// up to 3 acknowledged n-grams a probe session whose prompt ends in the
// n-gram's first token gets (DRAFT_SOURCE_NGRAM only) a draft whose root
// children include its second token.
void VerifyServedPool(v1::DraftService::Stub& stub, const Counts& lower_pool,
                      const Counts& upper_pool, AckedNgrams& acked_ngrams,
                      std::mt19937& rng, int life) {
  v1::StatsRequest stats_request;
  stats_request.set_namespace_(kNamespace);
  v1::StatsResponse stats;
  grpc::ClientContext stats_context;
  ASSERT_TRUE(stub.Stats(&stats_context, stats_request, &stats).ok());
  ASSERT_EQ(stats.namespaces_size(), 1) << "life " << life;
  const int64_t entries = stats.namespaces(0).ngram_entries();
  EXPECT_GE(entries, static_cast<int64_t>(lower_pool.size()))
      << "life " << life << ": acknowledged pool entries not restored";
  EXPECT_LE(entries, static_cast<int64_t>(upper_pool.size()))
      << "life " << life;

  std::vector<std::vector<int32_t>> probes;
  {
    absl::MutexLock lock(&acked_ngrams.mu);
    const size_t n = acked_ngrams.ngrams.size();
    for (int i = 0; i < 3 && n > 0; ++i) {
      probes.push_back(acked_ngrams.ngrams[rng() % n]);
    }
  }
  for (size_t i = 0; i < probes.size(); ++i) {
    const std::vector<int32_t>& ngram = probes[i];
    const std::string id = absl::StrCat("probe-", life, "-", i);
    v1::OpenSessionRequest open;
    open.set_session_id(id);
    open.set_namespace_(kNamespace);
    open.set_vocab_size(kVocab);
    open.add_prompt_tokens(ngram[0]);
    v1::OpenSessionResponse opened;
    grpc::ClientContext open_context;
    ASSERT_TRUE(stub.OpenSession(&open_context, open, &opened).ok());
    v1::StepRequest request;
    v1::SessionStep* step = request.add_steps();
    step->set_session_id(id);
    step->set_decoding_length(8);
    step->add_sources(v1::DRAFT_SOURCE_NGRAM);
    v1::StepResponse response;
    grpc::ClientContext step_context;
    ASSERT_TRUE(stub.Step(&step_context, request, &response).ok());
    ASSERT_EQ(response.drafts_size(), 1);
    ASSERT_EQ(response.drafts(0).code(), 0) << response.drafts(0).message();
    const v1::DraftTree& tree = response.drafts(0).tree();
    bool proposed = false;
    for (int n = 0; n < tree.tokens_size(); ++n) {
      proposed |= tree.parents(n) == -1 && tree.tokens(n) == ngram[1];
    }
    EXPECT_TRUE(proposed) << "life " << life << ": the restored pool does not "
                          << "propose acknowledged n-gram " << ngram[0]
                          << " -> " << ngram[1] << " (" << tree.tokens_size()
                          << " draft nodes)";
    v1::CloseSessionRequest close;
    close.set_session_id(id);
    v1::CloseSessionResponse closed;
    grpc::ClientContext close_context;
    EXPECT_TRUE(stub.CloseSession(&close_context, close, &closed).ok());
  }
}

TEST(DraftsvcCrashTest, AcknowledgedStepsSurviveSigkill) {
  const char* binary = std::getenv("DRAFTSVC_BINARY");
  ASSERT_NE(binary, nullptr) << "set DRAFTSVC_BINARY to the draftsvc binary";
  ASSERT_TRUE(std::filesystem::exists(binary)) << binary;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string work_dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/draftsvc_crash");
  std::filesystem::remove_all(work_dir);
  std::filesystem::create_directories(work_dir);
  const std::string db_path = work_dir + "/db";

  Replica acked, upper;
  std::mt19937 rng(20261122);
  int64_t total_acks = 0;
  int64_t nodes = 0;
  int64_t pool_entries = 0;
  std::atomic<int32_t> next_ngram_first{kNgramFirstToken};
  AckedNgrams acked_ngrams;
  for (int kill = 0; kill <= kKills; ++kill) {
    auto server_process = StartServer(binary, db_path, work_dir,
                                      absl::StrCat(kill), GrowOnlyPoolFlags());
    ServerProcess& server = *server_process;
    const int port = server.WaitForPort();
    ASSERT_GT(port, 0) << "draftsvc did not start:\n" << server.Log();
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                       grpc::InsecureChannelCredentials());
    ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                          std::chrono::seconds(10)));
    auto stub = v1::DraftService::NewStub(channel);
    if (kill == 0) ExpectHealthAndReflection(channel);
    if (kill > 0) {
      VerifyServedPool(*stub, acked.sink.pool(), upper.sink.pool(),
                       acked_ngrams, rng, kill);
    }

    std::atomic<bool> stop{false};
    std::atomic<int64_t> acks{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      const uint32_t seed = rng();
      writers.emplace_back([&, w, seed] {
        std::mt19937 writer_rng(seed);
        WriterLife(*stub, absl::StrCat("w", w, "-life", kill), writer_rng,
                   acked, upper, stop, acks, next_ngram_first, acked_ngrams);
      });
    }
    if (kill < kKills) {
      // Let writes flow until one is acknowledged (a loaded machine can
      // take longer than the random delay to start them), then kill at a
      // random moment mid-traffic.
      const auto flowing_by =
          std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (acks.load() == 0 &&
             std::chrono::steady_clock::now() < flowing_by) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 650));
      ExpectKilledByUs(server.Kill(SIGKILL), server.Log(), kill);
    } else {
      // The last life ends gracefully: SIGTERM must flush and exit 0.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      stop.store(true);
      for (auto& t : writers) t.join();
      writers.clear();
      int status = server.Kill(SIGTERM);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << server.Log();
    }
    stop.store(true);
    for (auto& t : writers) t.join();
    total_acks += acks.load();
    EXPECT_GT(acks.load(), 0) << "no Step was acknowledged in life " << kill;
    ASSERT_EQ(acked.sink.unexpected_kinds(), 0);
    ASSERT_EQ(upper.sink.unexpected_kinds(), 0);
    const Counts lower_pool = acked.sink.pool();
    const Counts upper_pool = upper.sink.pool();
    nodes = VerifyStore(db_path, acked.sink.counts(), upper.sink.counts(), kill,
                        &lower_pool, &upper_pool, &pool_entries);
    if (::testing::Test::HasFailure()) {
      FAIL() << "stopping after kill " << kill << "; last server log:\n"
             << server.Log();
    }
  }
  std::printf(
      "crash test: %d kills, %lld acknowledged steps, %lld nodes, %lld "
      "n-gram pool entries (%zu acknowledged n-grams)\n",
      kKills, static_cast<long long>(total_acks), static_cast<long long>(nodes),
      static_cast<long long>(pool_entries), [&] {
        absl::MutexLock lock(&acked_ngrams.mu);
        return acked_ngrams.ngrams.size();
      }());
  EXPECT_GT(nodes, 100);
  EXPECT_GT(pool_entries, 100);
}

// ---- The pool's exact state under kill -9, prunes and evictions included.

// Pool options small enough that merges, evictions and halving prunes
// (whole-pool wipes) happen every few Steps.
constexpr int kSmallPoolMaxKey = 2;
constexpr int kSmallPoolMaxContinuation = 3;
constexpr int kSmallPoolPerKey = 3;
constexpr int64_t kSmallPoolCapacity = 120;
constexpr int32_t kSmallAlphabet = 10;

// Keeps the pool a replica's mutations describe (every kind, wipes too).
class PoolStateSink : public MutationSink {
 public:
  explicit PoolStateSink(Counts initial) : pool_(std::move(initial)) {}
  void Submit(TrieMutationBatch batch,
              std::function<void(absl::Status)> done) override {
    {
      absl::MutexLock lock(&mu_);
      for (const TrieMutation& m : batch.mutations) {
        if (m.table != TrieMutation::Table::kNgramPool) continue;
        switch (m.kind) {
          case TrieMutation::Kind::kAdd:
            pool_[m.path] += m.value;
            break;
          case TrieMutation::Kind::kSetCount:
            pool_[m.path] = m.value;
            break;
          case TrieMutation::Kind::kDeleteSubtree:
            if (m.path.empty()) {
              ++wipes_;
              pool_.clear();
            } else {
              pool_.erase(m.path);
            }
            break;
        }
      }
    }
    if (done) done(absl::OkStatus());
  }
  Counts pool() const {
    absl::MutexLock lock(&mu_);
    return pool_;
  }
  int64_t wipes() const {
    absl::MutexLock lock(&mu_);
    return wipes_;
  }

 private:
  mutable absl::Mutex mu_;
  Counts pool_ ABSL_GUARDED_BY(mu_);
  int64_t wipes_ ABSL_GUARDED_BY(mu_) = 0;
};

// A replica restored from what the store holds, exactly as the server
// restores itself (same scan order, so the same recency stamps).
struct PoolReplica {
  explicit PoolReplica(const Counts& disk_pool)
      : sink(disk_pool), index(MakeOptions(), &sink) {}
  static IndexOptions MakeOptions() {
    IndexOptions o;
    o.default_branch_length = kBranchLength;
    o.capacity_nodes = int64_t{1} << 40;
    o.ngram.max_key_tokens = kSmallPoolMaxKey;
    o.ngram.max_continuation_tokens = kSmallPoolMaxContinuation;
    o.ngram.max_continuations_per_key = kSmallPoolPerKey;
    o.ngram.capacity_entries = kSmallPoolCapacity;
    o.ngram.low_water = 0.75;  // --low_water's default.
    o.ngram.prune_halves_counts = true;
    return o;
  }
  PoolStateSink sink;
  DraftIndex index;
};

// Restores `replica` from the pool rows (only) of a scan.
class PoolRestorer : public TrieScanVisitor {
 public:
  explicit PoolRestorer(DraftIndex& index) : index_(index) {}
  absl::Status OnNamespace(absl::string_view ns, int32_t vocab) override {
    return index_.RestoreNamespace(ns, vocab);
  }
  absl::Status OnNode(absl::string_view, absl::Span<const int32_t>,
                      int64_t) override {
    return absl::OkStatus();
  }
  absl::Status OnNgram(absl::string_view ns, absl::Span<const int32_t> key,
                       absl::Span<const int32_t> continuation,
                       int64_t count) override {
    return index_.RestoreNgram(ns, key, continuation, count);
  }

 private:
  DraftIndex& index_;
};

// The store's pool rows, and replicas `acked` and `ahead` restored from it.
struct PoolSnapshot {
  Counts disk;
  std::unique_ptr<PoolReplica> acked, ahead;
};
PoolSnapshot LoadPoolSnapshot(const std::string& db_path, int life) {
  PoolSnapshot out;
  auto store = TrieStore::Open(db_path, TrieStoreOptions());
  EXPECT_TRUE(store.ok()) << "life " << life << ": " << store.status();
  if (!store.ok()) return out;
  NodeCollector collected;
  absl::Status scanned = (*store)->Scan(collected);
  EXPECT_TRUE(scanned.ok()) << scanned;
  out.disk = collected.pool;
  out.acked = std::make_unique<PoolReplica>(out.disk);
  out.ahead = std::make_unique<PoolReplica>(out.disk);
  for (PoolReplica* r : {out.acked.get(), out.ahead.get()}) {
    PoolRestorer restorer(r->index);
    EXPECT_TRUE((*store)->Scan(restorer).ok());
    r->index.FinishRestore();
    // A store the pool wrote needs no repair: nothing was submitted.
    EXPECT_EQ(r->sink.pool(), out.disk) << "life " << life;
  }
  EXPECT_TRUE((*store)->Close().ok());
  return out;
}

// One writer, Steps in sequence: `ahead` gets each Step before it is sent,
// `acked` once it is acknowledged durable; returns at the first Step that
// is not (so `ahead` is `acked` plus at most that Step).
void SerialPoolWriter(v1::DraftService::Stub& stub, const std::string& id,
                      std::mt19937& rng, PoolReplica& acked, PoolReplica& ahead,
                      std::atomic<int64_t>& acks) {
  auto token = [&] { return static_cast<int32_t>(rng() % kSmallAlphabet); };
  v1::OpenSessionRequest open;
  open.set_session_id(id);
  open.set_namespace_(kNamespace);
  open.set_vocab_size(kVocab);
  for (int i = 0; i < 3; ++i) open.add_prompt_tokens(token());
  v1::OpenSessionResponse opened;
  grpc::ClientContext open_context;
  open_context.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::seconds(10));
  if (!stub.OpenSession(&open_context, open, &opened).ok()) return;
  const std::vector<int32_t> prompt(open.prompt_tokens().begin(),
                                    open.prompt_tokens().end());
  for (PoolReplica* r : {&acked, &ahead}) {
    ASSERT_TRUE(r->index.OpenSession(id, kNamespace, kVocab, prompt, 0).ok());
  }
  while (true) {
    v1::StepRequest request;
    v1::SessionStep* step = request.add_steps();
    step->set_session_id(id);
    const int accepted = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < accepted; ++i) step->add_accepted_tokens(token());
    step->set_decoding_length(rng() % 2 == 0 ? 0 : 6);
    v1::PredictionTree* tree = step->add_predictions();
    tree->set_root_after(static_cast<int32_t>(rng() % (accepted + 1)));
    const int nodes = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < nodes; ++i) {
      tree->add_tokens(token());
      tree->add_parents(i == 0 ? -1 : static_cast<int32_t>(rng() % i));
    }
    const int k = 1 + static_cast<int>(rng() % 3);
    tree->set_k(k);
    for (int i = 0; i < k * (nodes + 1); ++i) tree->add_top_tokens(token());
    for (int n = static_cast<int>(rng() % 3); n > 0; --n) {
      v1::Ngram* ngram = step->add_ngrams();
      for (int i = 2 + static_cast<int>(rng() % 3); i > 0; --i) {
        ngram->add_tokens(token());
      }
    }
    ASSERT_TRUE(ahead.index.Append(id, ToInput(*step), nullptr).ok());
    v1::StepResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    const grpc::Status status = stub.Step(&context, request, &response);
    if (!status.ok() || response.drafts_size() != 1 ||
        response.drafts(0).code() != 0 ||
        response.drafts(0).persistence() != v1::PERSISTENCE_DURABLE) {
      if (status.ok() && response.drafts_size() == 1) {
        ADD_FAILURE() << "entry not acknowledged durable: code "
                      << response.drafts(0).code() << " "
                      << response.drafts(0).message();
      }
      return;
    }
    ASSERT_TRUE(acked.index.Append(id, ToInput(*step), nullptr).ok());
    acks.fetch_add(1);
  }
}

// With one writer the server applies Steps in the driver's order, so after
// a kill -9 the store's pool must be EXACTLY the pool of the acknowledged
// Steps, or of those plus the one in flight (applied and written, answer
// lost) — through merges, evictions and halving prunes (whole-pool range
// deletes plus survivors, one atomic batch). Each life restores replicas
// from the store as the server restores itself.
TEST(DraftsvcCrashTest, PoolIsExactlyTheAcknowledgedPrefixAfterSigkill) {
  const char* binary = std::getenv("DRAFTSVC_BINARY");
  ASSERT_NE(binary, nullptr) << "set DRAFTSVC_BINARY to the draftsvc binary";
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string work_dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/draftsvc_crash_pool");
  std::filesystem::remove_all(work_dir);
  std::filesystem::create_directories(work_dir);
  const std::string db_path = work_dir + "/db";
  const std::vector<std::string> flags = {
      absl::StrCat("--ngram_max_key_tokens=", kSmallPoolMaxKey),
      absl::StrCat("--ngram_max_continuation_tokens=",
                   kSmallPoolMaxContinuation),
      absl::StrCat("--ngram_continuations_per_key=", kSmallPoolPerKey),
      absl::StrCat("--ngram_capacity_entries=", kSmallPoolCapacity)};
  std::mt19937 rng(20261125);
  constexpr int kLives = 12;
  int64_t total_acks = 0, wipes = 0, matched_ahead = 0;
  PoolSnapshot snapshot;
  snapshot.acked = std::make_unique<PoolReplica>(Counts());
  snapshot.ahead = std::make_unique<PoolReplica>(Counts());
  for (int life = 0; life < kLives; ++life) {
    auto server_process =
        StartServer(binary, db_path, work_dir, absl::StrCat("p", life), flags);
    ServerProcess& server = *server_process;
    const int port = server.WaitForPort();
    ASSERT_GT(port, 0) << "draftsvc did not start:\n" << server.Log();
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                       grpc::InsecureChannelCredentials());
    ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                          std::chrono::seconds(10)));
    auto stub = v1::DraftService::NewStub(channel);
    std::atomic<int64_t> acks{0};
    const uint32_t seed = rng();
    std::thread writer([&] {
      std::mt19937 writer_rng(seed);
      SerialPoolWriter(*stub, absl::StrCat("serial-", life), writer_rng,
                       *snapshot.acked, *snapshot.ahead, acks);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 600));
    ExpectKilledByUs(server.Kill(SIGKILL), server.Log(), life);
    writer.join();
    total_acks += acks.load();
    EXPECT_GT(acks.load(), 0) << "no Step was acknowledged in life " << life;
    wipes += snapshot.acked->sink.wipes();
    const Counts acked = snapshot.acked->sink.pool();
    const Counts ahead = snapshot.ahead->sink.pool();
    snapshot = LoadPoolSnapshot(db_path, life);
    const bool is_acked = snapshot.disk == acked;
    const bool is_ahead = snapshot.disk == ahead;
    matched_ahead += !is_acked && is_ahead;
    EXPECT_TRUE(is_acked || is_ahead)
        << "life " << life << ": the store's pool (" << snapshot.disk.size()
        << " entries) is neither the acknowledged Steps' pool (" << acked.size()
        << ") nor that plus the Step in flight (" << ahead.size() << ")";
    if (::testing::Test::HasFailure()) {
      FAIL() << "stopping after life " << life << "; server log:\n"
             << server.Log();
    }
  }
  std::printf(
      "pool crash test: %d kills, %lld acknowledged steps, %lld pool wipes "
      "(halving prunes), %lld kills caught the step in flight on disk, %zu "
      "entries at the end\n",
      kLives, static_cast<long long>(total_acks), static_cast<long long>(wipes),
      static_cast<long long>(matched_ahead), snapshot.disk.size());
  EXPECT_GT(wipes, kLives);  // Prunes happened, and were written.
}

// Replays an ack log of tests/draftsvc_stress into fresh replicas.
void ReplayAckLog(const std::string& path, Replica& acked, Replica& upper) {
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::map<std::string, std::vector<int32_t>> pending;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind, id;
    fields >> kind >> id;
    std::vector<int32_t> tokens;
    for (int32_t t; fields >> t;) tokens.push_back(t);
    if (kind == "open") {
      for (Replica* r : {&acked, &upper}) {
        ASSERT_TRUE(
            r->index.OpenSession(id, kNamespace, kVocab, tokens, 0).ok());
      }
    } else if (kind == "try") {
      ASSERT_TRUE(upper.index.Append(id, tokens, nullptr).ok());
      pending[id] = std::move(tokens);
    } else {
      ASSERT_EQ(kind, "ack") << line;
      ASSERT_TRUE(acked.index.Append(id, pending[id], nullptr).ok());
    }
  }
}

// The same promise with the writer in its own process (rocksdb's db_stress
// split): tests/draftsvc_stress logs every acknowledged Step to an fsynced
// file, the driver kills the server mid-run and checks the store against the
// log.
TEST(DraftsvcCrashTest, SeparateWriterProcessAckLogSurvivesSigkill) {
  const char* binary = std::getenv("DRAFTSVC_BINARY");
  const char* stress = std::getenv("DRAFTSVC_STRESS_BINARY");
  ASSERT_NE(binary, nullptr);
  ASSERT_NE(stress, nullptr) << "set DRAFTSVC_STRESS_BINARY";
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string work_dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/draftsvc_crash_stress");
  std::filesystem::remove_all(work_dir);
  std::filesystem::create_directories(work_dir);
  const std::string db_path = work_dir + "/db";
  const std::string ack_log = work_dir + "/acks.log";
  std::mt19937 rng(7);
  constexpr int kLives = 4;
  for (int life = 0; life < kLives; ++life) {
    auto server_process =
        StartServer(binary, db_path, work_dir, absl::StrCat("s", life));
    ServerProcess& server = *server_process;
    const int port = server.WaitForPort();
    ASSERT_GT(port, 0) << "draftsvc did not start:\n" << server.Log();
    ChildProcess writer({stress, absl::StrCat("--target=127.0.0.1:", port),
                         "--threads=3", "--seconds=60", "--ack_log=" + ack_log,
                         absl::StrCat("--session_prefix=life", life),
                         absl::StrCat("--name_space=", kNamespace),
                         absl::StrCat("--vocab_size=", kVocab),
                         absl::StrCat("--seed=", life + 1)},
                        absl::StrCat(work_dir, "/writer.", life, ".log"));
    std::this_thread::sleep_for(std::chrono::milliseconds(400 + rng() % 600));
    ExpectKilledByUs(server.Kill(SIGKILL), server.Log(), life);
    // Without a server every RPC fails at once: the writer must end.
    for (int i = 0; i < 1500 && writer.Running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE(writer.Running()) << "writer hangs after the kill";
    Replica acked, upper;
    ReplayAckLog(ack_log, acked, upper);
    ASSERT_FALSE(acked.sink.counts().empty()) << writer.Log();
    VerifyStore(db_path, acked.sink.counts(), upper.sink.counts(), life);
    if (::testing::Test::HasFailure()) {
      FAIL() << "writer log:\n"
             << writer.Log() << "\nserver log:\n"
             << server.Log();
    }
  }
}

}  // namespace
}  // namespace lookahead::draftsvc
