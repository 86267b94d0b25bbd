// Matrix products for one thread's share of a parallel CPU kernel (the attention kernels run one
// head or one block per task inside at::parallel_for, each with single-threaded GEMMs).
//
// Why not at::mm: LibTorch hands float GEMMs to OpenBLAS, whose per-call overhead and packing
// are heavy on these skinny shapes. oneDNN's sgemm (libdnnl, the oneDNN LibTorch itself is
// linked against) is ≈1.6× faster on the kernels' shapes
// ([512 × 561]ᵀ·[512 × 33] and back) on one thread (docs/PERFORMANCE.md). Without oneDNN (a
// LibTorch that bundles its own, e.g. a CUDA build) and for float64, at::addmm_out is used.
//
// Thread-safe: calls only read their inputs and write `out`.
#pragma once

#include <torch/torch.h>

namespace ts {

// out = a·b + beta·out for 2-D CPU tensors of one floating dtype; `a` and `b` may be transposed
// views (either stride may be 1) and `out` must have unit column stride. With beta = 0, `out`'s
// previous contents are ignored (NaN included). Runs on the calling thread only when called
// inside a parallel region.
void MatmulInto(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                double beta = 0.0);

// c = op(a)·op(b) + beta·c for row-major float32 matrices, on the calling thread when called
// inside a parallel region: op(a) [m, k] is a itself (row stride lda) or, with trans_a, the
// transpose of a stored [k, m]; likewise op(b) [k, n]; c [m, n] has row stride ldc. With
// beta = 0, c's previous contents are ignored. For kernels that keep their operands in plain
// buffers: no tensor is created on the oneDNN path.
void SgemmInto(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
               float* c, std::int64_t ldc);

// Whether float products go to oneDNN ("onednn") or LibTorch's BLAS ("libtorch"), for logs and
// benchmark reports.
const char* CpuGemmBackend();

// For side-by-side benchmarks (bench/model_profile --cpu-gemm): false sends float products to
// LibTorch even where oneDNN is available. Process-wide; default true.
void SetCpuGemmUseOneDnn(bool use);

}  // namespace ts
