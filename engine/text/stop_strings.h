// StopStringMatcher: cuts a streamed text at the first occurrence of any of
// a request's stop strings, holding back text that may be the start of one so
// that a client never receives part of a stop string. Thread-compatible.
#ifndef LOOKAHEAD_ENGINE_TEXT_STOP_STRINGS_H_
#define LOOKAHEAD_ENGINE_TEXT_STOP_STRINGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lookahead::engine {

// OK iff every stop string is non-empty valid UTF-8 and there are at most
// `max_count`; otherwise INVALID_ARGUMENT naming the index.
absl::Status ValidateStopStrings(absl::Span<const std::string> stops,
                                 int max_count);

class StopStringMatcher {
 public:
  // REQUIRES: ValidateStopStrings(stops, ...).ok().
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends `text` (whole UTF-8 characters). Returns the text that is now
  // safe to emit: everything before the first stop string if one completed
  // (then stopped() turns true and later Push calls return ""), otherwise
  // everything but the longest tail that is a proper prefix of a stop string.
  std::string Push(absl::string_view text);
  // The held-back tail (no stop string completed); "" once stopped.
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  const std::vector<std::string> stops_;
  std::string held_;  // Text not yet emitted; shorter than the longest stop.
  bool stopped_ = false;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_TEXT_STOP_STRINGS_H_
