#include "model/json_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ts {
namespace {

TEST(JsonReaderTest, ReadsScalarFields) {
  absl::StatusOr<JsonObject> object = ParseJsonObject(
      R"( {"text": "hi", "n": -12, "x": 1.5e2, "t": true, "f": false, "z": null} )");
  ASSERT_TRUE(object.ok()) << object.status();
  ASSERT_EQ(object->size(), 6u);
  EXPECT_EQ(object->at("text").type, JsonField::Type::kString);
  EXPECT_EQ(object->at("text").text, "hi");
  EXPECT_EQ(object->at("n").AsInt64(), -12);
  EXPECT_DOUBLE_EQ(object->at("x").number_value, 150.0);
  EXPECT_EQ(object->at("x").text, "1.5e2");
  EXPECT_FALSE(object->at("x").AsInt64().has_value());
  EXPECT_EQ(object->at("t").type, JsonField::Type::kBool);
  EXPECT_TRUE(object->at("t").bool_value);
  EXPECT_FALSE(object->at("f").bool_value);
  EXPECT_EQ(object->at("z").type, JsonField::Type::kNull);
}

TEST(JsonReaderTest, IntegersOnlyWithoutFractionOrExponentAndInRange) {
  absl::StatusOr<JsonObject> object =
      ParseJsonObject(R"({"a": 1.0, "b": 1e2, "c": 9223372036854775807, "d": 9223372036854775808,
                          "e": 0, "f": "3"})");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_FALSE(object->at("a").AsInt64().has_value());
  EXPECT_FALSE(object->at("b").AsInt64().has_value());
  EXPECT_EQ(object->at("c").AsInt64(), INT64_MAX);
  EXPECT_FALSE(object->at("d").AsInt64().has_value());
  EXPECT_EQ(object->at("e").AsInt64(), 0);
  EXPECT_FALSE(object->at("f").AsInt64().has_value());  // a string, not a number
}

TEST(JsonReaderTest, DecodesEscapesToUtf8Bytes) {
  absl::StatusOr<JsonObject> object =
      ParseJsonObject(R"({"s": "a\"b\\c\/d\b\f\n\r\t\u0041\u00e9\u20ac\ud83d\ude00\u0000end"})");
  ASSERT_TRUE(object.ok()) << object.status();
  const std::string expected =
      std::string("a\"b\\c/d\b\f\n\r\tA\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80") +
      std::string(1, '\0') + "end";
  EXPECT_EQ(object->at("s").text, expected);
}

TEST(JsonReaderTest, RawUtf8AndHighBytesPassThrough) {
  const std::string line = "{\"s\": \"caf\xC3\xA9 \xFF\"}";
  absl::StatusOr<JsonObject> object = ParseJsonObject(line);
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->at("s").text, "caf\xC3\xA9 \xFF");
}

TEST(JsonReaderTest, SkipsNestedValuesButKeepsTheirType) {
  absl::StatusOr<JsonObject> object = ParseJsonObject(
      R"({"meta": {"a": [1, {"b": "]}"}, [], {}], "c": null}, "list": [true, "x\"]"],
          "label": "pos"})");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->at("meta").type, JsonField::Type::kObject);
  EXPECT_EQ(object->at("list").type, JsonField::Type::kArray);
  EXPECT_EQ(object->at("label").text, "pos");
}

TEST(JsonReaderTest, EmptyObject) {
  absl::StatusOr<JsonObject> object = ParseJsonObject(" {} ");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_TRUE(object->empty());
}

TEST(JsonReaderTest, RejectsMalformedInputWithOffset) {
  for (const char* bad : {
           "",                        // nothing
           "[1, 2]",                  // not an object
           "{\"a\": 1,}",             // trailing comma
           "{\"a\" 1}",               // missing colon
           "{a: 1}",                  // unquoted key
           "{'a': 1}",                // single quotes
           "{\"a\": 01}",             // leading zero
           "{\"a\": 1.}",             // fraction without digits
           "{\"a\": -}",              // sign only
           "{\"a\": 1e}",             // exponent without digits
           "{\"a\": tru}",            // bad literal
           "{\"a\": \"x}",            // unterminated string
           "{\"a\": \"\\x\"}",        // unknown escape
           "{\"a\": \"\\u12G4\"}",    // bad hex
           "{\"a\": \"\\ud83d\"}",    // lone high surrogate
           "{\"a\": \"\\ude00\"}",    // lone low surrogate
           "{\"a\": \"tab\there\"}",  // raw control character
           "{\"a\": [1, 2}",          // mismatched bracket
           "{\"a\": {\"b\": 1]}",     // mismatched brace
           "{\"a\": 1} x",            // trailing garbage
           "{\"a\": 1, \"a\": 2}",    // duplicate key
           "{\"a\": 1",               // unterminated object
       }) {
    absl::StatusOr<JsonObject> object = ParseJsonObject(bad);
    EXPECT_EQ(object.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(object.status().message().find("at byte"), std::string::npos) << bad;
  }
}

TEST(JsonReaderTest, BoundsNestingDepth) {
  const std::string deep = "{\"a\": " + std::string(300, '[') + std::string(300, ']') + "}";
  EXPECT_EQ(ParseJsonObject(deep).status().code(), absl::StatusCode::kInvalidArgument);
  const std::string ok = "{\"a\": " + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_TRUE(ParseJsonObject(ok).ok());
}

}  // namespace
}  // namespace ts
