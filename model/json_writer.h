// JsonWriter: builds one compact JSON value (object, array or scalar) into a string, inserting
// commas and escaping strings. Strings are treated as UTF-8: valid sequences pass through,
// control characters and bytes that are not valid UTF-8 are written as \u00XX (the byte's
// Latin-1 reading), so any file name or byte string yields valid JSON. Doubles are written with
// the fewest digits that read back to the same value; NaN and ±inf (not JSON) become null.
// Misuse (a value where a key is due, unbalanced End*) is a programming error and aborts via
// assert in debug builds. Not thread-safe. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ts {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The next value in the current object gets this key.
  JsonWriter& Key(std::string_view key);

  JsonWriter& String(std::string_view value);
  JsonWriter& Int(std::int64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  // Array of numbers.
  JsonWriter& DoubleArray(const std::vector<double>& values);

  const std::string& str() const { return out_; }
  // Whether every Begin* has been ended.
  bool complete() const { return stack_.empty() && !out_.empty(); }

 private:
  enum class Scope { kObject, kArray };
  void BeforeValue();

  std::string out_;
  std::vector<Scope> stack_;
  std::vector<bool> first_;  // per open scope: nothing written yet
  bool key_pending_ = false;
};

// `value` as a quoted JSON string (escaping as JsonWriter::String).
std::string JsonQuote(std::string_view value);
// Shortest decimal text that strtod reads back to `value` ("null" for NaN/inf).
std::string JsonNumber(double value);

}  // namespace ts
