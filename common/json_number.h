// JsonWriter::Double writes the fewest significant digits, which turns integral values into
// exponent form (50 → "5e+01", 600 → "6e+02"): valid JSON, but awkward for people and for
// tools like jq's integer checks. WriteNumber writes integral doubles as integers instead.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "model/json_writer.h"

namespace ts {

inline JsonWriter& WriteNumber(JsonWriter& json, double value) {
  if (std::isfinite(value) && std::trunc(value) == value && std::fabs(value) < 1e15) {
    return json.Int(static_cast<std::int64_t>(value));
  }
  return json.Double(value);
}

// A float (e.g. a probability) with the fewest digits that read back to the same float, so
// 0.92f prints as 0.92 rather than its double expansion 0.9200000166893005.
inline JsonWriter& WriteFloat(JsonWriter& json, float value) {
  if (!std::isfinite(value)) return json.Null();
  char buffer[32];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, static_cast<double>(value));
    if (std::strtof(buffer, nullptr) == value) break;
  }
  return WriteNumber(json, std::strtod(buffer, nullptr));
}

// A duration in milliseconds, to the microsecond: seconds × 1e3 carries binary noise
// (5.110021000000001) that no reader wants.
inline JsonWriter& WriteMilliseconds(JsonWriter& json, double milliseconds) {
  if (!std::isfinite(milliseconds)) return json.Null();
  return WriteNumber(json, std::round(milliseconds * 1e3) / 1e3);
}

}  // namespace ts
