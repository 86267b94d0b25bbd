// Conversion of LibTorch exceptions into absl::Status at the model boundary.
#pragma once

#include <exception>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ts {

// Maps an exception thrown by LibTorch (c10::Error and friends) to a Status, keeping the
// message's first line (LibTorch appends a long backtrace to what()).
absl::Status StatusFromException(const std::exception& e, std::string_view context);

// Runs `fn` and converts anything LibTorch throws into an INTERNAL (or INVALID_ARGUMENT for
// c10::Error raised by argument checks) Status prefixed with `context`: an absl::StatusOr of what
// `fn` returns, or an absl::Status when it returns nothing.
template <typename Fn, typename Result = decltype(std::declval<Fn&>()())>
auto CatchTorch(std::string_view context, Fn&& fn)
    -> std::conditional_t<std::is_void_v<Result>, absl::Status, absl::StatusOr<Result>> {
  try {
    if constexpr (std::is_void_v<Result>) {
      std::forward<Fn>(fn)();
      return absl::OkStatus();
    } else {
      return std::forward<Fn>(fn)();
    }
  } catch (const std::exception& e) {
    return StatusFromException(e, context);
  }
}

}  // namespace ts
