#include "verifysvc/drafts/suffix_repeat.h"

namespace lookahead::verifysvc {
namespace {

constexpr int kBits = 21;
constexpr uint64_t kIdMask = (uint64_t{1} << kBits) - 1;
constexpr uint64_t kWindowMask =
    (uint64_t{1} << (kBits * SuffixRepeat::kTokens)) - 1;

}  // namespace

void SuffixRepeat::Append(absl::Span<const int32_t> tokens) {
  for (const int32_t token : tokens) {
    const bool packable = token >= 0 && static_cast<uint64_t>(token) <= kIdMask;
    window_ = ((window_ << kBits) | (packable ? uint64_t(token) : 0)) &
              kWindowMask;
    ++length_;
    // The last kTokens appends, this one included, must be packable.
    poisoned_ = packable ? (poisoned_ > 0 ? poisoned_ - 1 : 0) : kTokens;
    if (length_ < kTokens || poisoned_ > 0) {
      repeats_ = false;
      continue;
    }
    repeats_ = !seen_.insert(window_).second;
  }
}

}  // namespace lookahead::verifysvc
