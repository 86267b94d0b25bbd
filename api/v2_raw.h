// The KServe v2 protocol's raw tensor encodings (raw_input_contents / raw_output_contents),
// shared by the server (server/serving/kserve_v2.cc) and tsctl (client/protocol_calls.cc): FP32
// elements as 4-byte little-endian floats, BYTES elements each as a 4-byte little-endian
// length and then its bytes. Little-endian whatever the host's byte order.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ts {

std::string EncodeRawFp32(const std::vector<float>& values);
std::string EncodeRawBytes(const std::vector<std::string>& elements);
// INVALID_ARGUMENT saying where the encoding breaks ("not a multiple of 4", "runs past the end").
absl::Status DecodeRawFp32(const std::string& raw, std::vector<float>* out);
absl::Status DecodeRawBytes(const std::string& raw, std::vector<std::string>* out);

}  // namespace ts
