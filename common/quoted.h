// Client input quoted in an error message, capped (model, server and tools use it): a
// 10,000-character model name must not become a 10,000-character status message (it would overflow
// the client's metadata limit).
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ts {

inline constexpr std::size_t kQuotedInputMaxChars = 200;

// `value`, or for longer input its first `max_chars` bytes and "... (N bytes)". A cut never
// splits a UTF-8 sequence.
inline std::string Capped(absl::string_view value, std::size_t max_chars = kQuotedInputMaxChars) {
  if (value.size() <= max_chars) return std::string(value);
  std::size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(value.substr(0, cut), "... (", value.size(), " bytes)");
}

// Capped(value) in double quotes.
inline std::string Quoted(absl::string_view value, std::size_t max_chars = kQuotedInputMaxChars) {
  return absl::StrCat("\"", Capped(value, max_chars), "\"");
}

}  // namespace ts
