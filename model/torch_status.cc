#include "model/torch_status.h"

#include <c10/util/Exception.h>

#include <new>
#include <string>

#include "absl/strings/str_cat.h"

namespace ts {

absl::Status StatusFromException(const std::exception& e, std::string_view context) {
  std::string message;
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    message = c10_error->msg();
  } else {
    message = e.what();
  }
  // Keep the first line only: the rest is LibTorch's backtrace.
  if (const auto eol = message.find('\n'); eol != std::string::npos) message.resize(eol);
  const bool argument_error = dynamic_cast<const c10::IndexError*>(&e) != nullptr ||
                              dynamic_cast<const c10::ValueError*>(&e) != nullptr ||
                              dynamic_cast<const c10::TypeError*>(&e) != nullptr;
  // Allocation failures (the CPU allocator's "can't allocate memory", CUDA's "out of memory",
  // std::bad_alloc) are RESOURCE_EXHAUSTED and say "out of memory" whatever raised them.
  const bool out_of_memory = dynamic_cast<const std::bad_alloc*>(&e) != nullptr ||
                             message.find("can't allocate memory") != std::string::npos ||
                             message.find("out of memory") != std::string::npos;
  if (out_of_memory) {
    return absl::ResourceExhaustedError(
        absl::StrCat(std::string(context), ": out of memory: ", message));
  }
  const std::string text = absl::StrCat(std::string(context), ": ", message);
  return argument_error ? absl::InvalidArgumentError(text) : absl::InternalError(text);
}

}  // namespace ts
