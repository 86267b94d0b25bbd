#include "common/json_output.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace ts {
namespace {

std::string Text(const Json& value) { return DumpJson(value); }

TEST(JsonOutputTest, DoublesRoundTripWithShortestTextAndWholeNumbersAsIntegers) {
  EXPECT_EQ(Text(JsonNumber(0.1)), "0.1");
  EXPECT_EQ(Text(JsonNumber(1e-300)), "1e-300");
  EXPECT_EQ(Text(JsonNumber(-3.0)), "-3");
  EXPECT_EQ(Text(JsonNumber(600.0)), "600");
  EXPECT_EQ(Text(JsonNumber(1e15)), "1000000000000000");
  for (const double value :
       {1.0 / 3.0, 0.9781001210212708, std::nextafter(1.0, 2.0), std::numeric_limits<double>::max(),
        std::numeric_limits<double>::denorm_min(), -2.5e-8, 1e300}) {
    EXPECT_EQ(std::strtod(Text(JsonNumber(value)).c_str(), nullptr), value)
        << Text(JsonNumber(value));
  }
  EXPECT_EQ(Text(JsonNumber(std::nan(""))), "null");
  EXPECT_EQ(Text(JsonNumber(std::numeric_limits<double>::infinity())), "null");
  EXPECT_EQ(Text(JsonNumber(-std::numeric_limits<double>::infinity())), "null");
}

TEST(JsonOutputTest, FloatsPrintTheirOwnShortestDigits) {
  EXPECT_EQ(Text(JsonFloat(0.92f)), "0.92");
  EXPECT_EQ(Text(JsonFloat(0.08f)), "0.08");
  EXPECT_EQ(Text(JsonFloat(1.0f)), "1");
  EXPECT_EQ(Text(JsonFloat(1e-7f)), "1e-07");
  EXPECT_EQ(Text(JsonFloat(std::nanf(""))), "null");
  for (const float value : {1.0f / 3.0f, std::nextafter(1.0f, 0.0f), 0.33333334f, 3.4e38f,
                            std::numeric_limits<float>::denorm_min()}) {
    EXPECT_EQ(std::strtof(Text(JsonFloat(value)).c_str(), nullptr), value)
        << Text(JsonFloat(value));
  }
}

TEST(JsonOutputTest, MillisecondsToTheMicrosecond) {
  EXPECT_EQ(Text(JsonMilliseconds(0.005110021 * 1e3)), "5.11");
  EXPECT_EQ(Text(JsonMilliseconds(12.0)), "12");
  EXPECT_EQ(Text(JsonMilliseconds(0.0004)), "0");
  EXPECT_EQ(Text(JsonMilliseconds(std::numeric_limits<double>::infinity())), "null");
}

TEST(JsonOutputTest, ProbabilitiesAreLabelledObjectsInTheGivenOrder) {
  EXPECT_EQ(Text(ProbabilitiesJson({{"pos", 1, 0.92f}, {"neg", 0, 0.08f}})),
            R"([{"label":"pos","index":1,"probability":0.92},)"
            R"({"label":"neg","index":0,"probability":0.08}])");
  EXPECT_EQ(Text(ProbabilitiesJson({})), "[]");
}

TEST(JsonOutputTest, KeysKeepTheirOrderAndStringsAreEscaped) {
  Json object = {{"z", 1}, {"a", Json::array({true, nullptr})}};
  object["say"] = "\"hi\"\\ a\nb\tc\r\b\f";
  EXPECT_EQ(Text(object), R"({"z":1,"a":[true,null],"say":"\"hi\"\\ a\nb\tc\r\b\f"})");
  EXPECT_EQ(Text(Json(std::string("x\0y\x01\x1f", 5))), R"("x\u0000y\u0001\u001f")");
}

TEST(JsonOutputTest, Utf8PassesAndBytesThatAreNotBecomeReplacementCharacters) {
  EXPECT_EQ(Text(Json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80")),
            "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  // A lone continuation byte, 0xff, an overlong '/': never an exception, still one line.
  EXPECT_EQ(Text(Json("a\x80")), "\"a\xef\xbf\xbd\"");
  EXPECT_EQ(Text(Json("\xff"
                      "b")),
            "\"\xef\xbf\xbd"
            "b\"");
  const std::string overlong = Text(Json("\xc0\xaf"));
  EXPECT_EQ(overlong.find('/'), std::string::npos) << overlong;
  EXPECT_NE(overlong.find("\xef\xbf\xbd"), std::string::npos) << overlong;
}

}  // namespace
}  // namespace ts
