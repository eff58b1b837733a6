#include "engine/text/stop_strings.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/text/text_stream.h"

namespace lookahead::engine {

absl::Status ValidateStopStrings(absl::Span<const std::string> stops,
                                 int max_count) {
  if (static_cast<int>(stops.size()) > max_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stop has ", stops.size(), " strings; at most ", max_count));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i, "] is empty; remove it"));
    }
    if (SanitizeUtf8(stops[i]) != stops[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i, "] is not valid UTF-8"));
    }
  }
  return absl::OkStatus();
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops)
    : stops_(std::move(stops)) {}

std::string StopStringMatcher::Push(absl::string_view text) {
  if (stopped_) return "";
  held_.append(text.data(), text.size());
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    first = std::min(first, held_.find(stop));
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that could still grow into a stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (absl::string_view(held_).substr(held_.size() - len) ==
          absl::string_view(stop).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace lookahead::engine
