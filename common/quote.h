// Quoting client input inside error messages. An error names what the
// client sent so they can find it, but never echoes it whole: a 1 MB
// session id would overflow gRPC's 16 KiB metadata limit and the client
// would get "Stream removed" instead of the reason, and raw bytes (invalid
// UTF-8, control characters) would reach logs and headers.
#ifndef LOOKAHEAD_COMMON_QUOTE_H_
#define LOOKAHEAD_COMMON_QUOTE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace lookahead {

// Most bytes of client input an error message quotes.
inline constexpr size_t kQuotedInputBytes = 64;

// Returns `input` as a C-escaped, double-quoted string of at most
// `max_bytes` of its bytes; when longer, the quote ends in "..." and is
// followed by the whole length, e.g. "abc..." (100000 bytes). The result
// is printable ASCII whatever the input.
std::string QuoteInput(absl::string_view input,
                       size_t max_bytes = kQuotedInputBytes);

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_QUOTE_H_
