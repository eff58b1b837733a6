// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr.
// Debian's abseil (20220623) predates absl's own macros. Header-only; safe
// anywhere.
#ifndef LOOKAHEAD_COMMON_STATUS_MACROS_H_
#define LOOKAHEAD_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// iff it is not OK.
#define RETURN_IF_ERROR(expr)                                  \
  do {                                                         \
    ::absl::Status lookahead_status_ = (expr);                 \
    if (!lookahead_status_.ok()) return lookahead_status_;     \
  } while (0)

#define LOOKAHEAD_CONCAT_INNER_(a, b) a##b
#define LOOKAHEAD_CONCAT_(a, b) LOOKAHEAD_CONCAT_INNER_(a, b)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>);
// returns its status iff not OK, else moves the value into `lhs`, which may
// be a declaration (`auto x`) or an existing variable.
#define ASSIGN_OR_RETURN(lhs, expr) \
  LOOKAHEAD_ASSIGN_OR_RETURN_IMPL_( \
      LOOKAHEAD_CONCAT_(lookahead_statusor_, __LINE__), lhs, expr)

#define LOOKAHEAD_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                     \
  if (!statusor.ok()) return std::move(statusor).status();    \
  lhs = std::move(statusor).value()

#endif  // LOOKAHEAD_COMMON_STATUS_MACROS_H_
