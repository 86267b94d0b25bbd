// Precision per model (model/api/precision.h, model/kernels/mixed_linear.h): names, the hardware
// check, the mixed linear layer, and the accuracy guard — bf16 probabilities within 0.02 of fp32 on
// the shipped demo models and on a paper-size model, on the benchmark documents.
#include "model/api/precision.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/file_io.h"
#include "model/checkpoints/checkpoint.h"
#include "model/data/listops_generator.h"
#include "model/kernels/bf16_matmul_probe.h"
#include "model/kernels/cpu_features.h"
#include "model/kernels/mixed_linear.h"
#include "model/networks/batch_classifier.h"
#include "model/networks/encoder.h"

namespace ts {
namespace {

std::string SourceDir() {
  const char* dir = std::getenv("TS_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

TEST(PrecisionTest, NamesRoundTripAndBadNamesSayWhatIsAccepted) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    auto parsed = ParsePrecision(PrecisionName(precision));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, precision);
  }
  const auto bad = ParsePrecision("fp16");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("expected fp32 or bf16, got 'fp16'"), std::string::npos)
      << bad.status();
}

TEST(PrecisionTest, CpuInfoNeedsBf16OnEveryProcessor) {
  const std::string with = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 avx512vl\n\n";
  const std::string amx = "processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile\n\n";
  const std::string without = "processor\t: 1\nflags\t\t: fpu avx512f avx512vl\n\n";
  EXPECT_TRUE(CpuInfoHasBf16(with));
  EXPECT_TRUE(CpuInfoHasBf16(with + amx));
  EXPECT_FALSE(CpuInfoHasBf16(with + without));
  EXPECT_FALSE(CpuInfoHasBf16(without));
  EXPECT_FALSE(CpuInfoHasBf16(""));
  // A flag that merely contains the name does not count.
  EXPECT_FALSE(CpuInfoHasBf16("flags\t\t: avx512_bf16x\n"));
}

