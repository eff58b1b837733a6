// Request errors that name their field. A FieldError is INVALID_ARGUMENT
// whose message begins with the field's path in the gRPC request
// (v1.GenerateRequest: "max_new_tokens", "sampling.top_p",
// "chat.messages[2].role", "stop[1]", "draft.lookahead_window"), with that
// path attached, so that a front end with other names (the OpenAI one)
// renames the field from structure, never by reading the message. And the
// one wording of a value outside its range, for every front end. Pure
// functions; thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_FIELD_ERROR_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_FIELD_ERROR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lookahead::verifysvc {

// INVALID_ARGUMENT with message `field` + `rest` and `field` attached.
// REQUIRES: `field` is non-empty.
absl::Status FieldError(absl::string_view field, absl::string_view rest);

// The field attached by FieldError, or "" if none (an error about the
// request as a whole, or not a request error).
std::string ErrorField(const absl::Status& status);

// A value outside its range, worded the same for every limit and front end:
//   "<field> must be <range> (<note>); got <got>"
// `range` is e.g. "in [0, 64]", "in [0, inf)" or "0 or in [2, 8]"; `note`
// says what 0 or unset means and which flag sets the bound ("" = no
// parenthesis); `got` is the value as the client sent it.
absl::Status OutOfRange(absl::string_view field, absl::string_view range,
                        absl::string_view note, absl::string_view got);

// OK iff `value` is within [0, engine::kMaxTopLogprobs] (alternatives per
// output token); else OutOfRange naming `field` ("logprobs" in the gRPC
// request; the OpenAI front passes its own name), the one wording of this
// limit.
absl::Status CheckLogprobs(int64_t value, absl::string_view field);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_FIELD_ERROR_H_
