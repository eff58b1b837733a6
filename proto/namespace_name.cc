#include "proto/namespace_name.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace lookahead::v1 {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

}  // namespace

absl::Status ValidateNamespaceName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNamespaceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("namespace is ", name.size(), " bytes; it must be 1..",
                     kMaxNamespaceBytes, " bytes"));
  }
  for (char c : name) {
    if (!IsNameChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("namespace \"", absl::CHexEscape(name),
                       "\" has a character outside [A-Za-z0-9_.-]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lookahead::v1
