// The KServe v2 Open Inference Protocol mapped onto classification, for both of its transports
// (server/serving/kserve_service.h for gRPC, server/serving/http_frontend.h for REST). Torch-free,
// gRPC-free.
//
// A model has one input and two outputs (ModelMetadata):
//   document models: input  "document"      BYTES [B] (or [B, 1]): one document per element
//   pixel models:    input  "image"         UINT8 [B, H, W] or [B, H, W, 3] (RGB → gray)
//   both:            output "probabilities" FP32  [B, classes]: every class, in class order
//                    output "label"         BYTES [B]: the most probable class
// Request parameters: top_k (int64), path (auto|direct|efficient|softmax), over_length
// (truncate|keep_tail|reject|window); Triton's triton_* parameters are accepted and ignored
// (ModelStreamInfer honours triton_enable_empty_final_response), and the REST binary tensor data
// extension's binary_data_output, binary_data (outputs) and binary_data_size (inputs) are
// accepted (the REST front end applies them). The classification extension: `class_count: K` on the
// requested "probabilities" output (or top_k) turns it into BYTES [B, K] of "score:index:label",
// best first. Every element rides the model's batcher as one Classify request (same limits,
// auth, deadlines and metrics); the answer fails with the first failing element's status.
// Documented in docs/PROTOCOLS.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/serving/inference.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts::server::kserve {

inline constexpr char kServerName[] = "taylorshift-serve";
inline constexpr char kPlatform[] = "taylorshift_libtorch";
inline constexpr char kProbabilities[] = "probabilities";
inline constexpr char kLabel[] = "label";
inline constexpr char kBackend[] = "taylorshift";
inline constexpr char kTritonParameterPrefix[] = "triton_";
inline constexpr char kBinaryDataOutput[] = "binary_data_output";
inline constexpr char kBinaryData[] = "binary_data";
inline constexpr char kBinaryDataSize[] = "binary_data_size";

inference::ServerMetadataResponse ServerMetadata();
inference::ModelMetadataResponse ModelMetadata(const taylorshift::v1::ModelInfo& model);
// Triton's model configuration of a model served with batches of up to `max_batch` elements
// (max_infer_batch): what perf_analyzer and Triton's clients read (inputs, outputs, max batch
// size, dynamic batching, not decoupled).
inference::ModelConfig ModelConfig(const taylorshift::v1::ModelInfo& model, std::int64_t max_batch);
// OK when `version` is empty or the served version; NOT_FOUND naming both otherwise.
absl::Status CheckVersion(const taylorshift::v1::ModelInfo& model, const std::string& version);

// One output tensor of an answer, before it is encoded for a transport.
struct OutputTensor {
  std::string name;
  std::string datatype;  // FP32 or BYTES
  std::vector<std::int64_t> shape;
  std::vector<float> fp32;         // FP32 elements, row-major
  std::vector<std::string> bytes;  // BYTES elements, row-major
};

struct InferResult {
  std::string model_name;
  std::string model_version;
  std::string id;
  std::vector<OutputTensor> outputs;
};

// What a valid request asks for: one Classify request per batch element, and the outputs.
struct InferPlan {
  std::vector<taylorshift::v1::ClassifyRequest> requests;
  std::vector<std::string> outputs;  // names, in the order they are answered
  std::uint32_t class_count = 0;     // > 0: "probabilities" in the classification form
};

// INVALID_ARGUMENT naming the field (inputs[0].shape, parameters.top_k, …) and the limit for
// anything the model cannot take; more than `max_batch` elements is INVALID_ARGUMENT too.
absl::StatusOr<InferPlan> Plan(const inference::ModelInferRequest& request,
                               const taylorshift::v1::ModelInfo& model, std::int64_t max_batch);

// The outputs for the plan's responses (one per request, in order).
InferResult Assemble(const inference::ModelInferRequest& request,
                     const taylorshift::v1::ModelInfo& model, const InferPlan& plan,
                     const std::vector<taylorshift::v1::ClassifyResponse>& responses);

// A whole ModelInfer: looks the model up (auth included), plans, classifies every element
// through `inference` and assembles the answer. `done` is called exactly once.
using InferDone = std::function<void(const absl::Status& status, InferResult result)>;
void Infer(Inference* inference, const CallContext& call,
           const inference::ModelInferRequest& request, std::int64_t max_batch,
           const InferDone& done);

// An output's elements in the raw encoding (FP32 little-endian, BYTES each prefixed by its 4-byte
// little-endian length): gRPC's raw_output_contents and REST's binary tensor data.
std::string RawContents(const OutputTensor& output);

// The gRPC encoding of a result: outputs' bytes in raw_output_contents (as Triton answers, and
// as tritonclient reads them): FP32 little-endian, BYTES each prefixed by its 4-byte length.
inference::ModelInferResponse ToProto(const InferResult& result);

}  // namespace ts::server::kserve
