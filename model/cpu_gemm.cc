#include "model/cpu_gemm.h"

#include <atomic>
#include <map>
#include <tuple>

#include "model/mixed_linear.h"

#if defined(TS_HAVE_DNNL)
#include <oneapi/dnnl/dnnl.hpp>
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

// A 2-D tensor as a oneDNN memory descriptor (any strides).
dnnl::memory::desc Desc(const torch::Tensor& t, dnnl::memory::data_type type) {
  return dnnl::memory::desc({t.size(0), t.size(1)}, type, {t.stride(0), t.stride(1)});
}

// One matmul primitive per shape, layout and beta, per thread: creating one costs tens of
// microseconds, as much as a small product, and a kernel repeats a handful of shapes.
struct Bf16Key {
  std::int64_t m, n, k, as0, as1, bs0, bs1, cs0;
  float beta;
  bool operator<(const Bf16Key& o) const {
    return std::tie(m, n, k, as0, as1, bs0, bs1, cs0, beta) <
           std::tie(o.m, o.n, o.k, o.as0, o.as1, o.bs0, o.bs1, o.cs0, o.beta);
  }
};

struct Bf16Primitive {
  dnnl::memory::desc a, b, c;
  dnnl::matmul matmul;
};

dnnl::engine& CpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

const Bf16Primitive& CachedBf16Primitive(const torch::Tensor& out, const torch::Tensor& a,
                                         const torch::Tensor& b, float beta) {
  // A kernel uses two or three shapes; the bound only keeps odd callers from growing it.
  constexpr std::size_t kMaxEntries = 64;
  thread_local std::map<Bf16Key, Bf16Primitive> cache;
  const Bf16Key key{out.size(0), out.size(1), a.size(1),     a.stride(0), a.stride(1),
                    b.stride(0), b.stride(1), out.stride(0), beta};
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= kMaxEntries) cache.clear();
  using dt = dnnl::memory::data_type;
  Bf16Primitive entry{Desc(a, dt::bf16), Desc(b, dt::bf16), Desc(out, dt::f32), {}};
  dnnl::primitive_attr attr;
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  entry.matmul = dnnl::matmul(dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(entry.a, entry.b, entry.c), attr, CpuEngine()));
  return cache.emplace(key, std::move(entry)).first->second;
}
#endif

}  // namespace

void MatmulBf16Into(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                    double beta) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && a.size(1) == b.size(0) &&
                  out.size(0) == a.size(0) && out.size(1) == b.size(1),
              "MatmulBf16Into: shapes ", out.sizes(), " = ", a.sizes(), " · ", b.sizes());
  TORCH_CHECK(a.scalar_type() == torch::kBFloat16 && b.scalar_type() == torch::kBFloat16 &&
                  out.scalar_type() == torch::kFloat && out.is_cpu() && a.is_cpu() && b.is_cpu(),
              "MatmulBf16Into: needs bfloat16 inputs and a float32 output on the CPU");
  TORCH_CHECK(HaveBf16Matmul(), "MatmulBf16Into: this build or CPU has no bfloat16 matmul");
#if defined(TS_HAVE_DNNL)
  if (out.numel() == 0) return;
  if (a.size(1) == 0) {
    if (beta == 0.0)
      out.zero_();
    else
      out.mul_(beta);
    return;
  }
  const auto& entry = CachedBf16Primitive(out, a, b, static_cast<float>(beta));
  thread_local dnnl::stream stream(CpuEngine());
  entry.matmul.execute(stream,
                       {{DNNL_ARG_SRC, dnnl::memory(entry.a, CpuEngine(), a.data_ptr())},
                        {DNNL_ARG_WEIGHTS, dnnl::memory(entry.b, CpuEngine(), b.data_ptr())},
                        {DNNL_ARG_DST, dnnl::memory(entry.c, CpuEngine(), out.data_ptr())}});
  stream.wait();
#endif
}

bool HaveBf16Matmul() {
#if defined(TS_HAVE_DNNL)
  return HostCpuHasBf16();
#else
  return false;
#endif
}

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

const char* CpuGemmBackend() {
#if defined(TS_HAVE_DNNL)
  if (use_onednn.load(std::memory_order_relaxed)) return "onednn";
#endif
  return "libtorch";
}

void SetCpuGemmUseOneDnn(bool use) { use_onednn.store(use, std::memory_order_relaxed); }

}  // namespace ts
