// How tsctl prints API results: one compact JSON object per line (--json) or aligned text.
// Stateless and thread-safe.
//
// The model and classify result JSON are api/api_json.h's (models: one model per line; classify:
// one object per input, in input order, "file" first). `probabilities` is in the server's
// order: every class in class order, or the top_k best when --top-k is set. Classify error JSON:
//   {"file":"b.txt","error":{"code":"INVALID_ARGUMENT","message":"..."}}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grpc/health/v1/health.pb.h"
#include "grpcpp/support/status.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts::client {

std::string ModelJson(const taylorshift::v1::ModelInfo& model);
// Rows as left-aligned columns two spaces apart, one line each (rows[0] is the header).
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);
// A table with a header row and one row per model, ending in a newline.
std::string ModelTable(const taylorshift::v1::ListModelsResponse& models);
// "key: value" lines for one model.
std::string ModelDetails(const taylorshift::v1::ModelInfo& model);

std::string ClassifyJson(const std::string& file, const taylorshift::v1::ClassifyResponse& response,
                         double latency_ms);
std::string ClassifyErrorJson(const std::string& file, const grpc::Status& status);
// "a.txt: pos (p=0.920) path=efficient batch=4 tokens=513 ..." on one line. With `top_k` > 0
// (the request's --top-k) the K answered classes follow the label, best first:
// "a.txt: pos (p=0.920) top-2: pos 0.920, neg 0.080 path=...".
std::string ClassifyText(const std::string& file, const taylorshift::v1::ClassifyResponse& response,
                         double latency_ms, std::uint32_t top_k = 0);
// "a.txt: INVALID_ARGUMENT: message".
std::string ClassifyErrorText(const std::string& file, const grpc::Status& status);

// tsctl health's answer (grpc.health.v1.Health/Check): "UNKNOWN", "SERVING", "NOT_SERVING",
// "SERVICE_UNKNOWN"; "STATUS_<n>" for a value a newer server may add (proto3 keeps its number).
std::string ServingStatusName(grpc::health::v1::HealthCheckResponse::ServingStatus status);

}  // namespace ts::client
