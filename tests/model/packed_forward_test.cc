// PackedForward (model/networks/packed_forward.h) against the encoder's padded forward on the
// same weights and tokens: every attention path, both embeddings, sequences of very different
// lengths in one batch (1 token, the whole width, and between), float64 to rounding and float32
// to 1e-5; on a GPU the same, and ClassifyBatch there takes it.
#include "model/networks/packed_forward.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "model/api/attention_path.h"
#include "model/networks/encoder.h"

namespace ts {
namespace {

struct Case {
  bool conv_embed = false;
  bool input_normalize = true;
  AttentionPath path = AttentionPath::kDirect;
};

std::string Describe(const Case& c) {
  return std::string(AttentionPathName(c.path)) + (c.conv_embed ? " conv" : " linear") +
         (c.input_normalize ? " normalised" : " plain");
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const bool conv : {false, true}) {
    for (const bool normalize : {true, false}) {
      for (const AttentionPath path :
           {AttentionPath::kDirect, AttentionPath::kEfficient, AttentionPath::kSoftmax}) {
        cases.push_back({conv, normalize, path});
      }
    }
  }
  return cases;
}

// The padded forward's and PackedForward's logits of one batch, on `device` in `dtype`.
void ExpectPackedMatchesPadded(const Case& c, torch::Dtype dtype, const torch::Device& device,
                               const std::vector<std::int64_t>& lengths, double tolerance) {
  torch::manual_seed(7);
  TaylorShiftEncoderOptions options(32, 2, 4, 48, 5);
  options.conv_embed(c.conv_embed).input_normalize(c.input_normalize);
  TaylorShiftEncoder model(options);
  model->to(device, dtype);
  model->eval();
  const auto batch = static_cast<std::int64_t>(lengths.size());
  std::int64_t width = 0;
  for (const std::int64_t n : lengths) width = std::max(width, n);
  const auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  const torch::Tensor tokens = torch::randint(0, 256, {batch, width}, ids);
  const torch::Tensor lens = torch::tensor(lengths, ids);
  torch::InferenceMode inference;
  const torch::Tensor padded = model->forward(tokens, lens, c.path).to(torch::kDouble).cpu();
  const torch::Tensor packed = PackedForward(*model, tokens, lens, c.path).to(torch::kDouble).cpu();
  ASSERT_EQ(packed.sizes(), padded.sizes()) << Describe(c);
  EXPECT_TRUE(torch::isfinite(packed).all().item<bool>()) << Describe(c);
  const double scale = std::max(1.0, padded.abs().max().item<double>());
  const double error = (packed - padded).abs().max().item<double>() / scale;
  EXPECT_LE(error, tolerance) << Describe(c) << ", lengths of " << batch << " sequences";
}

const std::vector<std::vector<std::int64_t>> kBatches = {
    {1, 48, 17, 3, 47},  // very different lengths in one batch
    {30, 30, 30},        // nothing padded
    {1},                 // one token
};

TEST(PackedForwardTest, MatchesThePaddedForwardInFloat64) {
  for (const Case& c : Cases()) {
    for (const auto& lengths : kBatches) {
      ExpectPackedMatchesPadded(c, torch::kDouble, torch::kCPU, lengths, 1e-12);
    }
  }
}

TEST(PackedForwardTest, MatchesThePaddedForwardInFloat32) {
  for (const Case& c : Cases()) {
    for (const auto& lengths : kBatches) {
      ExpectPackedMatchesPadded(c, torch::kFloat, torch::kCPU, lengths, 1e-5);
    }
  }
}

TEST(PackedForwardTest, RefusesTrainingModeAndBadShapes) {
  TaylorShiftEncoder model(TaylorShiftEncoderOptions(16, 1, 2, 8, 3));
  const torch::Tensor tokens = torch::zeros({2, 4}, torch::kLong);
  const torch::Tensor lengths = torch::tensor(std::vector<std::int64_t>{4, 2});
  EXPECT_THROW(PackedForward(*model, tokens, lengths, AttentionPath::kDirect), c10::Error);
  model->eval();
  EXPECT_THROW(PackedForward(*model, tokens, lengths.narrow(0, 0, 1), AttentionPath::kDirect),
               c10::Error);
  EXPECT_THROW(
      PackedForward(*model, torch::zeros({2, 9}, torch::kLong), lengths, AttentionPath::kDirect),
      c10::Error);
}

TEST(PackedForwardCudaTest, MatchesThePaddedForwardOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  for (const Case& c : Cases()) {
    for (const auto& lengths : kBatches) {
      ExpectPackedMatchesPadded(c, torch::kFloat, torch::kCUDA, lengths, 1e-5);
    }
  }
}

}  // namespace
}  // namespace ts
