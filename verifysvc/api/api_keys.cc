#include "verifysvc/api/api_keys.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/quote.h"
#include "proto/namespace_name.h"

namespace lookahead::verifysvc {
namespace {

// Shorter keys could be guessed; `openssl rand -hex 32` gives 64 characters.
constexpr size_t kMinKeyBytes = 16;
// Longer presented keys are refused unread (no stored key is this long).
constexpr size_t kMaxKeyBytes = 1024;

// True iff `presented` == `stored`, in a time that depends only on
// stored.size(): every byte of `stored` is compared, without an early exit.
bool ConstantTimeEquals(absl::string_view presented, absl::string_view stored) {
  const size_t n = presented.size();
  uint32_t diff = static_cast<uint32_t>(n != stored.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    const unsigned char p = n == 0 ? 0 : presented[i % n];
    diff |=
        static_cast<unsigned char>(p ^ static_cast<unsigned char>(stored[i]));
  }
  return diff == 0;
}

struct KeyEntry {
  std::string key;
  KeyGrant grant;
  double rate = 0;  // requests per second; 0 = unlimited
};

// A token bucket of burst max(1, rate), refilled at `rate` per second.
struct Bucket {
  double tokens = 0;
  absl::Time refilled;
};

class ApiKeysImpl final : public ApiKeys {
 public:
  explicit ApiKeysImpl(std::vector<KeyEntry> entries)
      : entries_(std::move(entries)) {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    for (const KeyEntry& e : entries_) {
      buckets_.push_back({Burst(e.rate), now});
    }
  }

  absl::StatusOr<KeyGrant> Authorize(absl::string_view authorization,
                                     absl::Duration* retry_after) override {
    absl::string_view value = absl::StripAsciiWhitespace(authorization);
    if (value.empty()) {
      return absl::UnauthenticatedError(
          "no API key: send the header \"authorization: Bearer <key>\"");
    }
    const size_t space = std::min(value.find(' '), value.size());
    if (!absl::EqualsIgnoreCase(value.substr(0, space), "Bearer")) {
      return absl::UnauthenticatedError(
          "the authorization is not of the Bearer scheme: send "
          "\"authorization: Bearer <key>\"");
    }
    absl::string_view key =
        absl::StripLeadingAsciiWhitespace(value.substr(space));
    if (key.empty() || key.size() > kMaxKeyBytes) {
      return absl::UnauthenticatedError(absl::StrCat(
          "no API key of 1 to ", kMaxKeyBytes,
          " bytes after \"Bearer \": send \"authorization: Bearer <key>\""));
    }
    int match = -1;
    for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
      if (ConstantTimeEquals(key, entries_[i].key)) match = i;
    }
    if (match < 0) return absl::UnauthenticatedError("unknown API key");
    absl::Status admitted = Admit(match, retry_after);
    if (!admitted.ok()) return admitted;
    return entries_[match].grant;
  }

 private:
  static double Burst(double rate) { return rate > 1 ? rate : 1; }

  // OK iff entry `i` has no rate or a token to spend (which it spends).
  absl::Status Admit(int i, absl::Duration* retry_after) {
    const double rate = entries_[i].rate;
    if (rate <= 0) return absl::OkStatus();
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    Bucket& b = buckets_[i];
    b.tokens = std::min(
        Burst(rate), b.tokens + rate * absl::ToDoubleSeconds(now - b.refilled));
    b.refilled = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return absl::OkStatus();
    }
    const absl::Duration wait = absl::Seconds((1 - b.tokens) / rate);
    if (retry_after != nullptr) *retry_after = wait;
    return absl::ResourceExhaustedError(absl::StrCat(
        "the API key of line ", entries_[i].grant.line, " is over its rate of ",
        rate, " requests/s; retry after ",
        absl::FormatDuration(absl::Ceil(wait, absl::Milliseconds(1)))));
  }

  const std::vector<KeyEntry> entries_;
  absl::Mutex mu_;
  std::vector<Bucket> buckets_ ABSL_GUARDED_BY(mu_);  // one per entry
};

absl::Status LineError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--api_keys_file line ", line, ": ", what,
      " (expected \"<key> <namespace> [<requests_per_second>]\")"));
}

// One non-blank line's fields as an entry.
absl::StatusOr<KeyEntry> ParseLine(int line,
                                   const std::vector<absl::string_view>& f) {
  if (f.size() < 2 || f.size() > 3) {
    return LineError(line, absl::StrCat(f.size(), " fields"));
  }
  KeyEntry e;
  e.key = std::string(f[0]);
  e.grant.line = line;
  if (e.key.size() < kMinKeyBytes || e.key.size() > kMaxKeyBytes) {
    return LineError(line, absl::StrCat("the key must have ", kMinKeyBytes,
                                        " to ", kMaxKeyBytes,
                                        " characters (e.g. openssl rand "
                                        "-hex 32)"));
  }
  absl::Status name_ok = v1::ValidateNamespaceName(f[1]);
  if (!name_ok.ok()) {
    return LineError(line, absl::StrCat("namespace: ", name_ok.message()));
  }
  e.grant.name_space = std::string(f[1]);
  if (f.size() == 3) {
    if (!absl::SimpleAtod(f[2], &e.rate) || !std::isfinite(e.rate) ||
        e.rate <= 0) {
      return LineError(line, absl::StrCat("rate ", QuoteInput(f[2]),
                                          " is not a positive number"));
    }
  }
  return e;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("--api_keys_file=", path, ": cannot read"));
  }
  std::vector<KeyEntry> entries;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    absl::string_view content = text;
    content = content.substr(0, content.find('#'));
    std::vector<absl::string_view> fields =
        absl::StrSplit(content, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    absl::StatusOr<KeyEntry> entry = ParseLine(line, fields);
    if (!entry.ok()) return entry.status();
    for (const KeyEntry& other : entries) {
      if (other.key == entry->key) {
        return LineError(
            line, absl::StrCat("the key of line ", other.grant.line, " again"));
      }
    }
    entries.push_back(*std::move(entry));
  }
  if (in.bad()) {
    return absl::NotFoundError(
        absl::StrCat("--api_keys_file=", path, ": read error"));
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--api_keys_file=", path,
        " holds no key: one \"<key> <namespace> [<requests_per_second>]\" "
        "per line"));
  }
  return std::unique_ptr<ApiKeys>(new ApiKeysImpl(std::move(entries)));
}

absl::Status ApplyGrant(const KeyGrant& grant, std::string* name_space) {
  if (name_space->empty()) {
    *name_space = grant.name_space;
    return absl::OkStatus();
  }
  if (*name_space == grant.name_space) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("the API key grants namespace \"", grant.name_space,
                   "\", not the request's namespace ", QuoteInput(*name_space),
                   " (leave the namespace empty to use the key's)"));
}

}  // namespace lookahead::verifysvc
