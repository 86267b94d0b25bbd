#include "model/kernels/cpu_gemm.h"

#include <atomic>

#if defined(TS_HAVE_DNNL)
#include <oneapi/dnnl/dnnl.h>
#endif

namespace ts {
namespace {

std::atomic<bool> use_onednn{true};

#if defined(TS_HAVE_DNNL)
// A row-major operand as oneDNN's sgemm wants it: transposition flag and leading dimension, or
// false when neither stride is 1 (then the caller falls back).
bool Layout(const torch::Tensor& t, char* trans, std::int64_t* ld) {
  if (t.stride(1) == 1 && (t.size(0) <= 1 || t.stride(0) >= t.size(1))) {
    *trans = 'N';
    *ld = std::max<std::int64_t>(t.size(0) <= 1 ? t.size(1) : t.stride(0), 1);
    return true;
  }
  if (t.stride(0) == 1 && (t.size(1) <= 1 || t.stride(1) >= t.size(0))) {
    *trans = 'T';
    *ld = std::max<std::int64_t>(t.size(1) <= 1 ? t.size(0) : t.stride(1), 1);
    return true;
  }
  return false;
}

bool DnnlSgemm(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b, float beta) {
  char ta = 'N', tb = 'N';
  std::int64_t lda = 0, ldb = 0;
  if (!Layout(a, &ta, &lda) || !Layout(b, &tb, &ldb)) return false;
  if (out.stride(1) != 1 || (out.size(0) > 1 && out.stride(0) < out.size(1))) return false;
  const std::int64_t m = out.size(0), n = out.size(1), k = a.size(1);
  if (m == 0 || n == 0) return true;
  const std::int64_t ldc = std::max<std::int64_t>(out.size(0) <= 1 ? n : out.stride(0), 1);
  if (k == 0) {
    if (beta == 0.0f)
      out.zero_();
    else
      out.mul_(beta);
    return true;
  }
  return dnnl_sgemm(ta, tb, m, n, k, 1.0f, a.data_ptr<float>(), lda, b.data_ptr<float>(), ldb, beta,
                    out.data_ptr<float>(), ldc) == dnnl_success;
}

#endif

}  // namespace

void MatmulInto(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b, double beta) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && a.size(1) == b.size(0) &&
                  out.size(0) == a.size(0) && out.size(1) == b.size(1),
              "MatmulInto: shapes ", out.sizes(), " = ", a.sizes(), " · ", b.sizes());
#if defined(TS_HAVE_DNNL)
  if (use_onednn.load(std::memory_order_relaxed) && out.scalar_type() == torch::kFloat &&
      a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat && out.is_cpu() &&
      a.is_cpu() && b.is_cpu() && DnnlSgemm(out, a, b, static_cast<float>(beta))) {
    return;
  }
#endif
  if (beta == 0.0) {
    at::mm_out(out, a, b);
  } else {
    at::addmm_out(out, out, a, b, beta, 1.0);
  }
}

void SgemmInto(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
               float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
#if defined(TS_HAVE_DNNL)
  if (use_onednn.load(std::memory_order_relaxed) && k > 0 &&
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c,
                 ldc) == dnnl_success) {
    return;
  }
#endif
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  // from_blob takes a non-const pointer; a and b are only read.
  const auto view = [&](const float* x, bool trans, std::int64_t rows, std::int64_t cols,
                        std::int64_t ld) {
    auto* data = const_cast<float*>(x);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
    return trans ? torch::from_blob(data, {rows, cols}, {1, ld}, f32)
                 : torch::from_blob(data, {rows, cols}, {ld, 1}, f32);
  };
  auto out = torch::from_blob(c, {m, n}, {ldc, 1}, f32);
  MatmulInto(out, view(a, trans_a, m, k, lda), view(b, trans_b, k, n, ldb), beta);
}

const char* CpuGemmBackend() {
#if defined(TS_HAVE_DNNL)
  if (use_onednn.load(std::memory_order_relaxed)) return "onednn";
#endif
  return "libtorch";
}

void SetCpuGemmUseOneDnn(bool use) { use_onednn.store(use, std::memory_order_relaxed); }

}  // namespace ts
