#include "api/v2_raw.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ts {
namespace {

void AppendLe32(std::uint32_t value, std::string* out) {
  for (int b = 0; b < 4; ++b) out->push_back(static_cast<char>((value >> (8 * b)) & 0xff));
}

std::uint32_t ReadLe32(const std::string& raw, std::size_t at) {
  std::uint32_t value = 0;
  for (int b = 0; b < 4; ++b) {
    value |= static_cast<std::uint32_t>(static_cast<unsigned char>(raw[at + b])) << (8 * b);
  }
  return value;
}

}  // namespace

std::string EncodeRawFp32(const std::vector<float>& values) {
  std::string raw;
  raw.reserve(values.size() * 4);
  for (const float v : values) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    AppendLe32(bits, &raw);
  }
  return raw;
}

std::string EncodeRawBytes(const std::vector<std::string>& elements) {
  std::string raw;
  for (const std::string& element : elements) {
    AppendLe32(static_cast<std::uint32_t>(element.size()), &raw);
    raw.append(element);
  }
  return raw;
}

absl::Status DecodeRawFp32(const std::string& raw, std::vector<float>* out) {
  if (raw.size() % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP32 raw contents of ", raw.size(), " bytes (not a multiple of 4)"));
  }
  out->clear();
  for (std::size_t i = 0; i < raw.size(); i += 4) {
    const std::uint32_t bits = ReadLe32(raw, i);
    float value = 0;
    std::memcpy(&value, &bits, sizeof(value));
    out->push_back(value);
  }
  return absl::OkStatus();
}

absl::Status DecodeRawBytes(const std::string& raw, std::vector<std::string>* out) {
  out->clear();
  std::size_t at = 0;
  while (at < raw.size()) {
    if (raw.size() - at < 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("BYTES raw contents: a length prefix cut short at byte ", at));
    }
    const std::uint32_t length = ReadLe32(raw, at);
    at += 4;
    if (raw.size() - at < length) {
      return absl::InvalidArgumentError(
          absl::StrCat("BYTES raw contents: element ", out->size(), " of ", length,
                       " bytes at byte ", at - 4, " runs past the end (", raw.size(), " bytes)"));
    }
    out->push_back(raw.substr(at, length));
    at += length;
  }
  return absl::OkStatus();
}

}  // namespace ts
