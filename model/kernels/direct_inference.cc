#include "model/kernels/direct_inference.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/kernels/cpu_gemm.h"
#include "model/kernels/direct_tile.h"
#include "model/kernels/parallel.h"

namespace ts {
namespace {

// Query rows per task for the register tiles: the tasks only split the heads across threads.
constexpr std::int64_t kDirectTileRowsPerTask = 4 * kDirectTileRows;

// What every task shares. A/a = (S + β)² + γ with β = b/2a and γ = c/a − b²/4a²; the factor a
// cancels in P = A / rowsum(A). Padded keys contribute nothing (their v'' is zero), so only the
// real ones are kept: m of them per sequence. On the GEMM form, β rides in the first GEMM as an
// extra column ([q̂ | β]·[k̂ | 1]ᵀ = S + β) and the sums of the second one start at
// γ·Σ_j v''_j with v''_j = [v_j | 1], as in TaylorDirect; the register tiles
// (model/kernels/direct_tile.h) add β to each score and γ·Σ_j v''_j at the end.
struct Problem : InferenceProblem {
  explicit Problem(InferenceProblem base) : InferenceProblem(std::move(base)) {}
  std::int64_t rows = 0;    // query rows per task
  std::int64_t blocks = 0;  // tasks per head
  std::int64_t tile = 0;    // DirectTileWidth(d), or 0 for the GEMM form
  std::int64_t width = 0;   // floats per key row: tile, or d + 1
  float beta = 0.0f, gamma = 0.0f;
  bool output_normalize = true;
};

// One thread's operands, reused from task to task; the keys and values of the last head seen.
struct Buffers {
  explicit Buffers(const Problem& p)
      : keys(static_cast<std::size_t>((p.tokens + kDirectTileKeyPadding) * p.width)),
        values(static_cast<std::size_t>(p.tokens * p.width)),
        queries(static_cast<std::size_t>(std::max(p.rows, kDirectTileRows) * p.width)),
        scores(static_cast<std::size_t>(p.tile > 0 ? 0 : p.rows * p.tokens)),
        nom(static_cast<std::size_t>(p.tile > 0 ? (p.tile + 1) * kDirectTileRows
                                                : p.rows * (p.d + 1))),
        constant(static_cast<std::size_t>(p.d + 1)),
        scale(static_cast<std::size_t>(p.tile > 0 ? 0 : std::max(p.tokens, p.rows))) {
    real_rows.reserve(static_cast<std::size_t>(p.rows));
  }
  // scores and scale serve the GEMM form only.
  std::vector<float> keys, values, queries, scores, nom, constant, scale;
  std::vector<std::int32_t> real_rows;  // the block's query rows that are not padding
  std::int64_t head = -1;
  std::int64_t keys_kept = 0;  // m: the head's real keys
};

// One head as the register tiles read it.
DirectTileInput TileInput(const Problem& p, const InferenceHead& head) {
  DirectTileInput in;
  in.d = p.d;
  in.tokens = p.tokens;
  in.q = head.q;
  in.k = head.k;
  in.v = head.v;
  in.q_stride = p.q_strides[2];
  in.k_stride = p.k_strides[2];
  in.v_stride = p.v_strides[2];
  in.padded = p.padded == nullptr ? nullptr : p.padded + head.b * p.tokens;
  in.normalize = p.scaling.normalize;
  return in;
}

// The head's real keys in order: keys = k̂ and values = v (as [k̂ | 1] and [v | 1] on the GEMM
// form; zero past d in the tiles), constant = γ·Σ_j [v_j | 1].
void PrepareKeys(const Problem& p, const InferenceHead& head, Buffers& buf) {
  std::int64_t m = 0;
  if (p.tile > 0) {
    m = DirectTileKeys(TileInput(p, head), p.tile, buf.keys.data(), buf.values.data(),
                       buf.constant.data());
  } else {
    RowScales(head.k, p.k_strides[2], p.tokens, p.d, p.scaling.normalize, 1.0f, buf.scale.data());
    std::fill(buf.constant.begin(), buf.constant.end(), 0.0f);
    for (std::int64_t j = 0; j < p.tokens; ++j) {
      if (p.Padded(head.b, j)) continue;
      const float* kj = head.k + j * p.k_strides[2];
      const float* vj = head.v + j * p.v_strides[2];
      float* key = buf.keys.data() + m * p.width;
      float* value = buf.values.data() + m * p.width;
      const float s = buf.scale[static_cast<std::size_t>(j)];
      for (std::int64_t i = 0; i < p.d; ++i) key[i] = s * kj[i];
      key[p.d] = 1.0f;
      std::copy(vj, vj + p.d, value);
      value[p.d] = 1.0f;
      for (std::int64_t i = 0; i < p.d; ++i) buf.constant[static_cast<std::size_t>(i)] += vj[i];
      ++m;
    }
  }
  buf.constant[static_cast<std::size_t>(p.d)] = static_cast<float>(m);
  for (float& c : buf.constant) c *= p.gamma;
  buf.keys_kept = m;
}

// The real rows' y by two GEMMs through a block of scores: nom = constant +
// ((q̂ | β)·keysᵀ)²·values, y = nom[:d] / nom[d] · factor.
void GemmRows(const Problem& p, const InferenceHead& head, float factor, Buffers& buf) {
  const auto n = static_cast<std::int64_t>(buf.real_rows.size());
  const std::int64_t m = buf.keys_kept;
  const std::int64_t stride = p.q_strides[2];
  const std::int64_t start = buf.real_rows.front();
  if (buf.real_rows.back() - start + 1 == n) {  // contiguous rows: their scales at once
    RowScales(head.q + start * stride, stride, n, p.d, p.scaling.normalize, head.query_factor,
              buf.scale.data());
  } else {
    for (std::int64_t r = 0; r < n; ++r) {
      RowScales(head.q + buf.real_rows[static_cast<std::size_t>(r)] * stride, stride, 1, p.d,
                p.scaling.normalize, head.query_factor, buf.scale.data() + r);
    }
  }
  for (std::int64_t r = 0; r < n; ++r) {
    const float* qr = head.q + buf.real_rows[static_cast<std::size_t>(r)] * stride;
    float* query = buf.queries.data() + r * p.width;
    const float s = buf.scale[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < p.d; ++i) query[i] = s * qr[i];
    query[p.d] = p.beta;
  }
  SgemmInto(false, true, n, m, p.width, buf.queries.data(), p.width, buf.keys.data(), p.width, 0.0f,
            buf.scores.data(), m);
  float* scores = buf.scores.data();
  for (std::int64_t i = 0; i < n * m; ++i) scores[i] *= scores[i];
  SgemmInto(false, false, n, p.d + 1, m, scores, m, buf.values.data(), p.width, 0.0f,
            buf.nom.data(), p.d + 1);
  const float* constant = buf.constant.data();
  for (std::int64_t r = 0; r < n; ++r) {
    const float* nom = buf.nom.data() + r * (p.d + 1);
    const float scale = factor / (nom[p.d] + constant[p.d]);
    float* out = p.OutputRow(head.b, buf.real_rows[static_cast<std::size_t>(r)], head.h);
    for (std::int64_t i = 0; i < p.d; ++i) out[i] = (nom[i] + constant[i]) * scale;
  }
}

// The same rows 16 at a time in registers (model/kernels/direct_tile.h).
void TileRows(const Problem& p, const InferenceHead& head, float factor, Buffers& buf) {
  const DirectTileInput in = TileInput(p, head);
  const auto n = static_cast<std::int64_t>(buf.real_rows.size());
  for (std::int64_t first = 0; first < n; first += kDirectTileRows) {
    const std::int64_t count = std::min(kDirectTileRows, n - first);
    const std::int32_t* rows = buf.real_rows.data() + first;
    DirectTileQueries(in, p.tile, rows, count, head.query_factor, buf.queries.data());
    DirectTile(p.tile, buf.queries.data(), p.beta, buf.keys.data(), buf.values.data(),
               buf.keys_kept, buf.nom.data());
    DirectTileOutput(in, p.tile, buf.nom.data(), buf.constant.data(), factor, rows, count,
                     p.OutputRow(head.b, 0, head.h), p.heads * p.d);
  }
}

// y rows [start, start + n) of one head: nom = constant + Σ_j (q̂·k̂_j + β)²·[v_j | 1] over the
// real keys, then y = nom[:d] / nom[d], times √(count/d) with output normalisation. Rows of
// padded positions are not computed: their y is zero (no real token attends from them, and
// nothing after the encoder reads them).
void QueryBlock(const Problem& p, const InferenceHead& head, std::int64_t start, std::int64_t n,
                Buffers& buf) {
  buf.real_rows.clear();
  for (std::int64_t row = start; row < start + n; ++row) {
    if (p.Padded(head.b, row)) {
      float* out = p.OutputRow(head.b, row, head.h);
      std::fill(out, out + p.d, 0.0f);
    } else {
      buf.real_rows.push_back(static_cast<std::int32_t>(row));
    }
  }
  if (buf.real_rows.empty()) return;
  const float factor =
      p.output_normalize
          ? std::sqrt(p.counts[static_cast<std::size_t>(head.b)] / static_cast<float>(p.d))
          : 1.0f;
  if (p.tile > 0) {
    TileRows(p, head, factor, buf);
  } else {
    GemmRows(p, head, factor, buf);
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
  TORCH_CHECK(p.tokens < (std::int64_t{1} << 31), "DirectInference: ", p.tokens,
              " tokens; at most 2^31 - 1");
  const bool fits =
      DirectTileFits(p.tokens, p.q_strides[2]) && DirectTileFits(p.tokens, p.heads * p.d);
  p.tile = options.direct_tiles && fits ? DirectTileWidth(p.d) : 0;
  p.width = p.tile > 0 ? p.tile : p.d + 1;
  if (p.tile > 0) {
    // No score block: rows per task only set how finely the heads split across threads.
    p.rows = std::min(p.tokens, kDirectTileRowsPerTask);
  } else {
    p.rows = std::max<std::int64_t>(
        1, std::min(p.tokens, options.direct_block_elements / (threads * p.tokens)));
  }
  p.blocks = (p.tokens + p.rows - 1) / p.rows;
  const std::int64_t heads = p.batch * p.heads;
  const std::int64_t work = heads * p.tokens * p.tokens * (p.d + 1) * 2;
  ParallelFor(0, heads * p.blocks, 1, work, [&](std::int64_t begin, std::int64_t end) {
    Buffers buf(p);
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
