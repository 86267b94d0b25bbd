// The KServe v2 mapping (server/serving/kserve_v2.h): request validation with the field named, the
// fan-out of a batch into Classify requests, the outputs and their gRPC raw encoding.
#include "server/serving/kserve_v2.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "tests/server/fake_inference.h"

namespace ts::server::kserve {
namespace {

namespace v2 = ::inference;
using testing::FakeInference;
using ::testing::HasSubstr;

v2::ModelInferRequest Documents(const std::vector<std::string>& documents) {
  v2::ModelInferRequest request;
  request.set_model_name("m");
  request.set_id("r1");
  auto* input = request.add_inputs();
  input->set_name("document");
  input->set_datatype("BYTES");
  input->add_shape(static_cast<std::int64_t>(documents.size()));
  for (const auto& d : documents) input->mutable_contents()->add_bytes_contents(d);
  return request;
}

taylorshift::v1::ModelInfo Model(int classes = 3, const std::string& modality = "bytes") {
  FakeInference fake(classes, modality);
  return *fake.GetModel({}, "m");
}

absl::StatusOr<InferResult> RunInfer(FakeInference& fake, const v2::ModelInferRequest& request,
                                     std::int64_t max_batch = 8) {
  absl::StatusOr<InferResult> out = absl::UnknownError("not called");
  Infer(&fake, {}, request, max_batch, [&](const absl::Status& status, InferResult result) {
    if (status.ok()) {
      out = std::move(result);
    } else {
      out = status;
    }
  });
  return out;
}

TEST(KServeV2Test, MetadataDescribesTheModelsTensors) {
  const auto metadata = ModelMetadata(Model(4));
  EXPECT_EQ(metadata.name(), "m");
  ASSERT_EQ(metadata.versions_size(), 1);
  EXPECT_EQ(metadata.versions(0), "v1");
  ASSERT_EQ(metadata.inputs_size(), 1);
  EXPECT_EQ(metadata.inputs(0).name(), "document");
  EXPECT_EQ(metadata.inputs(0).datatype(), "BYTES");
  ASSERT_EQ(metadata.outputs_size(), 2);
  EXPECT_EQ(metadata.outputs(0).name(), "probabilities");
  EXPECT_THAT(metadata.outputs(0).shape(), ::testing::ElementsAre(-1, 4));
  EXPECT_EQ(ModelMetadata(Model(2, "pixels")).inputs(0).datatype(), "UINT8");
  EXPECT_TRUE(CheckVersion(Model(), "").ok());
  EXPECT_TRUE(CheckVersion(Model(), "v1").ok());
  EXPECT_EQ(CheckVersion(Model(), "v9").code(), absl::StatusCode::kNotFound);
}

TEST(KServeV2Test, ABatchBecomesOneClassifyRequestPerElementAndComesBackInOrder) {
  FakeInference fake;
  auto request = Documents({"a", "bbbb", "cc"});
  request.mutable_parameters()->operator[]("path").set_string_param("efficient");
  request.mutable_parameters()->operator[]("over_length").set_string_param("window");
  auto result = RunInfer(fake, request);
  ASSERT_TRUE(result.ok()) << result.status();
  const auto calls = fake.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[1].document(), "bbbb");
  EXPECT_EQ(calls[1].path(), taylorshift::v1::ATTENTION_PATH_EFFICIENT);
  EXPECT_EQ(calls[1].over_length(), "window");
  EXPECT_EQ(calls[2].request_id(), "r1#2");
  EXPECT_EQ(result->id, "r1");
  EXPECT_EQ(result->model_version, "v1");
  ASSERT_EQ(result->outputs.size(), 2u);
  const auto& probabilities = result->outputs[0];
  EXPECT_EQ(probabilities.name, "probabilities");
  EXPECT_EQ(probabilities.datatype, "FP32");
  EXPECT_THAT(probabilities.shape, ::testing::ElementsAre(3, 3));
  const auto expected = FakeInference::Probabilities(4, 3);
  EXPECT_EQ(probabilities.fp32[3], expected[0]);  // row 1 ("bbbb"), class 0
  EXPECT_EQ(probabilities.fp32[5], expected[2]);
  EXPECT_EQ(result->outputs[1].name, "label");
  EXPECT_THAT(result->outputs[1].bytes, ::testing::ElementsAre("c2", "c2", "c2"));
}

TEST(KServeV2Test, RawInputsAndRawOutputsUseLengthPrefixedBytesAndLittleEndianFloats) {
  FakeInference fake;
  v2::ModelInferRequest request = Documents({});
  request.mutable_inputs(0)->clear_contents();
  request.mutable_inputs(0)->set_shape(0, 2);
  std::string raw;
  for (const std::string d : {"xy", "hello"}) {
    const std::uint32_t n = d.size();
    raw.append(reinterpret_cast<const char*>(&n), 4);
    raw.append(d);
  }
  request.add_raw_input_contents(raw);
  auto result = RunInfer(fake, request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(fake.calls()[1].document(), "hello");
  const auto proto = ToProto(*result);
  ASSERT_EQ(proto.raw_output_contents_size(), 2);
  std::vector<float> floats(6);
  ASSERT_EQ(proto.raw_output_contents(0).size(), 6 * sizeof(float));
  std::memcpy(floats.data(), proto.raw_output_contents(0).data(), 6 * sizeof(float));
  EXPECT_EQ(floats[3], FakeInference::Probabilities(5, 3)[0]);
  EXPECT_EQ(proto.raw_output_contents(1), std::string("\x02\0\0\0c2\x02\0\0\0c2", 12));
  EXPECT_EQ(proto.outputs(0).datatype(), "FP32");
  EXPECT_FALSE(proto.outputs(0).has_contents());
}

TEST(KServeV2Test, ClassCountGivesTheClassificationExtensionsScoreIndexLabel) {
  FakeInference fake;
  auto request = Documents({"abc"});
  auto* output = request.add_outputs();
  output->set_name("probabilities");
  (*output->mutable_parameters())["class_count"].set_int64_param(2);
  auto result = RunInfer(fake, request);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->outputs.size(), 1u);
  EXPECT_EQ(result->outputs[0].datatype, "BYTES");
  EXPECT_THAT(result->outputs[0].shape, ::testing::ElementsAre(1, 2));
  ASSERT_EQ(result->outputs[0].bytes.size(), 2u);
  EXPECT_THAT(result->outputs[0].bytes[0], ::testing::EndsWith(":2:c2"));
  EXPECT_EQ(fake.calls()[0].top_k(), 2u);
  // top_k as a request parameter means the same.
  auto top_k = Documents({"abc"});
  (*top_k.mutable_parameters())["top_k"].set_int64_param(1);
  auto with_top_k = RunInfer(fake, top_k);
  ASSERT_TRUE(with_top_k.ok());
  EXPECT_THAT(with_top_k->outputs[0].shape, ::testing::ElementsAre(1, 1));
}

TEST(KServeV2Test, ImagesTakeUint8WithABatchDimensionAndRgbAsALastDimensionOfThree) {
  FakeInference fake(2, "pixels");
  v2::ModelInferRequest request;
  request.set_model_name("m");
  auto* input = request.add_inputs();
  input->set_name("image");
  input->set_datatype("UINT8");
  for (const auto d : {2, 2, 3, 3}) input->add_shape(d);  // two 2×3 RGB images
  for (int i = 0; i < 36; ++i) input->mutable_contents()->add_uint_contents(i);
  auto result = RunInfer(fake, request);
  ASSERT_TRUE(result.ok()) << result.status();
  const auto calls = fake.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].image().height(), 2u);
  EXPECT_EQ(calls[1].image().width(), 3u);
  EXPECT_EQ(calls[1].image().channels(), 3u);
  EXPECT_EQ(calls[1].image().pixels()[0], 18);
  input->mutable_contents()->set_uint_contents(5, 256);
  auto bad = RunInfer(fake, request);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("uint_contents[5]"));
}

