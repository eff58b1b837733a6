// The one seam where LibTorch exceptions become absl::Status.
//
// LibTorch reports errors by throwing c10::Error (and occasionally
// std::exception). Every call into torch from the verifier goes through
// TorchStatus/TorchStatusOr so that no exception crosses a public API.
// Stateless; safe to call from any thread.
#ifndef LOOKAHEAD_ENGINE_MODEL_TORCH_STATUS_H_
#define LOOKAHEAD_ENGINE_MODEL_TORCH_STATUS_H_

#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace lookahead::engine {
namespace torch_status_internal {

// c10::Error's what() carries a long C++ backtrace; keep its first line.
inline std::string FirstLine(const char* what) {
  std::string s(what == nullptr ? "" : what);
  const size_t newline = s.find('\n');
  if (newline != std::string::npos) s.resize(newline);
  return s;
}

}  // namespace torch_status_internal

// Runs `fn` (returning absl::Status or void). Returns fn's status, or
// INTERNAL naming `context` iff fn threw. c10 index/value errors become
// INVALID_ARGUMENT; allocation failures become RESOURCE_EXHAUSTED.
template <typename Fn>
absl::Status TorchStatus(absl::string_view context, Fn&& fn) {
  try {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn>>) {
      std::forward<Fn>(fn)();
      return absl::OkStatus();
    } else {
      return std::forward<Fn>(fn)();
    }
  } catch (const c10::IndexError& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": torch index error: ",
        torch_status_internal::FirstLine(e.what_without_backtrace())));
  } catch (const c10::ValueError& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": torch value error: ",
        torch_status_internal::FirstLine(e.what_without_backtrace())));
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        context, ": torch out of memory: ",
        torch_status_internal::FirstLine(e.what_without_backtrace())));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(
        context, ": torch error: ",
        torch_status_internal::FirstLine(e.what_without_backtrace())));
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(context, ": out of memory: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  }
}

// Runs `fn` returning T or absl::StatusOr<T>; as TorchStatus, but passes the
// value through.
template <typename T, typename Fn>
absl::StatusOr<T> TorchStatusOr(absl::string_view context, Fn&& fn) {
  absl::StatusOr<T> result = absl::InternalError("unset");
  absl::Status status = TorchStatus(context, [&]() -> absl::Status {
    result = std::forward<Fn>(fn)();
    return result.status();
  });
  if (!status.ok()) return status;
  return result;
}

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_TORCH_STATUS_H_
