// PackedForward (model/networks/packed_forward.h) against the encoder's padded forward on the
// same weights and tokens: every attention path, both embeddings, sequences of very different
// lengths in one batch (1 token, the whole width, and between), float64 to rounding and float32
// to 1e-5; on a GPU the same, and ClassifyBatch there takes it. Below it, the packed attention
// (model/kernels/packed_attention.h) against the padded paths per sequence, and on a GPU the fused
// CUDA kernels' packed form against the float64 oracle.
#include "model/networks/packed_forward.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "model/api/attention_path.h"
#include "model/api/precision.h"
#include "model/kernels/packed_attention.h"
#include "model/kernels/taylor_attention.h"
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
                               const std::vector<std::int64_t>& lengths, double tolerance,
                               Precision precision = Precision::kFp32) {
  torch::manual_seed(7);
  TaylorShiftEncoderOptions options(32, 2, 4, 48, 5);
  options.conv_embed(c.conv_embed).input_normalize(c.input_normalize);
  TaylorShiftEncoder model(options);
  model->to(device, dtype);
  model->eval();
  model->set_precision(precision);
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
  // The encoder's own checks and messages: token ids past the vocabulary, lengths past N.
  const auto message = [&](const torch::Tensor& t, const torch::Tensor& l) {
    try {
      PackedForward(*model, t, l, AttentionPath::kDirect);
    } catch (const c10::ValueError& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(torch::full({2, 4}, 300, torch::kLong), lengths)
                .find("token ids must be in [0, 256), got 300"),
            std::string::npos);
  EXPECT_NE(message(tokens, torch::tensor(std::vector<std::int64_t>{5, 2}))
                .find("lengths must be in [0, 4], got 5"),
            std::string::npos);
}

TEST(PackedForwardCudaTest, MatchesThePaddedForwardOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  for (const Case& c : Cases()) {
    for (const auto& lengths : kBatches) {
      ExpectPackedMatchesPadded(c, torch::kFloat, torch::kCUDA, lengths, 1e-5);
    }
  }
}

// bf16 products: the fused CUDA kernels on the packed rows against the padded batch's kernels.
TEST(PackedForwardCudaTest, Bf16MatchesThePaddedForwardOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  for (const Case& c : Cases()) {
    for (const auto& lengths : kBatches) {
      ExpectPackedMatchesPadded(c, torch::kFloat, torch::kCUDA, lengths, 2e-2, Precision::kBf16);
    }
  }
}

// Packed rows of sequences of `lengths` (q, k, v views of one [T, 3, H, d] tensor, as the qkv
// product gives them) and the same sequences padded to the longest.
struct PackedProblem {
  torch::Tensor qkv;                           // [T, 3, H, d]
  torch::Tensor q, k, v;                       // [T, H, d] views
  torch::Tensor padded_q, padded_k, padded_v;  // [B, H, N, d]
  torch::Tensor mask;                          // [B, N]
  PackedBatch batch;
};

PackedProblem MakePackedProblem(const std::vector<std::int64_t>& lengths, std::int64_t heads,
                                std::int64_t d, torch::Dtype dtype, const torch::Device& device) {
  torch::manual_seed(11);
  PackedProblem p;
  std::int64_t total = 0, width = 0;
  for (const std::int64_t n : lengths) {
    total += n;
    width = std::max(width, n);
  }
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  p.qkv = torch::randn({total, 3, heads, d}, options);
  p.q = p.qkv.select(1, 0);
  p.k = p.qkv.select(1, 1);
  p.v = p.qkv.select(1, 2);
  const auto b = static_cast<std::int64_t>(lengths.size());
  std::vector<torch::Tensor> qs, ks, vs;
  std::int64_t first = 0;
  for (const std::int64_t n : lengths) {
    const auto pad = [&](const torch::Tensor& x) {
      return torch::constant_pad_nd(x.narrow(0, first, n), {0, 0, 0, 0, 0, width - n})
          .transpose(0, 1);
    };
    qs.push_back(pad(p.q));
    ks.push_back(pad(p.k));
    vs.push_back(pad(p.v));
    first += n;
  }
  p.padded_q = torch::stack(qs);
  p.padded_k = torch::stack(ks);
  p.padded_v = torch::stack(vs);
  const auto lens =
      torch::tensor(lengths, torch::TensorOptions().dtype(torch::kLong).device(device));
  p.mask = torch::arange(width, lens.options()).unsqueeze(0) >= lens.unsqueeze(1);
  p.batch = PackBatch(lens, width);
  EXPECT_EQ(p.batch.sequences, b);
  return p;
}

// Each sequence's packed rows against its rows of `padded` [B, H, N, d].
double WorstSequenceError(const torch::Tensor& packed, const torch::Tensor& padded,
                          const std::vector<std::int64_t>& lengths) {
  double worst = 0;
  std::int64_t first = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    const auto mine = packed.narrow(0, first, lengths[b]).to(torch::kDouble).cpu();
    const auto theirs = padded[static_cast<std::int64_t>(b)]
                            .narrow(1, 0, lengths[b])
                            .transpose(0, 1)
                            .to(torch::kDouble)
                            .cpu();
    const double scale = std::max(1e-30, theirs.abs().max().item<double>());
    worst = std::max(worst, (mine - theirs).abs().max().item<double>() / scale);
    first += lengths[b];
  }
  return worst;
}

