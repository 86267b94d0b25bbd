#include "model/json_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace ts {
namespace {

TEST(JsonWriterTest, NestedObjectsAndArraysGetCommas) {
  JsonWriter json;
  json.BeginObject()
      .Key("file")
      .String("a.txt")
      .Key("logits")
      .DoubleArray({1.5, -2.0})
      .Key("nested")
      .BeginArray()
      .Int(1)
      .BeginObject()
      .Key("x")
      .Null()
      .EndObject()
      .Bool(false)
      .EndArray()
      .Key("count")
      .Int(-42)
      .EndObject();
  EXPECT_TRUE(json.complete());
  EXPECT_EQ(json.str(),
            R"({"file":"a.txt","logits":[1.5,-2],"nested":[1,{"x":null},false],"count":-42})");
}

TEST(JsonWriterTest, EmptyContainers) {
  JsonWriter json;
  json.BeginObject()
      .Key("a")
      .BeginArray()
      .EndArray()
      .Key("o")
      .BeginObject()
      .EndObject()
      .EndObject();
  EXPECT_EQ(json.str(), R"({"a":[],"o":{}})");
}

TEST(JsonWriterTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonQuote("say \"hi\"\\"), R"("say \"hi\"\\")");
  EXPECT_EQ(JsonQuote("a\nb\tc\r\b\f"), R"("a\nb\tc\r\b\f")");
  EXPECT_EQ(JsonQuote(std::string("x\0y\x01\x1f\x7f", 6)), R"("x\u0000y\u0001\u001f\u007f")");
}

TEST(JsonWriterTest, ValidUtf8PassesAndInvalidBytesAreEscaped) {
  EXPECT_EQ(JsonQuote("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  // Lone continuation byte, 0xff, truncated sequence, overlong '/', UTF-16 surrogate.
  EXPECT_EQ(JsonQuote("\x80"), R"("\u0080")");
  EXPECT_EQ(JsonQuote("a\xff"), R"("a\u00ff")");
  EXPECT_EQ(JsonQuote("\xe2\x82"), R"("\u00e2\u0082")");
  EXPECT_EQ(JsonQuote("\xc0\xaf"), R"("\u00c0\u00af")");
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"), R"("\u00ed\u00a0\u0080")");
  EXPECT_EQ(JsonQuote("\xf4\x90\x80\x80"), R"("\u00f4\u0090\u0080\u0080")");
}

TEST(JsonWriterTest, NumbersRoundTripWithShortestText) {
  EXPECT_EQ(JsonNumber(0.1), "0.1");
  EXPECT_EQ(JsonNumber(1e-300), "1e-300");
  EXPECT_EQ(JsonNumber(-3.0), "-3");
  EXPECT_EQ(JsonNumber(600.0), "600");
  EXPECT_EQ(JsonNumber(1e15), "1000000000000000");
  for (const double value :
       {1.0 / 3.0, 0.9781001210212708, std::nextafter(1.0, 2.0), std::numeric_limits<double>::max(),
        std::numeric_limits<double>::denorm_min(), -2.5e-8}) {
    EXPECT_EQ(std::strtod(JsonNumber(value).c_str(), nullptr), value) << JsonNumber(value);
  }
  EXPECT_EQ(JsonNumber(std::nan("")), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "null");
}

}  // namespace
}  // namespace ts
