// Early-return macros for absl::Status and absl::StatusOr, the way gRPC, TF Serving and Abseil's
// own internal code spell them.
//
//   TS_RETURN_IF_ERROR(WriteHeader(out));          // returns the status when it is not OK
//   TS_ASSIGN_OR_RETURN(auto bytes, ReadFile(p));  // declares `bytes` from the value, or returns
//   TS_ASSIGN_OR_RETURN(config.port, ParsePort(text));  // assigns to an existing lvalue
//
// The returned status is the callee's own; wrap it first (Prefixed) where the caller adds context.
// Both macros work in functions that return absl::Status or any absl::StatusOr<T>.
#ifndef TS_COMMON_STATUS_MACROS_H_
#define TS_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ts {

// `status` with `prefix` before its message (OK stays OK).
inline absl::Status Prefixed(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// `value`, or its error with `prefix` before the message.
template <typename T>
absl::StatusOr<T> Prefixed(absl::StatusOr<T> value, absl::string_view prefix) {
  if (!value.ok()) return Prefixed(value.status(), prefix);
  return value;
}

}  // namespace ts

#define TS_STATUS_MACROS_CONCAT_INNER(a, b) a##b
#define TS_STATUS_MACROS_CONCAT(a, b) TS_STATUS_MACROS_CONCAT_INNER(a, b)

#define TS_RETURN_IF_ERROR(expr)                                       \
  do {                                                                 \
    ::absl::Status ts_status_macros_status = (expr);                   \
    if (!ts_status_macros_status.ok()) return ts_status_macros_status; \
  } while (false)

// `lhs` may be a declaration ("auto x"), so neither it nor the generated name can take
// parentheses.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define TS_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr)     \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)
// NOLINTEND(bugprone-macro-parentheses)

#define TS_ASSIGN_OR_RETURN(lhs, rexpr) \
  TS_ASSIGN_OR_RETURN_IMPL(TS_STATUS_MACROS_CONCAT(ts_status_macros_or_, __LINE__), lhs, rexpr)

#endif  // TS_COMMON_STATUS_MACROS_H_
