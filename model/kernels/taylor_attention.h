// TaylorShift attention on prepared heads: the math of docs/MODEL.md, on every path.
//
// All functions take q, k, v of shape [B, H, N, d] (float32 or float64, any device) and an
// optional key-padding mask [B, N] (bool, true = padded). Padded keys contribute nothing, and N
// in the normalisations is each sequence's own number of real tokens, so a sequence's output
// does not depend on the batch it is computed in. Rows of padded queries are finite but
// meaningless. All functions are differentiable when autograd is on; when it is off they use
// in-place kernels that keep at most one block of scores (direct) or one chunk of features
// (efficient) alive. Both paths have their own backward (see TaylorDirect, TaylorEfficient). Errors
// are thrown as c10::Error (callers at the model boundary convert).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "model/api/attention_path.h"

namespace ts {

// How a path is computed; every implementation computes the same mathematics.
enum class KernelImplementation {
  // By device, dtype and CPU: the fused CPU kernels where they apply; on CUDA the fused CUDA
  // kernels where they apply (bf16 products, no autograd); else the ATen form.
  kAuto,
  // Batched ATen operations on any device: one batched product per block of scores or chunk of
  // features, the features from one gather of their index pairs, blocks and chunks sized by the
  // device's free memory on CUDA. What CUDA devices run; forced on a CPU, it tests that code
  // there, and it is the oracle of the fused kernels.
  kAten,
  // The fused CUDA kernels (model/kernels/taylor_kernels_cuda.cu, fused_cuda_attention.h): the
  // direct and efficient paths' forward on a GPU with bf16 products, no autograd. kAuto runs
  // them wherever they apply; forced where they do not apply, a call throws and says why.
  kCuda,
};

// "auto", "aten", "cuda" (flags of the benchmarks); nullopt for any other name.
std::optional<KernelImplementation> ParseKernelImplementation(std::string_view name);

// What to compute: the Taylor-softmax polynomial and the normalisations (docs/MODEL.md).
struct TaylorMath {
  // Taylor-softmax polynomial a·x² + b·x + c; needs a > 0 and c ≥ b²/4a (A ≥ 0 everywhere).
  double a = 0.5;
  double b = 1.0;
  double c = 1.0;
  // Multiply the output by sqrt(N/d) (output normalisation of the paper).
  bool output_normalize = true;
};

// How to compute it: which implementation (model/kernels/attention_dispatch.h decides for kAuto)
// and each implementation's settings. Every choice computes the same mathematics, to its precision.
struct KernelChoice {
  KernelImplementation implementation = KernelImplementation::kAuto;
  // Direct path: at most this many score entries (B·H·rows·N) exist at once (on CUDA, at least
  // this many: a third of the device's available memory sets the block).
  std::int64_t direct_block_elements = std::int64_t{1} << 19;
  // Efficient path: tokens per chunk when building the d(d+1)/2 features (on CUDA, at least this
  // many: a quarter of the device's available memory sets the chunk).
  std::int64_t efficient_chunk_tokens = 512;
  // Products in bfloat16 with float32 sums (model/api/precision.h's bf16), without autograd.
  // Efficient path, float32 on the CPU: features and values are rounded to bfloat16, KV is
  // summed and scaled in float32 and rounded once for the query side; the denominators and the
  // division stay float32; ignored where HaveAvx512Bf16() is false
  // (model/kernels/bf16_feature_products.h). In the ATen form (CUDA, or kAten), both paths'
  // products: the direct path's scores and their squares are bfloat16, its numerators and
  // denominators float32; on a CPU only where LibTorch's bf16 products sum in float32
  // (model/kernels/bf16_matmul_probe.h), float32 products elsewhere. The fused CUDA kernels
  // multiply in bfloat16 only, so they run only with it.
  bool bf16_products = false;
  // Direct path, float32 on the CPU without autograd, heads of d ≤ 16 on a CPU with AVX-512F:
  // the scores live in registers, 16 query rows at a time (model/kernels/direct_tile.h), instead of
  // two GEMMs through a block of scores. Off runs the GEMM form (for comparison).
  bool direct_tiles = true;
  // Efficient path, float32 on the CPU without autograd, where the CPU level is AVX2 without
  // AVX-512: the two feature products in our own register tiles
  // (model/kernels/feature_products_avx2.h) instead of GEMMs. Off runs the GEMMs (for comparison).
  bool efficient_tiles = true;
};

// Both, as every attention function takes them (options.a, options.implementation, ...).
struct TaylorKernelOptions : TaylorMath, KernelChoice {};

// Throws c10::Error with a clear message unless a > 0 and c ≥ b²/(4a).
void CheckTaylorCoefficients(double a, double b, double c);

// q̂ = τ·q/‖q‖₂ and k̂ = k/‖k‖₂ (τ is [1, H, 1, 1] or undefined for τ = 1).
std::pair<torch::Tensor, torch::Tensor> NormalizeQueryKey(const torch::Tensor& q,
                                                          const torch::Tensor& k,
                                                          const torch::Tensor& temperature);

// Y = P·V (·sqrt(N/d)) with P = A / rowsum(A), A = a·S⊙S + b·S + c, S = q kᵀ, one block of
// query rows at a time. Under autograd, a custom backward recomputes the scores block by block:
// what a call keeps for backward is O(N·d) per head, and neither pass holds more than a few
// blocks of scores, never the N×N scores of a whole sequence. Not twice differentiable.
torch::Tensor TaylorDirect(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& key_padding_mask,
                           const TaylorKernelOptions& options);

// Same result in O(N·d³) from the d(d+1)/2 symmetric features of q⊠q, chunked over N. Under
// autograd, a custom backward recomputes the features chunk by chunk: what a call keeps for
// backward is O(N·d + F·d) per head (F = d(d+1)/2 + d + 1), and backward holds at most two
// chunks of features per head at a time, never the N×F features of a whole sequence. The
// forward computes the same values with and without autograd. Not twice differentiable.
torch::Tensor TaylorEfficient(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                              const TaylorKernelOptions& options);

// Straight ports of the reference algorithms (unfused; full d² features, unchunked).
// For tests and benchmarks only.
torch::Tensor TaylorDirectReference(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                                    const TaylorKernelOptions& options);
torch::Tensor TaylorEfficientReference(const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v,
                                       const torch::Tensor& key_padding_mask,
                                       const TaylorKernelOptions& options);

// Standard softmax(q kᵀ/√d) v on the raw (un-normalised) q, k; blocked over queries like the
// direct path.
torch::Tensor SoftmaxAttention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                               const TaylorKernelOptions& options);

// Dispatches on a concrete path (kAuto is resolved by the caller). q and k must already be
// normalised for the Taylor paths; the softmax path uses them as given.
torch::Tensor RunAttentionPath(AttentionPath path, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                               const TaylorKernelOptions& options);

}  // namespace ts
