// ParseJsonObject: reads one JSON object (one line of a JSON Lines file) into its top-level
// fields. Scalars are decoded — strings with every escape, \uXXXX (surrogate pairs included)
// turned into UTF-8 bytes; numbers kept as written and as a double — while nested arrays and
// objects are fully validated and then skipped (their type is kept, their content is not).
// Strict JSON: no comments, trailing commas, single quotes, raw control characters in strings
// or lone surrogates; bytes ≥ 0x80 inside strings pass through unchanged (documents are bytes).
// Duplicate keys are an error. Torch-free; pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ts {

struct JsonField {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  // kString: the decoded bytes. kNumber: the literal exactly as written (e.g. "-1.5e3").
  std::string text;
  bool bool_value = false;    // kBool
  double number_value = 0.0;  // kNumber

  // The value as an int64 when it is a number written without fraction or exponent and in
  // range; nullopt otherwise (so 1.0 and 1e2 are not integers).
  std::optional<std::int64_t> AsInt64() const;
};

// Top-level fields by key.
using JsonObject = std::map<std::string, JsonField>;

// Readable name of a type ("string", "number", ...) for error messages.
const char* JsonTypeName(JsonField::Type type);

// INVALID_ARGUMENT naming the byte offset and what was expected, for anything that is not a
// single JSON object (surrounding whitespace allowed). Nesting deeper than 256 is refused.
absl::StatusOr<JsonObject> ParseJsonObject(std::string_view text);

}  // namespace ts
