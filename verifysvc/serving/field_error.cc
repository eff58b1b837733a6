#include "verifysvc/serving/field_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "engine/model/token_logprobs.h"

namespace lookahead::verifysvc {
namespace {

constexpr char kFieldPayload[] = "lookahead.verifysvc/field";

}  // namespace

absl::Status FieldError(absl::string_view field, absl::string_view rest) {
  absl::Status status = absl::InvalidArgumentError(absl::StrCat(field, rest));
  status.SetPayload(kFieldPayload, absl::Cord(field));
  return status;
}

std::string ErrorField(const absl::Status& status) {
  auto field = status.GetPayload(kFieldPayload);
  return field.has_value() ? std::string(*field) : "";
}

absl::Status OutOfRange(absl::string_view field, absl::string_view range,
                        absl::string_view note, absl::string_view got) {
  return FieldError(
      field, absl::StrCat(" must be ", range, note.empty() ? "" : " (", note,
                          note.empty() ? "" : ")", "; got ", got));
}

absl::Status CheckLogprobs(int64_t value, absl::string_view field) {
  if (value >= 0 && value <= engine::kMaxTopLogprobs) return absl::OkStatus();
  return OutOfRange(
      field, absl::StrCat("in [0, ", engine::kMaxTopLogprobs, "]"),
      "alternatives per token; unset = no logprobs", absl::StrCat(value));
}

}  // namespace lookahead::verifysvc
