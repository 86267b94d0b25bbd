#include "model/direct_inference.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/cpu_gemm.h"
#include "model/parallel.h"

namespace ts {
namespace {

// What every task shares. A/a = (S + β)² + γ with β = b/2a and γ = c/a − b²/4a²; the factor a
// cancels in P = A / rowsum(A). β rides in the first GEMM as an extra column
// ([q̂ | β]·[k̂ | 1]ᵀ = S + β) and γ in the second (γ·Σ_j v''_j with v''_j = [v_j | 1], zero for
// padded keys), as in TaylorDirect.
struct Problem : InferenceProblem {
  explicit Problem(InferenceProblem base) : InferenceProblem(std::move(base)) {}
  std::int64_t rows = 0;    // query rows per task
  std::int64_t blocks = 0;  // tasks per head
  float beta = 0.0f, gamma = 0.0f;
  bool output_normalize = true;
};

// One thread's operands, reused from task to task; the keys and values of the last head seen.
struct Buffers {
  Buffers(std::int64_t tokens, std::int64_t rows, std::int64_t d)
      : keys(static_cast<std::size_t>(tokens * (d + 1))),
        values(static_cast<std::size_t>(tokens * (d + 1))),
        queries(static_cast<std::size_t>(rows * (d + 1))),
        scores(static_cast<std::size_t>(rows * tokens)),
        nom(static_cast<std::size_t>(rows * (d + 1))),
        constant(static_cast<std::size_t>(d + 1)),
        scale(static_cast<std::size_t>(std::max(tokens, rows))) {}
  std::vector<float> keys, values, queries, scores, nom, constant, scale;
  std::int64_t head = -1;
};

// keys = [k̂ | 1], values = [v | 1] (zero rows for padded keys), constant = γ·Σ_j values_j.
void PrepareKeys(const Problem& p, const InferenceHead& head, Buffers& buf) {
  const std::int64_t width = p.d + 1;
  RowScales(head.k, p.k_strides[2], p.tokens, p.d, p.scaling.normalize, 1.0f, buf.scale.data());
  std::fill(buf.constant.begin(), buf.constant.end(), 0.0f);
  for (std::int64_t j = 0; j < p.tokens; ++j) {
    const float* kj = head.k + j * p.k_strides[2];
    const float* vj = head.v + j * p.v_strides[2];
    float* key = buf.keys.data() + j * width;
    float* value = buf.values.data() + j * width;
    const float s = buf.scale[static_cast<std::size_t>(j)];
    for (std::int64_t i = 0; i < p.d; ++i) key[i] = s * kj[i];
    key[p.d] = 1.0f;
    if (p.Padded(head.b, j)) {
      std::fill(value, value + width, 0.0f);
      continue;
    }
    std::copy(vj, vj + p.d, value);
    value[p.d] = 1.0f;
    for (std::int64_t i = 0; i < width; ++i) buf.constant[static_cast<std::size_t>(i)] += value[i];
  }
  for (float& c : buf.constant) c *= p.gamma;
}

// y rows [start, start + n) of one head: nom = constant + ((q̂ | β)·keysᵀ)²·values, then
// y = nom[:d] / nom[d], times √(count/d) with output normalisation.
void QueryBlock(const Problem& p, const InferenceHead& head, std::int64_t start, std::int64_t n,
                Buffers& buf) {
  const std::int64_t width = p.d + 1;
  const float* q = head.q + start * p.q_strides[2];
  RowScales(q, p.q_strides[2], n, p.d, p.scaling.normalize, head.query_factor, buf.scale.data());
  for (std::int64_t r = 0; r < n; ++r) {
    const float* qr = q + r * p.q_strides[2];
    float* query = buf.queries.data() + r * width;
    const float s = buf.scale[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < p.d; ++i) query[i] = s * qr[i];
    query[p.d] = p.beta;
  }
  SgemmInto(false, true, n, p.tokens, width, buf.queries.data(), width, buf.keys.data(), width,
            0.0f, buf.scores.data(), p.tokens);
  float* scores = buf.scores.data();
  for (std::int64_t i = 0; i < n * p.tokens; ++i) scores[i] *= scores[i];
  for (std::int64_t r = 0; r < n; ++r) {
    std::copy(buf.constant.begin(), buf.constant.end(), buf.nom.begin() + r * width);
  }
  SgemmInto(false, false, n, width, p.tokens, scores, p.tokens, buf.values.data(), width, 1.0f,
            buf.nom.data(), width);
  const float factor =
      p.output_normalize
          ? std::sqrt(p.counts[static_cast<std::size_t>(head.b)] / static_cast<float>(p.d))
          : 1.0f;
  for (std::int64_t r = 0; r < n; ++r) {
    const float* nom = buf.nom.data() + r * width;
    float* out = p.OutputRow(head.b, start + r, head.h);
    for (std::int64_t i = 0; i < p.d; ++i) out[i] = nom[i] / nom[p.d] * factor;
  }
}

}  // namespace

torch::Tensor DirectInference(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                              const TaylorKernelOptions& options, const QueryKeyScaling& scaling) {
  CheckTaylorCoefficients(options.a, options.b, options.c);
  TORCH_CHECK(options.direct_block_elements > 0, "direct_block_elements must be positive");
  Problem p(PrepareInference("DirectInference", q, k, v, key_padding_mask, scaling));
  p.beta = static_cast<float>(options.b / (2 * options.a));
  p.gamma = static_cast<float>(options.c / options.a -
                               options.b * options.b / (4 * options.a * options.a));
  p.output_normalize = options.output_normalize;
  if (p.tokens == 0) return p.output.transpose(1, 2);
  const std::int64_t threads = std::max(1, at::get_num_threads());
  p.rows = std::max<std::int64_t>(
      1, std::min(p.tokens, options.direct_block_elements / (threads * p.tokens)));
  p.blocks = (p.tokens + p.rows - 1) / p.rows;
  const std::int64_t heads = p.batch * p.heads;
  const std::int64_t work = heads * p.tokens * p.tokens * (p.d + 1) * 2;
  ParallelFor(0, heads * p.blocks, 1, work, [&](std::int64_t begin, std::int64_t end) {
    Buffers buf(p.tokens, p.rows, p.d);
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t index = task / p.blocks;
      const InferenceHead head(p, index / p.heads, index % p.heads);
      if (buf.head != index) {
        PrepareKeys(p, head, buf);
        buf.head = index;
      }
      const std::int64_t start = (task % p.blocks) * p.rows;
      QueryBlock(p, head, start, std::min(p.rows, p.tokens - start), buf);
    }
  });
  return p.output.transpose(1, 2);
}

}  // namespace ts
