#include "server/serving/kserve_v2.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "api/v2_raw.h"
#include "common/quoted.h"
#include "common/status_macros.h"

namespace ts::server::kserve {
namespace {

namespace pb = taylorshift::v1;
namespace v2 = ::inference;

bool IsPixelModel(const pb::ModelInfo& model) { return model.modality() == "pixels"; }

std::string InputName(const pb::ModelInfo& model) {
  return IsPixelModel(model) ? "image" : "document";
}

absl::Status Invalid(const std::string& field, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

std::string ShapeString(const google::protobuf::RepeatedField<std::int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The parameter as an int64 or a string; INVALID_ARGUMENT naming it when it has another type.
absl::StatusOr<std::int64_t> IntParameter(const v2::InferParameter& value,
                                          const std::string& field) {
  if (value.parameter_choice_case() != v2::InferParameter::kInt64Param) {
    return Invalid(field, "must be an integer (int64_param)");
  }
  return value.int64_param();
}

absl::StatusOr<std::string> StringParameter(const v2::InferParameter& value,
                                            const std::string& field) {
  if (value.parameter_choice_case() != v2::InferParameter::kStringParam) {
    return Invalid(field, "must be a string (string_param)");
  }
  return value.string_param();
}

absl::Status ApplyParameters(const v2::ModelInferRequest& request, pb::ClassifyRequest* common,
                             std::uint32_t* top_k) {
  for (const auto& [name, value] : request.parameters()) {
    const std::string field = absl::StrCat("parameters.", name);
    if (name == "top_k") {
      TS_ASSIGN_OR_RETURN(auto k, IntParameter(value, field));
      if (k < 0) return Invalid(field, absl::StrCat("must be ≥ 0, got ", k));
      *top_k = static_cast<std::uint32_t>(std::min<std::int64_t>(k, 1 << 30));
    } else if (name == "path") {
      TS_ASSIGN_OR_RETURN(auto path, StringParameter(value, field));
      std::string upper = absl::AsciiStrToUpper(path);
      pb::AttentionPath parsed;
      if (!pb::AttentionPath_Parse(absl::StrCat("ATTENTION_PATH_", upper), &parsed)) {
        return Invalid(
            field, absl::StrCat("must be auto, direct, efficient or softmax; got ", Quoted(path)));
      }
      common->set_path(parsed);
    } else if (name == "over_length") {
      TS_ASSIGN_OR_RETURN(auto policy, StringParameter(value, field));
      common->set_over_length(policy);  // checked by Inference::Classify with the model
    } else if (absl::StartsWith(name, kTritonParameterPrefix)) {
      // Triton's own (triton_enable_empty_final_response, …): they configure Triton's
      // responses, not the model; ModelStreamInfer reads the one it honours from the request.
    } else if (name == kBinaryDataOutput) {
      // The REST binary tensor data extension (the REST front end reads it; gRPC answers are
      // binary anyway, as Triton's are).
      if (value.parameter_choice_case() != v2::InferParameter::kBoolParam) {
        return Invalid(field, "must be a boolean (bool_param)");
      }
    } else {
      return Invalid(field,
                     "unknown parameter (known: top_k, path, over_length, binary_data_output, "
                     "and Triton's triton_*, which are ignored)");
    }
  }
  return absl::OkStatus();
}

// Which outputs, and the classification extension's class_count.
absl::Status PlanOutputs(const v2::ModelInferRequest& request, std::uint32_t top_k,
                         const pb::ModelInfo& model, InferPlan* plan) {
  plan->class_count = top_k;
  std::string class_count_field = "parameters.top_k";
  if (request.outputs().empty()) {
    plan->outputs = {kProbabilities, kLabel};
  }
  for (int i = 0; i < request.outputs_size(); ++i) {
    const auto& output = request.outputs(i);
    const std::string field = absl::StrCat("outputs[", i, "]");
    if (output.name() != kProbabilities && output.name() != kLabel) {
      return Invalid(field + ".name", absl::StrCat("unknown output ", Quoted(output.name()),
                                                   " (the model has probabilities and label)"));
    }
    if (std::find(plan->outputs.begin(), plan->outputs.end(), output.name()) !=
        plan->outputs.end()) {
      return Invalid(field + ".name", absl::StrCat(Quoted(output.name()), " requested twice"));
    }
    plan->outputs.push_back(output.name());
    for (const auto& [name, value] : output.parameters()) {
      const std::string param = absl::StrCat(field, ".parameters.", name);
      // class_count as KServe's docs name it; classification as Triton and tritonclient do.
      if ((name == "class_count" || name == "classification") && output.name() == kProbabilities) {
        TS_ASSIGN_OR_RETURN(auto k, IntParameter(value, param));
        if (k < 0) return Invalid(param, absl::StrCat("must be ≥ 0, got ", k));
        if (top_k > 0 && k != top_k) {
          return Invalid(param, absl::StrCat(k, " differs from parameters.top_k ", top_k));
        }
        plan->class_count = static_cast<std::uint32_t>(std::min<std::int64_t>(k, 1 << 30));
        class_count_field = param;
      } else if (name == kBinaryData) {
        // The REST binary tensor data extension (the REST front end answers it).
        if (value.parameter_choice_case() != v2::InferParameter::kBoolParam) {
          return Invalid(param, "must be a boolean (bool_param)");
        }
      } else {
        return Invalid(param, absl::StrCat("unknown parameter (known: binary_data, and "
                                           "class_count or classification on ",
                                           kProbabilities, ")"));
      }
    }
  }
  if (plan->class_count > static_cast<std::uint32_t>(model.labels_size())) {
    return Invalid(class_count_field, absl::StrCat(plan->class_count, " exceeds the model's ",
                                                   model.labels_size(), " classes"));
  }
  return absl::OkStatus();
}

}  // namespace

v2::ServerMetadataResponse ServerMetadata() {
  v2::ServerMetadataResponse response;
  response.set_name(kServerName);
  response.set_version(TS_VERSION);
  response.add_extensions("classification");
  return response;
}

v2::ModelMetadataResponse ModelMetadata(const pb::ModelInfo& model) {
  v2::ModelMetadataResponse response;
  response.set_name(model.name());
  response.add_versions(model.version());
  response.set_platform(kPlatform);
  const auto describe = [](v2::ModelMetadataResponse::TensorMetadata* tensor,
                           const std::string& name, const char* datatype,
                           std::initializer_list<std::int64_t> shape) {
    tensor->set_name(name);
    tensor->set_datatype(datatype);
    tensor->mutable_shape()->Add(shape.begin(), shape.end());
  };
  // Images are [B, H, W] ([B, H, W, 3] for RGB).
  if (IsPixelModel(model)) {
    describe(response.add_inputs(), InputName(model), "UINT8", {-1, -1, -1});
  } else {
    // [batch, 1], as Triton reports ModelConfig's dims [1] (requests may also send [batch]):
    // perf_analyzer takes the shape after the batch dimension from here.
    describe(response.add_inputs(), InputName(model), "BYTES", {-1, 1});
  }
  describe(response.add_outputs(), kProbabilities, "FP32", {-1, model.labels_size()});
  describe(response.add_outputs(), kLabel, "BYTES", {-1});
  return response;
}

v2::ModelConfig ModelConfig(const pb::ModelInfo& model, std::int64_t max_batch) {
  v2::ModelConfig config;
  config.set_name(model.name());
  config.set_platform(kPlatform);
  config.set_backend(kBackend);
  config.set_max_batch_size(
      static_cast<std::int32_t>(std::clamp<std::int64_t>(max_batch, 1, (1u << 31) - 1)));
  auto* input = config.add_input();
  input->set_name(InputName(model));
  if (IsPixelModel(model)) {
    // [height, width] (gray) or [height, width, 3] (RGB): any size, after the batch.
    input->set_data_type(v2::TYPE_UINT8);
    input->add_dims(-1);
    input->add_dims(-1);
  } else {
    // One document per batch element: [batch] (the model's view) or [batch, 1] on the wire.
    input->set_data_type(v2::TYPE_STRING);
    input->add_dims(1);
    input->mutable_reshape();
  }
  auto* probabilities = config.add_output();
  probabilities->set_name(kProbabilities);
  probabilities->set_data_type(v2::TYPE_FP32);
  probabilities->add_dims(model.labels_size());
  auto* label = config.add_output();
  label->set_name(kLabel);
  label->set_data_type(v2::TYPE_STRING);
  label->add_dims(1);
  label->mutable_reshape();
  // Every element waits in the model's length-bucketed batcher.
  config.mutable_dynamic_batching();
  config.mutable_model_transaction_policy()->set_decoupled(false);
  return config;
}

absl::Status CheckVersion(const pb::ModelInfo& model, const std::string& version) {
  if (version.empty() || version == model.version()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("model ", Quoted(model.name()), " has no version ",
                                          Quoted(version), " (it serves ", Quoted(model.version()),
                                          ")"));
}

namespace {

// A document model's requests: one per element of the batch, each `common` with its document.
absl::Status AddDocumentRequests(const v2::ModelInferRequest& request,
                                 const pb::ClassifyRequest& common, std::int64_t batch,
                                 InferPlan* plan) {
  const auto& input = request.inputs(0);
  const auto& shape = input.shape();
  const bool raw = !request.raw_input_contents().empty();
  if (input.datatype() != "BYTES") {
    return Invalid("inputs[0].datatype",
                   absl::StrCat("document models take BYTES, got ", Quoted(input.datatype())));
  }
  if (!(shape.size() == 1 || (shape.size() == 2 && shape[1] == 1))) {
    return Invalid("inputs[0].shape",
                   absl::StrCat("must be [batch] or [batch, 1], got ", ShapeString(shape)));
  }
  std::vector<std::string> documents;
  if (raw) {
    if (auto split = DecodeRawBytes(request.raw_input_contents(0), &documents); !split.ok()) {
      return Invalid("raw_input_contents[0]", std::string(split.message()));
    }
  } else {
    documents.assign(input.contents().bytes_contents().begin(),
                     input.contents().bytes_contents().end());
  }
  if (static_cast<std::int64_t>(documents.size()) != batch) {
    return Invalid(raw ? "raw_input_contents[0]" : "inputs[0].contents.bytes_contents",
                   absl::StrCat("holds ", documents.size(), " elements but the shape ",
                                ShapeString(shape), " needs ", batch));
  }
  for (auto& document : documents) {
    pb::ClassifyRequest& r = plan->requests.emplace_back(common);
    r.set_document(std::move(document));
  }
  return absl::OkStatus();
}

// A pixel model's requests: one per image of the batch, each `common` with its pixels.
absl::Status AddImageRequests(const v2::ModelInferRequest& request,
                              const pb::ClassifyRequest& common, std::int64_t batch,
                              InferPlan* plan) {
  const auto& input = request.inputs(0);
  const auto& shape = input.shape();
  const bool raw = !request.raw_input_contents().empty();
  if (input.datatype() != "UINT8") {
    return Invalid("inputs[0].datatype",
                   absl::StrCat("pixel models take UINT8, got ", Quoted(input.datatype())));
  }
  if (!(shape.size() == 3 || (shape.size() == 4 && shape[3] == 3))) {
    return Invalid("inputs[0].shape", absl::StrCat("must be [batch, height, width] or [batch, "
                                                   "height, width, 3], got ",
                                                   ShapeString(shape)));
  }
  const std::int64_t height = shape[1], width = shape[2];
  const std::int64_t channels = shape.size() == 4 ? 3 : 1;
  // Divided, not multiplied: each side may be any int64 (height · width > 2^26 exactly when
  // height > ⌊2^26 / width⌋).
  if (height == 0 || width == 0 || height > (std::int64_t{1} << 26) / width) {
    return Invalid("inputs[0].shape",
                   absl::StrCat("height × width must be 1 to 2^26, got ", ShapeString(shape)));
  }
  const std::int64_t per_image = height * width * channels;
  std::string pixels;
  if (raw) {
    pixels = request.raw_input_contents(0);
  } else {
    const auto& values = input.contents().uint_contents();
    pixels.reserve(values.size());
    for (int i = 0; i < values.size(); ++i) {
      if (values[i] > 255) {
        return Invalid(absl::StrCat("inputs[0].contents.uint_contents[", i, "]"),
                       absl::StrCat("UINT8 is 0 to 255, got ", values[i]));
      }
      pixels.push_back(static_cast<char>(values[i]));
    }
  }
  // max_infer_batch has no upper bound: batch · per_image may overflow, so it is divided too.
  const auto elements = static_cast<std::int64_t>(pixels.size());
  if (elements % per_image != 0 || elements / per_image != batch) {
    const std::string needs = batch <= std::numeric_limits<std::int64_t>::max() / per_image
                                  ? absl::StrCat(batch * per_image)
                                  : "more than 2^63";
    return Invalid(raw ? "raw_input_contents[0]" : "inputs[0].contents.uint_contents",
                   absl::StrCat("holds ", elements, " elements but the shape ", ShapeString(shape),
                                " needs ", needs));
  }
  for (std::int64_t b = 0; b < batch; ++b) {
    pb::ClassifyRequest& r = plan->requests.emplace_back(common);
    auto* image = r.mutable_image();
    image->set_width(static_cast<std::uint32_t>(width));
    image->set_height(static_cast<std::uint32_t>(height));
    image->set_channels(static_cast<std::uint32_t>(channels));
    image->set_pixels(pixels.substr(b * per_image, per_image));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<InferPlan> Plan(const v2::ModelInferRequest& request, const pb::ModelInfo& model,
                               std::int64_t max_batch) {
  InferPlan plan;
  pb::ClassifyRequest common;
  common.set_model(model.name());
  std::uint32_t top_k = 0;
  TS_RETURN_IF_ERROR(ApplyParameters(request, &common, &top_k));
  TS_RETURN_IF_ERROR(PlanOutputs(request, top_k, model, &plan));
  common.set_top_k(plan.class_count);

  const std::string expected = InputName(model);
  if (request.inputs_size() != 1) {
    return Invalid("inputs", absl::StrCat("model ", Quoted(model.name()), " takes one input, ",
                                          Quoted(expected), "; got ", request.inputs_size()));
  }
  const auto& input = request.inputs(0);
  if (input.name() != expected) {
    return Invalid("inputs[0].name",
                   absl::StrCat("model ", Quoted(model.name()), " takes ", Quoted(expected),
                                ", not ", Quoted(input.name())));
  }
  for (const auto& [name, value] : input.parameters()) {
    // binary_data_size: the REST front end has moved the binary data to raw_input_contents.
    if (name != kBinaryDataSize) {
      return Invalid(absl::StrCat("inputs[0].parameters.", name),
                     absl::StrCat("unknown parameter (known: ", kBinaryDataSize, ")"));
    }
  }
  const bool raw = !request.raw_input_contents().empty();
  if (raw && request.raw_input_contents_size() != 1) {
    return Invalid("raw_input_contents", absl::StrCat("needs one entry per input (1), got ",
                                                      request.raw_input_contents_size()));
  }
  if (raw && input.has_contents()) {
    return Invalid("inputs[0].contents", "set either contents or raw_input_contents, not both");
  }
  const auto& shape = input.shape();
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return Invalid(absl::StrCat("inputs[0].shape[", i, "]"),
                     absl::StrCat("must be ≥ 0, got ", shape[i]));
    }
  }
  if (shape.empty())
    return Invalid("inputs[0].shape", "missing (the first dimension is the batch)");
  const std::int64_t batch = shape[0];
  if (batch < 1 || batch > max_batch) {
    return Invalid("inputs[0].shape[0]", absl::StrCat("the batch must hold 1 to ", max_batch,
                                                      " elements (max_infer_batch), got ", batch));
  }
  if (!IsPixelModel(model)) {
    TS_RETURN_IF_ERROR(AddDocumentRequests(request, common, batch, &plan));
  } else {
    TS_RETURN_IF_ERROR(AddImageRequests(request, common, batch, &plan));
  }
  for (std::size_t i = 0; i < plan.requests.size(); ++i) {
    plan.requests[i].set_request_id(absl::StrCat(request.id(), "#", i));
  }
  return plan;
}

InferResult Assemble(const v2::ModelInferRequest& request, const pb::ModelInfo& model,
                     const InferPlan& plan, const std::vector<pb::ClassifyResponse>& responses) {
  InferResult result;
  result.model_name = model.name();
  result.model_version = responses.empty() ? model.version() : responses[0].model_version();
  result.id = request.id();
  const auto batch = static_cast<std::int64_t>(responses.size());
  for (const std::string& name : plan.outputs) {
    OutputTensor& out = result.outputs.emplace_back();
    out.name = name;
    if (name == kLabel) {
      out.datatype = "BYTES";
      out.shape = {batch};
      for (const auto& r : responses) out.bytes.push_back(r.label());
    } else if (plan.class_count > 0) {
      // The classification extension: "score:index:label", best first.
      out.datatype = "BYTES";
      out.shape = {batch, static_cast<std::int64_t>(plan.class_count)};
      for (const auto& r : responses) {
        for (const auto& p : r.probabilities()) {
          out.bytes.push_back(absl::StrCat(p.probability(), ":", p.index(), ":", p.label()));
        }
      }
    } else {
      out.datatype = "FP32";
      out.shape = {batch, static_cast<std::int64_t>(model.labels_size())};
      for (const auto& r : responses) {
        for (const auto& p : r.probabilities()) out.fp32.push_back(p.probability());
      }
    }
  }
  return result;
}

void Infer(Inference* inference, const CallContext& call, const v2::ModelInferRequest& request,
           std::int64_t max_batch, const InferDone& done) {
  if (request.model_name().empty()) {
    return done(Invalid("model_name", "required (see ListModels or GET /v2/models/NAME)"), {});
  }
  auto model = inference->GetModel(call, request.model_name());
  if (!model.ok()) return done(model.status(), {});
  if (auto version = CheckVersion(*model, request.model_version()); !version.ok()) {
    return done(version, {});
  }
  auto plan = Plan(request, *model, max_batch);
  if (!plan.ok()) return done(plan.status(), {});
  // The elements are one request: admitted together, or none is queued.
  if (auto admitted = inference->AdmitTogether(call, plan->requests); !admitted.ok()) {
    return done(admitted, {});
  }

  // Every element goes to the batcher now (they can share batches); the last one to finish
  // assembles the answer.
  struct Join {
    absl::Mutex mu;
    std::size_t remaining;
    std::vector<pb::ClassifyResponse> responses;
    std::vector<absl::Status> statuses;
  };
  auto join = std::make_shared<Join>();
  const std::size_t n = plan->requests.size();
  join->remaining = n;
  join->responses.resize(n);
  join->statuses.resize(n);
  auto shared_plan = std::make_shared<InferPlan>(std::move(*plan));
  auto shared_request = std::make_shared<v2::ModelInferRequest>();
  shared_request->set_id(request.id());
  auto info = std::make_shared<pb::ModelInfo>(std::move(*model));
  for (std::size_t i = 0; i < n; ++i) {
    inference->Classify(
        call, shared_plan->requests[i],
        [join, i, n, shared_plan, shared_request, info, done](const absl::Status& status,
                                                              pb::ClassifyResponse response) {
          {
            absl::MutexLock lock(&join->mu);
            join->statuses[i] = status;
            join->responses[i] = std::move(response);
            if (--join->remaining > 0) return;
          }
          for (std::size_t j = 0; j < n; ++j) {
            const absl::Status& failed = join->statuses[j];
            if (failed.ok()) continue;
            return done(n == 1 ? failed : Prefixed(failed, absl::StrCat("batch element ", j, ": ")),
                        {});
          }
          done(absl::OkStatus(), Assemble(*shared_request, *info, *shared_plan, join->responses));
        });
  }
}

std::string RawContents(const OutputTensor& output) {
  return output.datatype == "FP32" ? EncodeRawFp32(output.fp32) : EncodeRawBytes(output.bytes);
}

v2::ModelInferResponse ToProto(const InferResult& result) {
  v2::ModelInferResponse response;
  response.set_model_name(result.model_name);
  response.set_model_version(result.model_version);
  response.set_id(result.id);
  for (const OutputTensor& out : result.outputs) {
    auto* tensor = response.add_outputs();
    tensor->set_name(out.name);
    tensor->set_datatype(out.datatype);
    for (const auto d : out.shape) tensor->add_shape(d);
    response.add_raw_output_contents(RawContents(out));
  }
  return response;
}

}  // namespace ts::server::kserve
