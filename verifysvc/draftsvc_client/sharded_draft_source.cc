#include "verifysvc/draftsvc_client/sharded_draft_source.h"

#include <future>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/namespace_name.h"
#include "verifysvc/draftsvc_client/draftsvc_source.h"

namespace lookahead::verifysvc {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

uint64_t Fnv1a(uint64_t hash, absl::string_view bytes) {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= kFnvPrime;
  }
  return hash;
}

// splitmix64's finalizer: FNV's high bits barely depend on the last bytes,
// and rendezvous compares whole 64-bit scores.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseDraftsvcAddresses(
    absl::string_view flag) {
  std::vector<std::string> addresses;
  if (absl::StripAsciiWhitespace(flag).empty()) return addresses;
  std::set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(flag, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--draftsvc=\"", flag,
          "\" has an empty address; list host:port of each draftsvc shard, "
          "comma-separated, without empty entries"));
    }
    if (!seen.insert(std::string(entry)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--draftsvc lists \"", entry,
                       "\" twice; each shard once (a repeated address would "
                       "not add a shard)"));
    }
    addresses.emplace_back(entry);
  }
  if (static_cast<int>(addresses.size()) > kMaxDraftShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("--draftsvc lists ", addresses.size(), " shards; at most ",
                     kMaxDraftShards));
  }
  return addresses;
}

uint64_t RendezvousScore(absl::string_view address,
                         absl::string_view name_space) {
  if (name_space.empty()) name_space = v1::kDefaultNamespace;
  uint64_t hash = Fnv1a(kFnvOffset, address);
  hash = Fnv1a(hash, absl::string_view("\0", 1));
  return Mix(Fnv1a(hash, name_space));
}

int RendezvousShard(absl::Span<const std::string> addresses,
                    absl::string_view name_space) {
  int best = 0;
  uint64_t best_score = RendezvousScore(addresses[0], name_space);
  for (int i = 1; i < static_cast<int>(addresses.size()); ++i) {
    const uint64_t score = RendezvousScore(addresses[i], name_space);
    if (score > best_score ||
        (score == best_score && addresses[i] < addresses[best])) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

absl::StatusOr<std::unique_ptr<ShardedDraftSource>> ShardedDraftSource::Create(
    std::vector<Shard> shards) {
  if (shards.empty() || static_cast<int>(shards.size()) > kMaxDraftShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardedDraftSource needs 1..", kMaxDraftShards,
                     " shards, got ", shards.size()));
  }
  std::set<std::string> seen;
  for (const Shard& shard : shards) {
    if (shard.source == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft shard \"", shard.address, "\" has no source"));
    }
    if (!seen.insert(shard.address).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft shard address \"", shard.address, "\" is listed twice"));
    }
  }
  return std::unique_ptr<ShardedDraftSource>(
      new ShardedDraftSource(std::move(shards)));
}

namespace {

std::vector<std::string> AddressesOf(
    const std::vector<ShardedDraftSource::Shard>& shards) {
  std::vector<std::string> addresses;
  for (const auto& shard : shards) addresses.push_back(shard.address);
  return addresses;
}

}  // namespace

ShardedDraftSource::ShardedDraftSource(std::vector<Shard> shards)
    : shards_(std::move(shards)), addresses_(AddressesOf(shards_)) {}

int ShardedDraftSource::ShardOf(absl::string_view name_space) const {
  return RendezvousShard(addresses_, name_space);
}

std::string ShardedDraftSource::name() const {
  return shards_[0].source->name();
}

const ShardedDraftSource::Route* ShardedDraftSource::Find(
    int64_t handle) const {
  auto it = routes_.find(handle);
  return it == routes_.end() ? nullptr : &it->second;
}

int64_t ShardedDraftSource::Open(const DraftPolicy& policy,
                                 absl::Span<const int32_t> prompt) {
  const int shard = ShardOf(policy.name_space);
  DraftPolicy asked = policy;
  if ((asked.sources & in_process_) != 0) {
    asked.sources &= ~in_process_;
    if (asked.sources == 0) return 0;  // served in process alone
  }
  const int64_t inner = shards_[shard].source->Open(asked, prompt);
  if (inner == 0) return 0;
  const int64_t handle = next_handle_++;
  routes_[handle] = Route{shard, inner};
  return handle;
}

void ShardedDraftSource::Observe(int64_t handle,
                                 absl::Span<const int32_t> tokens) {
  if (const Route* r = Find(handle)) {
    shards_[r->shard].source->Observe(r->inner, tokens);
  }
}

bool ShardedDraftSource::WantsPredictions(int64_t handle) const {
  const Route* r = Find(handle);
  return r != nullptr && shards_[r->shard].source->WantsPredictions(r->inner);
}

void ShardedDraftSource::ObserveVerified(
    int64_t handle, const VerifiedPredictions& predictions) {
  if (const Route* r = Find(handle)) {
    shards_[r->shard].source->ObserveVerified(r->inner, predictions);
  }
}

void ShardedDraftSource::ObserveNgrams(
    int64_t handle, absl::Span<const std::vector<int32_t>> ngrams) {
  if (const Route* r = Find(handle)) {
    shards_[r->shard].source->ObserveNgrams(r->inner, ngrams);
  }
}

absl::Status ShardedDraftSource::Failure(int64_t handle) const {
  const Route* r = Find(handle);
  return r == nullptr ? absl::OkStatus()
                      : shards_[r->shard].source->Failure(r->inner);
}

bool ShardedDraftSource::OpenAnswered(int64_t handle) const {
  const Route* r = Find(handle);
  return r == nullptr || shards_[r->shard].source->OpenAnswered(r->inner);
}

