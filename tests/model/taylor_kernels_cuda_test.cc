// The fused CUDA kernels' host side, in the CUDA build on any machine (no GPU needed): the
// feature table every kernel indexes by, how the efficient path splits the keys over blocks and
// the workspace it asks for (forward and backward), and shapes the launchers refuse before
// launching anything. What the kernels compute is checked on a GPU by aten_form_test's FusedCuda
// tests.
#include "model/kernels/taylor_kernels_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ts::cuda_kernels {
namespace {

int Features(int d) { return (d + 1) * (d + 2) / 2; }

// Every pair i ≤ j of [x | 1] exactly once, in row order, for every head dimension with a kernel
// and a few without.
TEST(TaylorKernelsCudaHostTest, FeaturePairsCoverEveryPairOnceInOrder) {
  for (const int d : {1, 3, 8, 16, 31, 32, 64, 128}) {
    std::vector<std::pair<int, int>> expected;
    for (int i = 0; i <= d; ++i) {
      for (int j = i; j <= d; ++j) expected.emplace_back(i, j);
    }
    ASSERT_EQ(static_cast<int>(expected.size()), Features(d));
    for (int f = 0; f < Features(d); ++f) {
      int i = -1;
      int j = -1;
      FeaturePair(f, d + 1, i, j);
      ASSERT_EQ(std::make_pair(i, j), expected[static_cast<std::size_t>(f)])
          << "d=" << d << " feature " << f;
    }
  }
}

// The backward's contraction, group by group of 64 features as FeatureGradKernel runs it, gives
// ∂/∂x̃_a of Σ_f w_f·x̃_i x̃_j: Σ over the pairs holding a of w_f times the other factor (twice
// x̃_a for the square), for every a < d of every head dimension with a kernel.
TEST(TaylorKernelsCudaHostTest, FeatureGradContractionSumsEveryPairHoldingA) {
  std::uint32_t seed = 12345;
  const auto uniform = [&seed] {
    seed = seed * 1664525U + 1013904223U;
    return static_cast<float>(seed >> 8) / static_cast<float>(1U << 24) - 0.5F;
  };
  for (const int d : {8, 16, 32, 64}) {
    const int m = d + 1;
    std::vector<float> x(static_cast<std::size_t>(m));
    for (float& value : x) value = uniform();
    x[static_cast<std::size_t>(d)] = 1.0F;
    std::vector<float> w(static_cast<std::size_t>(Features(d)));
    for (float& value : w) value = uniform();
    for (int a = 0; a < d; ++a) {
      double expected = 0.0;
      for (int f = 0; f < Features(d); ++f) {
        int i = 0;
        int j = 0;
        FeaturePair(f, m, i, j);
        if (i == a) expected += w[static_cast<std::size_t>(f)] * x[static_cast<std::size_t>(j)];
        if (j == a) expected += w[static_cast<std::size_t>(f)] * x[static_cast<std::size_t>(i)];
      }
      double actual = 0.0;
      for (int first = 0; first < Features(d); first += 64) {
        const int last = std::min(first + 64, Features(d));
        int row_first = 0;
        int row_last = 0;
        int j = 0;
        FeaturePair(first, m, row_first, j);
        FeaturePair(last - 1, m, row_last, j);
        actual += FeatureGradContraction(x.data(), w.data() + first, a, m, first, last, row_first,
                                         row_last);
      }
      EXPECT_NEAR(actual, expected, 1e-5) << "d=" << d << " a=" << a;
    }
  }
}

// A packed batch's rows: sequence b's token t of head h at (starts[b] + t)·token + h·head, each
// sequence with its own number of rows; a padded batch's at b·batch + h·head + t·token, every
// sequence with `tokens` rows. (q of a qkv product [rows, 3, H, d]: token = 3·H·d, head = d.)
TEST(TaylorKernelsCudaHostTest, LayoutsAddressPackedAndPaddedRows) {
  constexpr int kHeads = 4;
  constexpr int kDim = 8;
  const int starts[] = {0, 2, 3, 10};
  const TokenLayout packed{0, kDim, 3 * kHeads * kDim};
  AttentionArgs args;
  args.starts = starts;
  args.tokens = 7;
  const int lengths[] = {2, 1, 7};
  for (int b = 0; b < 3; ++b) {
    EXPECT_EQ(SequenceRows(args, b), lengths[b]);
    for (int h = 0; h < kHeads; ++h) {
      for (int t = 0; t < lengths[b]; ++t) {
        EXPECT_EQ(HeadOffset(packed, starts, b, h) + t * packed.token,
                  static_cast<std::int64_t>(starts[b] + t) * 3 * kHeads * kDim + h * kDim);
      }
    }
  }
  args.starts = nullptr;
  EXPECT_EQ(SequenceRows(args, 2), 7);
  // [B, N, 3, H, d] read as q [B, H, N, d] (N = 7).
  const TokenLayout padded{7 * 3 * kHeads * kDim, kDim, 3 * kHeads * kDim};
  EXPECT_EQ(HeadOffset(padded, nullptr, 2, 3) + 5 * padded.token,
            ((2 * 7 + 5) * 3 * kHeads + 3) * kDim);
}

AttentionArgs Shape(int batch, int heads, int tokens, int d) {
  AttentionArgs args;
  args.batch = batch;
  args.heads = heads;
  args.tokens = tokens;
  args.head_dim = d;
  return args;
}

// Slices cover every 64-token tile once, none is empty, and the workspace holds the partial
// states (float32) and the state (bfloat16) of every head.
TEST(TaylorKernelsCudaHostTest, EfficientPlanCoversEveryTileOnce) {
  struct Case {
    int batch, heads, tokens, d, multiprocessors;
  };
  for (const Case c :
       {Case{1, 8, 16384, 32, 132}, Case{1, 8, 1, 32, 132}, Case{8, 8, 1000, 64, 108},
        Case{2, 16, 65, 8, 132}, Case{64, 16, 4096, 16, 132}, Case{1, 1, 1 << 20, 64, 1}}) {
    const AttentionArgs args = Shape(c.batch, c.heads, c.tokens, c.d);
    const EfficientPlan plan = PlanEfficient(args, c.multiprocessors);
    const int tiles = (c.tokens + 63) / 64;
    EXPECT_GE(plan.slices, 1);
    EXPECT_GE(plan.slices * plan.tiles_per_slice, tiles) << c.tokens;
    EXPECT_LT((plan.slices - 1) * plan.tiles_per_slice, tiles) << "an empty slice at " << c.tokens;
    const std::size_t padded_features = (static_cast<std::size_t>(Features(c.d)) + 63) / 64 * 64;
    const std::size_t width = (static_cast<std::size_t>(c.d) + 1 + 15) / 16 * 16;
    const std::size_t heads = static_cast<std::size_t>(c.batch) * c.heads;
    const std::size_t partial = heads * plan.slices * padded_features * width * 4;
    const std::size_t state = heads * padded_features * width * 2;
    EXPECT_GE(plan.workspace_bytes, partial + state);
    EXPECT_LT(plan.workspace_bytes, partial + state + 512);
  }
}

// More slices for fewer heads: about four blocks per multiprocessor in the state pass.
TEST(TaylorKernelsCudaHostTest, EfficientPlanFillsTheGpu) {
  const EfficientPlan one_head = PlanEfficient(Shape(1, 1, 65536, 32), 132);
  const EfficientPlan many_heads = PlanEfficient(Shape(16, 16, 65536, 32), 132);
  EXPECT_GT(one_head.slices, many_heads.slices);
  EXPECT_EQ(many_heads.slices, 1);
  // 561 features in 9 groups of 64: 9 blocks per slice for one head.
  EXPECT_GE(one_head.slices * 9, 3 * 132);
}

// Shapes without a kernel are refused before anything is launched (no GPU touched).
TEST(TaylorKernelsCudaHostTest, UnsupportedShapesAreRefused) {
  EXPECT_FALSE(SupportedHeadDim(12));
  EXPECT_FALSE(SupportedHeadDim(128));
  for (const int d : {8, 16, 32, 64}) EXPECT_TRUE(SupportedHeadDim(d));
  EXPECT_EQ(PlanEfficient(Shape(1, 8, 100, 12), 132).workspace_bytes, 0U);
  EXPECT_EQ(PlanEfficient(Shape(1, 8, 0, 32), 132).workspace_bytes, 0U);
  EXPECT_EQ(PlanEfficient(Shape(300, 300, 100, 32), 132).workspace_bytes, 0U);  // > 65,535 heads
  EXPECT_EQ(LaunchDirect(Shape(1, 8, 100, 12), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchEfficient(Shape(1, 8, 100, 32), EfficientPlan{}, nullptr, nullptr),
            cudaErrorInvalidValue);
}

// The backward's workspace: the forward plan's partial states and two bfloat16 states (KV and
// dKV); and what the backward launchers refuse before launching anything: packed batches, missing
// gradients or dnom, head dimensions without a kernel.
TEST(TaylorKernelsCudaHostTest, BackwardWorkspaceAndRefusals) {
  const AttentionArgs args = Shape(2, 8, 1000, 32);
  const EfficientPlan plan = PlanEfficient(args, 132);
  const std::size_t state = static_cast<std::size_t>(2 * 8) * 576 * 48 * 2;  // 561 → 576 features
  EXPECT_GE(EfficientBackwardWorkspace(args, plan), plan.workspace_bytes + state);
  EXPECT_LT(EfficientBackwardWorkspace(args, plan), plan.workspace_bytes + state + 512);
  EXPECT_EQ(EfficientBackwardWorkspace(Shape(2, 8, 1000, 12), plan), 0U);

  std::vector<float> buffer(16);
  BackwardArgs backward;
  backward.forward = args;
  backward.dnom = backward.dq = backward.dk = backward.dv = buffer.data();
  BackwardArgs missing = backward;
  missing.dv = nullptr;
  BackwardArgs packed = backward;
  const int starts[] = {0, 500, 1000};
  packed.forward.starts = starts;
  BackwardArgs odd = backward;
  odd.forward.head_dim = 12;
  for (const BackwardArgs& refused : {missing, packed, odd}) {
    EXPECT_EQ(LaunchDirectBackward(refused, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(LaunchEfficientBackward(refused, plan, buffer.data(), nullptr),
              cudaErrorInvalidValue);
  }
  EXPECT_EQ(LaunchEfficientBackward(backward, EfficientPlan{}, buffer.data(), nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ts::cuda_kernels