TEST(PrecisionTest, HardwareCheckFollowsTheCpuFlags) {
  EXPECT_TRUE(CheckPrecisionSupported(Precision::kFp32, torch::kCPU).ok());
  const absl::Status bf16 = CheckPrecisionSupported(Precision::kBf16, torch::kCPU);
  if (HostCpuHasBf16() && CpuBf16Matmul().float32_sums()) {
    EXPECT_TRUE(bf16.ok()) << bf16;
  } else if (HostCpuHasBf16()) {
    // The flags say bf16, LibTorch's products say bfloat16 sums: refused, with the measurement.
    EXPECT_EQ(bf16.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(bf16.message().find("use precision: fp32"), std::string::npos) << bf16;
  } else {
    // A CPU without bf16 says so; one whose kernels are capped below it names the cap.
    EXPECT_EQ(bf16.code(), absl::StatusCode::kFailedPrecondition);
    const bool capped = DetectedCpuCapability() >= CpuCapability::kAvx512Bf16;
    EXPECT_NE(bf16.message().find(capped ? "capped by TS_CPU_CAPABILITY" : "AVX512-BF16"),
              std::string::npos)
        << bf16;
  }
}

TEST(PrecisionTest, MixedLinearRunsTheProductInBf16OnlyForEnoughRows) {
  torch::manual_seed(3);
  torch::nn::Linear layer(64, 96);
  const torch::Tensor low = LowPrecisionWeight(layer, Precision::kBf16);
  ASSERT_EQ(low.scalar_type(), torch::kBFloat16);
  EXPECT_FALSE(LowPrecisionWeight(layer, Precision::kFp32).defined());
  torch::NoGradGuard no_grad;

  // Few rows: the float32 layer (model/kernels/cpu_gemm.h's GEMM: LibTorch's sums in another
  // order).
  const auto small = torch::randn({2, kMinLowPrecisionRows / 2 - 1, 64});
  EXPECT_TRUE(torch::allclose(MixedLinear(layer, low, small), layer(small), 1e-5, 1e-5));

  // Enough rows: bf16 inputs and weights, float32 out, the bias added in float32.
  const auto x = torch::randn({2, kMinLowPrecisionRows, 64});
  const auto y = MixedLinear(layer, low, x);
  ASSERT_EQ(y.scalar_type(), torch::kFloat);
  if (!CpuBf16Matmul().float32_sums()) {
    // LibTorch would sum in bfloat16 here: the product stays float32.
    EXPECT_TRUE(torch::allclose(y, layer(x), 1e-5, 1e-5)) << CpuBf16Matmul().Describe();
    return;
  }
  const auto expected =
      torch::matmul(x.to(torch::kBFloat16).to(torch::kFloat), low.to(torch::kFloat).t()) +
      layer->bias;
  EXPECT_LT((y - expected).abs().max().item<double>(), 0.05);
  const double error = (y - layer(x)).abs().max().item<double>();
  EXPECT_GT(error, 0.0) << "the product ran in float32";
  EXPECT_LT(error / layer(x).abs().max().item<double>(), 0.02);
}

// Float32 inference runs x·Wᵀ + b as one GEMM into the bias (model/kernels/mixed_linear.cc);
// anything else (autograd, a strided input) is LibTorch's linear itself.
TEST(PrecisionTest, Fp32InferenceLinearMatchesLibTorchAndLeavesAutogradAlone) {
  torch::manual_seed(4);
  for (const bool bias : {true, false}) {
    torch::nn::Linear layer(torch::nn::LinearOptions(64, 96).bias(bias));
    const auto x = torch::randn({3, 37, 64});
    const auto expected = layer(x).detach();
    {
      torch::NoGradGuard no_grad;
      const auto y = MixedLinear(layer, {}, x);
      ASSERT_EQ(y.sizes(), expected.sizes());
      EXPECT_TRUE(torch::allclose(y, expected, 1e-5, 1e-5)) << "bias " << bias;
      const auto strided = torch::randn({64, 37}).t();
      EXPECT_TRUE(torch::equal(MixedLinear(layer, {}, strided), layer(strided)));
    }
    const auto trained = MixedLinear(layer, {}, x);
    EXPECT_TRUE(trained.requires_grad());
    trained.sum().backward();
    EXPECT_TRUE(layer->weight.grad().defined());
  }
}

// The largest |p_bf16 − p_fp32| over the documents, and whether any differed at all.
struct Difference {
  double max_abs = 0;
  bool any = false;
};

// Every document's probabilities at `precision`, classified `batch` at a time.
std::vector<std::vector<float>> ClassifyAll(TaylorShiftEncoder& model,
                                            const std::vector<std::string>& documents, int batch,
                                            Precision precision) {
  model->set_precision(precision);
  std::vector<std::vector<float>> probabilities;
  for (std::size_t i = 0; i < documents.size(); i += batch) {
    const auto end = std::min(documents.size(), i + batch);
    const std::vector<std::string_view> views(documents.begin() + i, documents.begin() + end);
    auto result = ClassifyBatch(model, views, AttentionPath::kAuto, torch::kCPU);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return {};
    probabilities.insert(probabilities.end(), result->probabilities.begin(),
                         result->probabilities.end());
  }
  model->set_precision(Precision::kFp32);
  return probabilities;
}

Difference CompareProbabilities(TaylorShiftEncoder& model,
                                const std::vector<std::string>& documents, int batch) {
  const auto fp32 = ClassifyAll(model, documents, batch, Precision::kFp32);
  const auto bf16 = ClassifyAll(model, documents, batch, Precision::kBf16);
  Difference difference;
  EXPECT_EQ(fp32.size(), documents.size());
  EXPECT_EQ(bf16.size(), documents.size());
  for (std::size_t row = 0; row < std::min(fp32.size(), bf16.size()); ++row) {
    for (std::size_t c = 0; c < fp32[row].size(); ++c) {
      const double d = std::abs(static_cast<double>(bf16[row][c]) - fp32[row][c]);
      difference.max_abs = std::max(difference.max_abs, d);
      difference.any = difference.any || d > 0;
    }
  }
  return difference;
}

class Bf16AccuracyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const absl::Status bf16 = CheckPrecisionSupported(Precision::kBf16, torch::kCPU);
        !bf16.ok()) {
      GTEST_SKIP() << bf16.message();
    }
  }
};