void ShardedDraftSource::WaitOpened(int64_t handle, absl::Time deadline) const {
  if (const Route* r = Find(handle)) {
    shards_[r->shard].source->WaitOpened(r->inner, deadline);
  }
}

std::vector<engine::DraftTree> ShardedDraftSource::Propose(
    absl::Span<const DraftAsk> asks, bool* called) {
  *called = false;
  std::vector<engine::DraftTree> trees(asks.size());
  // Per shard: its asks (with its own handles) and their places in `asks`.
  struct Part {
    std::vector<DraftAsk> asks;
    std::vector<size_t> where;
    std::vector<engine::DraftTree> trees;
    bool called = false;
  };
  std::vector<Part> parts(shards_.size());
  for (size_t i = 0; i < asks.size(); ++i) {
    const Route* r = Find(asks[i].handle);
    if (r == nullptr) continue;
    DraftAsk ask = asks[i];
    ask.handle = r->inner;
    // A request that names no sources opened draftsvc's defaults, which
    // may hold a source served here too: draftsvc must not also run it.
    ask.withheld |= in_process_;
    parts[r->shard].asks.push_back(ask);
    parts[r->shard].where.push_back(i);
  }
  auto run = [this, &parts](size_t shard) {
    Part& part = parts[shard];
    part.trees = shards_[shard].source->Propose(part.asks, &part.called);
  };
  std::vector<size_t> busy;
  for (size_t s = 0; s < parts.size(); ++s) {
    if (!parts[s].asks.empty()) busy.push_back(s);
  }
  // Every shard but the last on its own thread, the last on this one (and
  // any whose thread could not start). Each shard is still used by one
  // thread at a time.
  std::vector<std::future<void>> others;
  for (size_t k = 0; k + 1 < busy.size(); ++k) {
    try {
      others.push_back(std::async(std::launch::async, run, busy[k]));
    } catch (const std::system_error&) {
      run(busy[k]);  // no thread to be had: ask it here, in turn
    }
  }
  if (!busy.empty()) run(busy.back());
  for (std::future<void>& other : others) other.get();
  for (Part& part : parts) {
    *called = *called || part.called;
    part.trees.resize(part.asks.size());
    for (size_t k = 0; k < part.where.size(); ++k) {
      trees[part.where[k]] = std::move(part.trees[k]);
    }
  }
  return trees;
}

void ShardedDraftSource::Close(int64_t handle) {
  auto it = routes_.find(handle);
  if (it == routes_.end()) return;
  shards_[it->second.shard].source->Close(it->second.inner);
  routes_.erase(it);
}

DraftCost ShardedDraftSource::cost() const {
  // Shards run the same draftsvc build: shard 0's retrieval cost stands for
  // all, but each measures its own assistant.
  DraftCost cost = shards_[0].source->cost();
  for (size_t i = 1; i < shards_.size(); ++i) {
    cost.assistant_seconds_per_token =
        CheaperAssistant(cost.assistant_seconds_per_token,
                         shards_[i].source->cost().assistant_seconds_per_token);
  }
  return cost;
}

std::vector<double> ShardedDraftSource::TakeCallSeconds() {
  std::vector<double> seconds;
  for (const Shard& shard : shards_) {  // the sources are not const
    std::vector<double> s = shard.source->TakeCallSeconds();
    seconds.insert(seconds.end(), s.begin(), s.end());
  }
  return seconds;
}

DraftSourceStats ShardedDraftSource::Stats() const {
  DraftSourceStats total;
  for (const Shard& shard : shards_) {
    const DraftSourceStats s = shard.source->Stats();
    total.available = total.available && s.available;
    total.failures += s.failures;
    total.reopened += s.reopened;
    total.open_sessions += s.open_sessions;
  }
  return total;
}

std::vector<ShardedDraftSource::ShardHealth> ShardedDraftSource::ShardStats()
    const {
  std::vector<ShardHealth> health;
  for (const Shard& shard : shards_) {
    health.push_back({shard.address, shard.source->Stats()});
  }
  return health;
}

absl::StatusOr<std::unique_ptr<ShardedDraftSource>> ConnectDraftsvcShards(
    const std::vector<std::string>& addresses, int32_t vocab_size,
    const DraftClientOptions& client_options,
    const DraftSessionsOptions& session_options) {
  if (addresses.empty()) return nullptr;
  std::vector<ShardedDraftSource::Shard> shards;
  for (const std::string& address : addresses) {
    shards.push_back(
        {address, DraftsvcSource::Connect(address, vocab_size, client_options,
                                          session_options)});
  }
  return ShardedDraftSource::Create(std::move(shards));
}

absl::Status AddDraftShardMetrics(metrics::Registry* registry,
                                  const ShardedDraftSource* source) {
  absl::Status added = registry->AddGaugeCallback(
      "lookahead_draft_sessions_open",
      "draftsvc sessions this verifier holds open (all shards).",
      [source] { return double(source->Stats().open_sessions); });
  if (!added.ok()) return added;
  return registry->AddLabeledGaugeCallback(
      "lookahead_draftsvc_shard_up",
      "1 if this verifier's last call to the draftsvc shard succeeded (or "
      "none was made), else 0: its namespaces decode without drafts.",
      {"shard"}, [source] {
        std::vector<metrics::LabeledValue> up;
        for (const ShardedDraftSource::ShardHealth& shard :
             source->ShardStats()) {
          up.push_back({{shard.address}, shard.stats.available ? 1.0 : 0.0});
        }
        return up;
      });
}

}  // namespace lookahead::verifysvc
