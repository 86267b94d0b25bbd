// Conversion of LibTorch exceptions into absl::Status at the model boundary.
#pragma once

#include <exception>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ts {

// Maps an exception thrown by LibTorch (c10::Error and friends) to a Status, keeping the
// message's first line (LibTorch appends a long backtrace to what()).
absl::Status StatusFromException(const std::exception& e, std::string_view context);

// Runs `fn` and converts anything LibTorch throws into an INTERNAL (or INVALID_ARGUMENT for
// c10::Error raised by argument checks) Status prefixed with `context`.
template <typename Fn>
auto CatchTorch(std::string_view context, Fn&& fn) -> absl::StatusOr<decltype(fn())> {
  try {
    return std::forward<Fn>(fn)();
  } catch (const std::exception& e) {
    return StatusFromException(e, context);
  }
}

}  // namespace ts
