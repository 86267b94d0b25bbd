#include "model/kernels/bf16_matmul_probe.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ts {

namespace {

double RelativeError(const torch::Tensor& got, const torch::Tensor& exact) {
  const double scale = exact.abs().max().item<double>();
  return (got.to(torch::kFloat64) - exact).abs().max().item<double>() / scale;
}

// The product's error, or throws what LibTorch threw.
double MeasureOnce(std::int64_t depth) {
  torch::NoGradGuard no_grad;
  const auto gen = at::detail::createCPUGenerator(/*seed_val=*/2051);
  // Uniform (0, 1]: positive terms, so no cancellation hides a lossy sum.
  const auto draw = [&](std::int64_t batch, std::int64_t rows, std::int64_t cols) {
    return (1.0 - torch::rand({batch, rows, cols}, gen, torch::kFloat64)).to(torch::kBFloat16);
  };
  const auto a = draw(2, kBf16ProbeRows, depth);
  const auto b = draw(2, depth, kBf16ProbeCols);
  const auto exact = torch::bmm(a.to(torch::kFloat64), b.to(torch::kFloat64));
  const double mm = RelativeError(torch::mm(a[0], b[0]), exact[0]);
  const double bmm = RelativeError(torch::bmm(a, b), exact);
  return std::max(mm, bmm);
}

}  // namespace

std::string Bf16MatmulProbe::Describe() const {
  if (!ran) return absl::StrFormat("LibTorch refused a bf16 product (%s)", error);
  return absl::StrFormat("a bf16 product of %d terms was off by %.3g of its largest entry (%s)",
                         kBf16ProbeDepth, relative_error,
                         float32_sums() ? "float32 sums" : "LibTorch sums in bfloat16 here");
}

Bf16MatmulProbe MeasureCpuBf16Matmul(std::int64_t depth) {
  Bf16MatmulProbe probe;
  try {
    probe.relative_error = MeasureOnce(depth);
    probe.ran = true;
    return probe;
  } catch (const std::exception& e) {
    probe.error = e.what();
  }
  if (!at::globalContext().userEnabledMkldnn()) return probe;
  // oneDNN refused bf16 (it is capped below the ISA it needs). A CPU that truly lacks AVX-512 never
  // reaches oneDNN for bf16: LibTorch's own kernels run. Take that path for the whole process, so
  // that a capped run computes what such a CPU computes.
  at::globalContext().setUserEnabledMkldnn(false);
  probe.onednn_bypassed = true;
  try {
    probe.relative_error = MeasureOnce(depth);
    probe.ran = true;
    probe.error.clear();
  } catch (const std::exception& e) {
    probe.error = e.what();
  }
  return probe;
}

const Bf16MatmulProbe& CpuBf16Matmul() {
  static const Bf16MatmulProbe probe = MeasureCpuBf16Matmul();
  return probe;
}

absl::Status CheckCpuBf16SumsInFloat32() {
  const Bf16MatmulProbe& probe = CpuBf16Matmul();
  if (probe.float32_sums()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "precision bf16: ", probe.Describe(),
      "; use precision: fp32 (or a CPU with AVX-512, where LibTorch hands bf16 products to "
      "oneDNN, which sums in float32)"));
}

}  // namespace ts