// Shapes are int64s from the client: sides and batches whose products overflow 64 bits are
// refused by name, not multiplied (the first was signed overflow under UBSan, reached through
// tests/fuzz/v2_json_body_fuzz's REST form).
TEST(KServeV2Test, ImageShapesWhoseProductsOverflowAreInvalid) {
  const auto model = Model(2, "pixels");
  v2::ModelInferRequest request;
  request.set_model_name("m");
  auto* input = request.add_inputs();
  input->set_name("image");
  input->set_datatype("UINT8");
  for (const std::int64_t d :
       {std::int64_t{1}, std::int64_t{4000000000}, std::int64_t{4000000000}}) {
    input->add_shape(d);
  }
  input->mutable_contents()->add_uint_contents(1);
  auto sides = Plan(request, model, /*max_batch=*/8);
  EXPECT_EQ(sides.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(sides.status().message()),
              ::testing::StartsWith("inputs[0].shape: height × width must be 1 to 2^26"));

  // 2^40 RGB images of 8192 × 8192 under a max_infer_batch as large as an int64.
  input->set_shape(0, std::int64_t{1} << 40);
  input->set_shape(1, 8192);
  input->set_shape(2, 8192);
  input->add_shape(3);
  auto batch = Plan(request, model, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(batch.status().message(),
            "inputs[0].contents.uint_contents: holds 1 elements but the shape [1099511627776, "
            "8192, 8192, 3] needs more than 2^63");
}

TEST(KServeV2Test, ModelConfigIsTritonsForDocumentsAndImages) {
  const auto config = ModelConfig(Model(4), /*max_batch=*/16);
  EXPECT_EQ(config.name(), "m");
  EXPECT_EQ(config.platform(), "taylorshift_libtorch");
  EXPECT_EQ(config.max_batch_size(), 16);
  ASSERT_EQ(config.input_size(), 1);
  EXPECT_EQ(config.input(0).name(), "document");
  EXPECT_EQ(config.input(0).data_type(), v2::TYPE_STRING);
  EXPECT_THAT(config.input(0).dims(), ::testing::ElementsAre(1));
  ASSERT_EQ(config.output_size(), 2);
  EXPECT_EQ(config.output(0).data_type(), v2::TYPE_FP32);
  EXPECT_THAT(config.output(0).dims(), ::testing::ElementsAre(4));
  EXPECT_EQ(config.output(1).name(), "label");
  EXPECT_TRUE(config.has_dynamic_batching());
  EXPECT_FALSE(config.model_transaction_policy().decoupled());
  const auto pixels = ModelConfig(Model(2, "pixels"), 8);
  EXPECT_EQ(pixels.input(0).name(), "image");
  EXPECT_EQ(pixels.input(0).data_type(), v2::TYPE_UINT8);
  EXPECT_THAT(pixels.input(0).dims(), ::testing::ElementsAre(-1, -1));
  // An int32 field: max_infer_batch beyond it is capped, never negative.
  EXPECT_EQ(ModelConfig(Model(), std::int64_t{1} << 40).max_batch_size(), (1u << 31) - 1);
}

// perf_analyzer sends triton_enable_empty_final_response; tritonclient.http the binary
// extension's parameters. None changes the answer.
TEST(KServeV2Test, TritonsParametersAreAcceptedAndChangeNothing) {
  auto request = Documents({"a", "bb"});
  (*request.mutable_parameters())["triton_enable_empty_final_response"].set_bool_param(true);
  (*request.mutable_parameters())["triton_some_future_flag"].set_int64_param(3);
  (*request.mutable_parameters())["binary_data_output"].set_bool_param(true);
  auto* out = request.add_outputs();
  out->set_name("label");
  (*out->mutable_parameters())["binary_data"].set_bool_param(true);
  auto plan = Plan(request, Model(), 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->requests.size(), 2u);
  EXPECT_EQ(plan->requests[1].document(), "bb");
  EXPECT_THAT(plan->outputs, ::testing::ElementsAre("label"));
  EXPECT_EQ(plan->requests[0].top_k(), 0u);
}

TEST(KServeV2Test, EveryBadRequestNamesItsField) {
  const auto model = Model();
  struct Case {
    std::string field;
    std::function<void(v2::ModelInferRequest&)> spoil;
  };
  const std::vector<Case> cases = {
      {"inputs[0].datatype", [](auto& r) { r.mutable_inputs(0)->set_datatype("FP32"); }},
      {"inputs[0].name", [](auto& r) { r.mutable_inputs(0)->set_name("text"); }},
      {"inputs[0].shape", [](auto& r) { r.mutable_inputs(0)->add_shape(4); }},
      {"inputs[0].shape[0]", [](auto& r) { r.mutable_inputs(0)->set_shape(0, 100); }},
      {"inputs[0].contents.bytes_contents",
       [](auto& r) { r.mutable_inputs(0)->mutable_contents()->add_bytes_contents("x"); }},
      {"inputs", [](auto& r) { r.add_inputs()->set_name("document"); }},
      {"parameters.top_k", [](auto& r) { (*r.mutable_parameters())["top_k"].set_int64_param(4); }},
      {"parameters.top_k",
       [](auto& r) { (*r.mutable_parameters())["top_k"].set_string_param("2"); }},
      {"parameters.path",
       [](auto& r) { (*r.mutable_parameters())["path"].set_string_param("fast"); }},
      {"parameters.colour",
       [](auto& r) { (*r.mutable_parameters())["colour"].set_bool_param(true); }},
      {"parameters.binary_data_output",
       [](auto& r) { (*r.mutable_parameters())["binary_data_output"].set_int64_param(1); }},
      {"inputs[0].parameters.colour",
       [](auto& r) { (*r.mutable_inputs(0)->mutable_parameters())["colour"].set_int64_param(1); }},
      {"outputs[0].name", [](auto& r) { r.add_outputs()->set_name("logits"); }},
      {"inputs[0].contents", [](auto& r) { r.add_raw_input_contents("\x01"); }},
      {"raw_input_contents[0]",
       [](auto& r) {
         r.mutable_inputs(0)->clear_contents();
         r.add_raw_input_contents("\x01");
       }},
  };
  for (const Case& c : cases) {
    auto request = Documents({"a", "b"});
    c.spoil(request);
    auto plan = Plan(request, model, /*max_batch=*/8);
    ASSERT_FALSE(plan.ok()) << c.field;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(plan.status().message()), ::testing::StartsWith(c.field + ":"))
        << plan.status();
  }
  // The batch limit is named with its config key.
  auto big = Plan(Documents(std::vector<std::string>(9, "x")), model, 8);
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("max_infer_batch"));
}

TEST(KServeV2Test, AFailingElementFailsTheCallWithItsCodeAndIndex) {
  FakeInference fake;
  fake.FailWith(absl::ResourceExhaustedError("queue full"));
  auto result = RunInfer(fake, Documents({"a", "b"}));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("batch element 0: queue full"));
  auto missing = Documents({"a"});
  missing.set_model_name("nope");
  EXPECT_EQ(RunInfer(fake, missing).status().code(), absl::StatusCode::kNotFound);
  missing.set_model_name("");
  EXPECT_EQ(RunInfer(fake, missing).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ts::server::kserve
