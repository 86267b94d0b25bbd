// The wire protocols `tsctl bench --protocol` drives, each as a ClassifyCall for RunLoad
// (client/load_generator.h), so one load generator and one aggregator measure all of them:
//  - classify: taylorshift.v1.Classifier/Classify (gRPC), the default;
//  - v2-grpc:  inference.GRPCInferenceService/ModelInfer on the same channel, one BYTES
//              "document" element (shape [1], raw_input_contents), token and deadline as for
//              classify; the answer's raw_output_contents are decoded into a ClassifyResponse;
//  - v2-rest:  POST /v2/models/NAME/infer with the KServe v2 JSON body on the HTTP front end;
//  - rest:     POST /v1/models/NAME:classify with {"text": ...} on the HTTP front end.
// The HTTP protocols keep one keep-alive connection (httplib::Client) per worker thread, send
// "Authorization: Bearer TOKEN" and "X-Timeout-Ms", and map error answers back to gRPC codes
// (the JSON "code" field when present, else the HTTP status).
// v2 answers carry no attention path, token count or server timing: their responses have
// path AUTO ("auto" in the report), tokens 0 and batch size 0. docs/PROTOCOLS.md has the
// server's side. Everything here is thread-safe; the calls are meant for many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "api/proto_names.h"
#include "client/channel.h"
#include "client/load_generator.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "inference/grpc_predict_v2.pb.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts::client {

enum class BenchProtocol { kClassify, kV2Grpc, kV2Rest, kRest };

// "classify", "v2-grpc", "v2-rest", "rest" (case-sensitive); INVALID_ARGUMENT listing them
// otherwise.
absl::StatusOr<BenchProtocol> ParseBenchProtocol(absl::string_view name);
std::string BenchProtocolName(BenchProtocol protocol);
// True for v2-rest and rest (they need the HTTP front end's address).
bool UsesHttp(BenchProtocol protocol);

// The flags that go with a protocol, checked before anything is sent: `http_address` (--http)
// is required for v2-rest and rest and refused for the gRPC protocols; an image input (an
// image among --files) is refused for every protocol but classify. INVALID_ARGUMENT with a
// message naming the flag otherwise.
absl::Status ValidateProtocolFlags(BenchProtocol protocol, const std::string& http_address,
                                   bool has_image_input);

// The status of an HTTP answer: OK for 2xx; otherwise the code named by the JSON body's
// "code" field when it is a gRPC code name (not "OK"), else GrpcCodeForHttpStatus; the
// message is the body's "error" field, else "HTTP <status>: <start of the body>".
grpc::Status StatusFromHttpAnswer(int http_status, const std::string& body);

// --- Request encodings (request.document only; images are refused by ValidateProtocolFlags)

// ModelInfer for one document: input "document", BYTES, shape [1], the document in
// raw_input_contents[0] (4-byte little-endian length, then the bytes); id = request_id;
// parameters top_k (int64, when > 0) and path (string, when not AUTO).
inference::ModelInferRequest V2InferRequest(const taylorshift::v1::ClassifyRequest& request);

// The v2 REST body: {"id":…,"parameters":{…},"inputs":[{"name":"document","datatype":"BYTES",
// "shape":[1],"data":["<document>"]}]}. INVALID_ARGUMENT when the document is not valid
// UTF-8 (v2 JSON carries BYTES as strings).
absl::StatusOr<std::string> V2RestBody(const taylorshift::v1::ClassifyRequest& request);

// The plain route's body: {"text": "<document>"} (or {"document_base64": …} for a document
// that is not valid UTF-8), plus "top_k", "path" and "request_id" when set.
std::string RestClassifyBody(const taylorshift::v1::ClassifyRequest& request);

// --- Answer decodings; INTERNAL naming what is wrong for an answer that cannot be read.

// A ModelInfer answer for one element: "probabilities" (FP32 [1, classes], every class in
// class order, or the classification form BYTES [1, K] of "score:index:label") and "label"
// (BYTES [1]) from raw_output_contents (FP32 little-endian, BYTES 4-byte length-prefixed),
// or from outputs[i].contents when the answer has no raw contents. Fills label,
// probabilities (labels only in the classification form), model_version and request_id (id).
absl::Status DecodeV2Response(const inference::ModelInferResponse& answer,
                              taylorshift::v1::ClassifyResponse* response);

// The same from the v2 REST answer's JSON ({"model_version","id","outputs":[{"name",
// "datatype","shape","data"}]}).
absl::Status DecodeV2JsonResponse(const std::string& body,
                                  taylorshift::v1::ClassifyResponse* response);

// The plain route's answer (the object `tsctl classify --json` prints, without "file"):
// label, probabilities, path, batch_size/batch_tokens, model_version, tokens, truncated,
// windows, queue_ms/compute_ms and request_id.
absl::Status DecodeRestClassifyResponse(const std::string& body,
                                        taylorshift::v1::ClassifyResponse* response);

// --- The calls. Each is thread-safe and may be called from `concurrency` threads at once.

// v2-grpc (GRPCInferenceService/ModelInfer) or else classify (Classifier/Classify) on
// `channel`, each call's context from PrepareContext(connection, timeout_ms).
ClassifyCall MakeGrpcCall(BenchProtocol protocol, std::shared_ptr<grpc::Channel> channel,
                          const ConnectionOptions& connection, std::int64_t timeout_ms);

// The HTTP base URL for --http: "HOST:PORT" becomes http://HOST:PORT (https:// when the
// connection asks for TLS: --tls, --ca-file or a client certificate); "http://…" and
// "https://…" are taken as they are. INVALID_ARGUMENT for an empty address, a path after the
// port, or --tls-server-name (not supported over HTTP).
absl::StatusOr<std::string> HttpBaseUrl(const std::string& http_address,
                                        const ConnectionOptions& connection);

// v2-rest or rest against `base_url` (HttpBaseUrl's result): one keep-alive connection per
// calling thread, the bearer token of `connection`, TLS files of `connection` for https.
// timeout_ms > 0 is sent as X-Timeout-Ms and bounds the wait (a little longer, so the
// server's own 504 normally arrives first); 0 = no deadline. A transport failure is
// UNAVAILABLE (DEADLINE_EXCEEDED when the deadline passed). INVALID_ARGUMENT for a
// protocol that is not HTTP.
absl::StatusOr<ClassifyCall> MakeHttpCall(BenchProtocol protocol, const std::string& base_url,
                                          const ConnectionOptions& connection,
                                          std::int64_t timeout_ms);

}  // namespace ts::client