const std::vector<std::vector<std::int64_t>> kPackedLengths = {
    {1, 48, 17, 3, 47}, {65, 64, 1, 130}, {30, 30}, {1}};

TEST(PackedAttentionTest, PackBatchIndexesEverySequence) {
  const auto batch = PackBatch(torch::tensor(std::vector<std::int64_t>{2, 1, 3}), 4);
  EXPECT_EQ(batch.longest, 3);
  EXPECT_TRUE(batch.starts.equal(torch::tensor(std::vector<int>{0, 2, 3, 6})));
  EXPECT_TRUE(batch.rows.equal(torch::tensor(std::vector<std::int64_t>{0, 1, 4, 8, 9, 10})));
  EXPECT_TRUE(batch.spread.equal(
      torch::tensor(std::vector<std::int64_t>{0, 1, 0, 0, 2, 2, 2, 2, 3, 4, 5, 3})));
  ASSERT_TRUE(batch.key_padding_mask.defined());
  EXPECT_EQ(batch.key_padding_mask.sum().item<std::int64_t>(), 6);
  EXPECT_FALSE(
      PackBatch(torch::tensor(std::vector<std::int64_t>{4, 4}), 4).key_padding_mask.defined());
  EXPECT_THROW(PackBatch(torch::tensor(std::vector<std::int64_t>{0, 2}), 4), c10::Error);
  EXPECT_THROW(PackBatch(torch::tensor(std::vector<std::int64_t>{5, 2}), 4), c10::Error);
}

// Every path on packed rows equals the padded batch's, per sequence (on the CPU the packed rows
// spread to the padded layout: this checks the spreading and gathering).
TEST(PackedAttentionTest, EveryPathMatchesThePaddedBatch) {
  for (const auto dtype : {torch::kDouble, torch::kFloat}) {
    for (const auto& lengths : kPackedLengths) {
      const auto p = MakePackedProblem(lengths, 2, 8, dtype, torch::kCPU);
      torch::NoGradGuard no_grad;
      for (const auto path :
           {AttentionPath::kDirect, AttentionPath::kEfficient, AttentionPath::kSoftmax}) {
        const TaylorKernelOptions options;
        const auto packed = RunPackedAttentionPath(path, p.q, p.k, p.v, p.batch, options);
        const auto padded =
            RunAttentionPath(path, p.padded_q, p.padded_k, p.padded_v, p.mask, options);
        EXPECT_LE(WorstSequenceError(packed, padded, lengths),
                  dtype == torch::kDouble ? 1e-12 : 1e-5)
            << AttentionPathName(path) << ", " << lengths.size() << " sequences";
      }
    }
  }
}

// The fused CUDA kernels' packed form (strided q, k, v views, sequences cut by offsets) against
// the float64 padded paths on the CPU, every head dimension with a kernel.
TEST(PackedAttentionCudaTest, FusedKernelsMatchTheFloat64PaddedPaths) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  TaylorKernelOptions fused;
  fused.bf16_products = true;
  fused.implementation = KernelImplementation::kCuda;
  for (const std::int64_t d : {8, 16, 32, 64}) {
    for (const auto& lengths : kPackedLengths) {
      const auto p = MakePackedProblem(lengths, 3, d, torch::kFloat, torch::kCUDA);
      torch::NoGradGuard no_grad;
      const auto [q, k] = NormalizeQueryKey(p.q, p.k, {});
      const auto [padded_q, padded_k] = NormalizeQueryKey(p.padded_q, p.padded_k, {});
      for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
        const auto packed = RunPackedAttentionPath(path, q, k, p.v, p.batch, fused);
        const auto oracle = RunAttentionPath(
            path, padded_q.cpu().to(torch::kDouble), padded_k.cpu().to(torch::kDouble),
            p.padded_v.cpu().to(torch::kDouble), p.mask.cpu(), TaylorKernelOptions());
        EXPECT_LE(WorstSequenceError(packed, oracle, lengths), 1e-2)
            << AttentionPathName(path) << " d=" << d << ", " << lengths.size() << " sequences";
      }
    }
  }
}

}  // namespace
}  // namespace ts
