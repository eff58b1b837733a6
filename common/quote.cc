#include "common/quote.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace lookahead {

std::string QuoteInput(absl::string_view input, size_t max_bytes) {
  if (input.size() <= max_bytes) {
    return absl::StrCat("\"", absl::CHexEscape(input), "\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(input.substr(0, max_bytes)),
                      "...\" (", input.size(), " bytes)");
}

}  // namespace lookahead
