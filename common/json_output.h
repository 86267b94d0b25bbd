// How the project writes JSON for people and tools to read (tsmodel, tsctl, the server's HTTP
// route, the benchmarks): nlohmann::ordered_json values, so keys keep the order they were
// added in, the number forms below, and one schema for class probabilities. Torch-free and
// proto-free (target ts_json), so the model tools and the client share it. Pure functions,
// thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ts {

using Json = nlohmann::ordered_json;

// A double as people read it: whole numbers that a double holds exactly as integers ("600",
// not "600.0"), others with the fewest digits that read back to the same double; NaN and ±inf
// (not JSON) as null.
Json JsonNumber(double value);
// A float (e.g. a probability) with the fewest digits that read back to the same float, so
// 0.92f is 0.92 rather than its double expansion 0.9200000166893005; whole numbers and
// non-finite values as JsonNumber.
Json JsonFloat(float value);
// A duration in milliseconds, to the microsecond: seconds × 1e3 carries binary noise
// (5.110021000000001) that no reader wants.
Json JsonMilliseconds(double milliseconds);

// One class of a prediction.
struct ClassProbability {
  std::string_view label;
  std::int64_t index = 0;
  float probability = 0;
};
// The probabilities of a prediction, as tsmodel predict, tsctl classify --json and the HTTP
// route print them, in the order given:
//   [{"label":"neg","index":0,"probability":0.08},{"label":"pos","index":1,"probability":0.92}]
// Each probability is a float, written as JsonFloat.
Json ProbabilitiesJson(const std::vector<ClassProbability>& probabilities);

// `value` as compact one-line text. Strings are UTF-8: control characters are escaped, and a
// byte that is not valid UTF-8 (a file name in another encoding) is written as U+FFFD instead
// of failing.
std::string DumpJson(const Json& value);

}  // namespace ts
