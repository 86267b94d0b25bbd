#include "model/json_reader.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ts {
namespace {

constexpr int kMaxDepth = 256;

// Recursive-descent reader over one buffer; the depth bound keeps the recursion shallow.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<JsonObject> ParseTopLevelObject() {
    SkipWhitespace();
    if (!Consume('{')) return Error("expected '{' at the start of a JSON object");
    JsonObject object;
    SkipWhitespace();
    if (!Consume('}')) {
      while (true) {
        SkipWhitespace();
        if (Peek() != '"') return Error("expected a string key");
        std::string key;
        if (absl::Status s = ParseString(&key); !s.ok()) return s;
        SkipWhitespace();
        if (!Consume(':')) return Error("expected ':' after a key");
        SkipWhitespace();
        JsonField field;
        if (absl::Status s = ParseValue(/*depth=*/1, &field); !s.ok()) return s;
        if (!object.emplace(key, std::move(field)).second) {
          return Error(absl::StrCat("duplicate key \"", key, "\""));
        }
        SkipWhitespace();
        if (Consume(',')) continue;
        if (Consume('}')) break;
        return Error("expected ',' or '}' after a value");
      }
    }
    SkipWhitespace();
    if (pos_ != text_.size()) return Error("unexpected characters after the object");
    return object;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool AtEnd() const { return pos_ >= text_.size(); }
  bool Consume(char c) {
    if (AtEnd() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void SkipWhitespace() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                        text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON at byte ", pos_, ": ", std::string(what)));
  }

  // `out` may be null: the value is then validated and dropped (nested content).
  absl::Status ParseValue(int depth, JsonField* out) {
    if (depth > kMaxDepth) return Error(absl::StrCat("nesting deeper than ", kMaxDepth));
    if (AtEnd()) return Error("expected a value, got the end of the input");
    const char c = Peek();
    if (c == '"') {
      std::string value;
      if (absl::Status s = ParseString(&value); !s.ok()) return s;
      if (out != nullptr) {
        out->type = JsonField::Type::kString;
        out->text = std::move(value);
      }
      return absl::OkStatus();
    }
    if (c == '{' || c == '[') {
      if (out != nullptr) {
        out->type = c == '{' ? JsonField::Type::kObject : JsonField::Type::kArray;
      }
      return SkipContainer(depth);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    for (const auto& [word, type, value] :
         {std::tuple<std::string_view, JsonField::Type, bool>{"true", JsonField::Type::kBool, true},
          {"false", JsonField::Type::kBool, false},
          {"null", JsonField::Type::kNull, false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        if (out != nullptr) {
          out->type = type;
          out->bool_value = value;
        }
        return absl::OkStatus();
      }
    }
    return Error("expected a value (string, number, object, array, true, false or null)");
  }

  absl::Status SkipContainer(int depth) {
    const bool is_object = Peek() == '{';
    const char close = is_object ? '}' : ']';
    ++pos_;
    SkipWhitespace();
    if (Consume(close)) return absl::OkStatus();
    while (true) {
      SkipWhitespace();
      if (is_object) {
        if (Peek() != '"') return Error("expected a string key");
        std::string key;
        if (absl::Status s = ParseString(&key); !s.ok()) return s;
        SkipWhitespace();
        if (!Consume(':')) return Error("expected ':' after a key");
        SkipWhitespace();
      }
      if (absl::Status s = ParseValue(depth + 1, nullptr); !s.ok()) return s;
      SkipWhitespace();
      if (Consume(',')) continue;
      if (Consume(close)) return absl::OkStatus();
      return Error(is_object ? "expected ',' or '}' in an object"
                             : "expected ',' or ']' in an array");
    }
  }

  absl::Status ParseNumber(JsonField* out) {
    const std::size_t start = pos_;
    auto digits = [this] {
      const std::size_t from = pos_;
      while (!AtEnd() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    Consume('-');
    if (Peek() == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return Error("expected a digit in a number");
    }
    if (Consume('.') && digits() == 0) return Error("expected a digit after '.'");
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (!Consume('+')) Consume('-');
      if (digits() == 0) return Error("expected a digit in an exponent");
    }
    const std::string_view literal = text_.substr(start, pos_ - start);
    double value = 0.0;
    // Out-of-range literals (1e999) are valid JSON; SimpleAtod reports them as ±inf.
    if (!absl::SimpleAtod(absl::string_view(literal.data(), literal.size()), &value)) {
      return Error("unreadable number");
    }
    if (out != nullptr) {
      out->type = JsonField::Type::kNumber;
      out->text = std::string(literal);
      out->number_value = value;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::uint32_t> ParseHex4() {
    if (text_.size() - pos_ < 4) return Error("truncated \\u escape");
    std::uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      value <<= 4;
      if (c >= '0' && c <= '9') {
        value |= static_cast<std::uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        value |= static_cast<std::uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        value |= static_cast<std::uint32_t>(c - 'A' + 10);
      } else {
        --pos_;
        return Error("expected 4 hex digits after \\u");
      }
    }
    return value;
  }

  static void AppendUtf8(std::uint32_t code_point, std::string* out) {
    if (code_point < 0x80) {
      out->push_back(static_cast<char>(code_point));
    } else if (code_point < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
      out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
    } else if (code_point < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
      out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (code_point >> 18)));
      out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
    }
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // the opening quote
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return Error("raw control character in a string (must be escaped)");
      }
      if (c != '\\') {
        out->push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (AtEnd()) return Error("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          absl::StatusOr<std::uint32_t> unit = ParseHex4();
          if (!unit.ok()) return unit.status();
          std::uint32_t code_point = *unit;
          if (code_point >= 0xDC00 && code_point <= 0xDFFF) {
            return Error("lone low surrogate in \\u escape");
          }
          if (code_point >= 0xD800 && code_point <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") return Error("high surrogate without a low one");
            pos_ += 2;
            absl::StatusOr<std::uint32_t> low = ParseHex4();
            if (!low.ok()) return low.status();
            if (*low < 0xDC00 || *low > 0xDFFF) return Error("high surrogate without a low one");
            code_point = 0x10000 + ((code_point - 0xD800) << 10) + (*low - 0xDC00);
          }
          AppendUtf8(code_point, out);
          break;
        }
        default:
          --pos_;
          return Error(absl::StrCat("unknown escape \\", std::string(1, e)));
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

std::optional<std::int64_t> JsonField::AsInt64() const {
  if (type != Type::kNumber || text.find_first_of(".eE") != std::string::npos) {
    return std::nullopt;
  }
  std::int64_t value = 0;
  if (!absl::SimpleAtoi(absl::string_view(text), &value)) return std::nullopt;
  return value;
}

const char* JsonTypeName(JsonField::Type type) {
  switch (type) {
    case JsonField::Type::kNull:
      return "null";
    case JsonField::Type::kBool:
      return "boolean";
    case JsonField::Type::kNumber:
      return "number";
    case JsonField::Type::kString:
      return "string";
    case JsonField::Type::kArray:
      return "array";
    case JsonField::Type::kObject:
      return "object";
  }
  return "unknown";
}

absl::StatusOr<JsonObject> ParseJsonObject(std::string_view text) {
  return Parser(text).ParseTopLevelObject();
}

}  // namespace ts