TEST_F(Bf16AccuracyTest, ListOpsDemoModelStaysWithin002OfFp32) {
  auto loaded = LoadCheckpoint(SourceDir() + "/models/listops-demo.tsckpt");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ListOpsGeneratorOptions options;
  options.count = 64;
  options.min_length = 10;
  options.max_length = loaded->options.max_length();
  options.seed = 77;
  auto data = GenerateListOpsDataset(options);
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<std::string> documents;
  for (const auto& example : data->examples) documents.push_back(example.tokens);
  const Difference difference = CompareProbabilities(loaded->model, documents, 8);
  EXPECT_LT(difference.max_abs, 0.02);
  EXPECT_TRUE(difference.any) << "bf16 never ran";
  RecordProperty("max_abs_difference", std::to_string(difference.max_abs));
}

TEST_F(Bf16AccuracyTest, SourceLanguageDemoModelStaysWithin002OfFp32) {
  auto loaded = LoadCheckpoint(SourceDir() + "/models/source-lang-demo.tsckpt");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // Real source files of this repository, cut to the model's length.
  std::vector<std::string> documents;
  for (const char* file : {"model/networks/encoder.cc", "model/networks/attention.cc",
                           "server/config.cc", "bench/serving_bench.py", "scripts/test",
                           "README.md", "model/networks/encoder.h", "client/tsctl.cc"}) {
    std::string document = ReadFile(SourceDir() + "/" + file).value();
    ASSERT_FALSE(document.empty()) << file;
    document.resize(std::min<std::size_t>(document.size(), loaded->options.max_length()));
    documents.push_back(document);
  }
  const Difference difference = CompareProbabilities(loaded->model, documents, 4);
  EXPECT_LT(difference.max_abs, 0.02);
  EXPECT_TRUE(difference.any) << "bf16 never ran";
}

TEST_F(Bf16AccuracyTest, PaperSizeListOpsModelStaysWithin002OfFp32At2000Bytes) {
  // The configuration: C 512, H 16 (d 32), depth 4, MLP ratio 2, 2000-byte documents.
  torch::manual_seed(11);
  TaylorShiftEncoderOptions options(512, 4, 16, 2000, 10);
  options.mlp_hidden(1024);
  TaylorShiftEncoder model(options);
  model->eval();
  std::mt19937 rng(5);
  std::vector<std::string> documents;
  for (int i = 0; i < 4; ++i) {
    std::string document(2000, ' ');
    for (auto& c : document)
      c = static_cast<char>(std::uniform_int_distribution<int>(32, 126)(rng));
    documents.push_back(document);
  }
  const Difference difference = CompareProbabilities(model, documents, 2);
  EXPECT_LT(difference.max_abs, 0.02);
  EXPECT_TRUE(difference.any) << "bf16 never ran";
}

TEST(PrecisionTest, TrainingModeIgnoresThePrecision) {
  torch::manual_seed(4);
  TaylorShiftEncoderOptions options(64, 1, 4, 300, 3);
  TaylorShiftEncoder model(options);
  const auto tokens = torch::randint(0, 256, {2, 300}, torch::kLong);
  model->train();
  const auto fp32 = model->forward(tokens).detach();
  model->set_precision(Precision::kBf16);
  EXPECT_EQ(model->precision(), Precision::kBf16);
  EXPECT_TRUE(torch::equal(model->forward(tokens).detach(), fp32));
}

}  // namespace
}  // namespace ts
