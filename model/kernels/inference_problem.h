// What the fused CPU inference kernels (model/kernels/efficient_inference.h,
// model/kernels/direct_inference.h) share: q, k and v read in place from the qkv projection's
// output through their strides, the input normalisation folded into one factor per row, each
// sequence's own token count, and y written as [B, N, H, d] where the output projection reads it.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <vector>

namespace ts {

// How q and k are scaled before the kernel: q̂ = τ_h·q/‖q‖₂ and k̂ = k/‖k‖₂ with `normalize`
// (‖x‖ clamped to 1e-12 as torch's normalize does; τ = `temperature` [1, H, 1, 1], or 1 when
// undefined), else q̂ = query_factor·q and k̂ = k.
struct QueryKeyScaling {
  bool normalize = true;
  torch::Tensor temperature;
  double query_factor = 1.0;
};

// Whether a fused inference kernel can run on these inputs: CPU float32, no autograd.
bool CanRunFusedInference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// One call's inputs as raw pointers, and its output.
struct InferenceProblem {
  std::int64_t batch = 0, heads = 0, tokens = 0, d = 0;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  std::array<std::int64_t, 3> q_strides{}, k_strides{}, v_strides{};  // batch, head, token
  const bool* padded = nullptr;                                       // [B, N] or null
  std::vector<float> counts;       // real tokens per sequence (≥ 1)
  std::vector<float> temperature;  // [H], 1 when not given
  QueryKeyScaling scaling;
  torch::Tensor mask;    // keeps `padded` alive
  torch::Tensor output;  // [B, N, H, d]
  float* y = nullptr;    // output's data

  bool Padded(std::int64_t b, std::int64_t token) const {
    return padded != nullptr && padded[b * tokens + token];
  }
  // Where y[b, token, h, :] starts.
  float* OutputRow(std::int64_t b, std::int64_t token, std::int64_t h) const {
    return y + ((b * tokens + token) * heads + h) * d;
  }
};

// Checks q, k, v ([B, H, N, d] float32 CPU views with unit stride in d, no autograd) and the
// mask (bool [B, N]), and reads what the kernels need; throws c10::Error naming `kernel`.
InferenceProblem PrepareInference(const char* kernel, const torch::Tensor& q,
                                  const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& key_padding_mask,
                                  const QueryKeyScaling& scaling);

// Where head (b, h)'s rows start, and the factor its queries are scaled by.
struct InferenceHead {
  InferenceHead(const InferenceProblem& p, std::int64_t b, std::int64_t h);
  std::int64_t b, h;
  const float *q, *k, *v;
  float query_factor;
};

// scale_r for `rows` rows of x (row stride `stride`, unit column stride): factor / max(‖x_r‖, ε)
// when normalising, else factor.
void RowScales(const float* x, std::int64_t stride, std::int64_t rows, std::int64_t d,
               bool normalize, float factor, float* scale);

}  // namespace ts
