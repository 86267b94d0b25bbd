// How the protobuf fuzz targets read their message: in the wire format, as gRPC delivers it, or,
// when the selector's bit 7 is set, in the text format. Both give the same messages; in the text
// form a byte mutation changes a value's digits or a field's name instead of breaking a length
// prefix, so large and boundary values (a width of 4294967295) are reached in seconds rather than
// never. Header-only.
#pragma once

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>

#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.h"

namespace ts::fuzz {

inline constexpr std::uint8_t kTextFormat = 0x80;

// The text parser's complaints are the fuzzer's everyday input: not logged.
class QuietErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int /*line*/, int /*column*/, const std::string& /*message*/) override {}
  void AddWarning(int /*line*/, int /*column*/, const std::string& /*message*/) override {}
};

template <typename Message>
bool ParseMessage(const Input& input, Message* message) {
  // Nor are the wire parser's (a string field that is not UTF-8): the log would drown the run.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  if (input.selector & kTextFormat) {
    QuietErrors errors;
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    parser.AllowPartialMessage(true);
    return parser.ParseFromString(input.bytes, message);
  }
  return message->ParseFromString(input.bytes);
}

}  // namespace ts::fuzz
