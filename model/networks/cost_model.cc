#include "model/networks/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <utility>

namespace ts {

double DirectOps(double n, double d) { return 4 * n * n * d + 6 * n * n; }

double EfficientOps(double n, double d) { return n * (4 * d * d * d + 10 * d * d + 9 * d + 4); }

double DirectMemoryEntries(double n, double d) { return d * n + 2 * n * n; }

double EfficientMemoryEntries(double n, double d) {
  return d * d * (d + 1) + 2 * d * n + (d + 1) * n + d * d * n;
}

double EncoderForwardOps(const EncoderCostShape& shape, double tokens, AttentionPath path) {
  const double c = static_cast<double>(shape.embed_dim);
  const double heads = static_cast<double>(std::max<std::int64_t>(shape.heads, 1));
  const double d = c / heads;
  double attention = 0;
  switch (path) {
    case AttentionPath::kDirect:
    case AttentionPath::kSoftmax:
    case AttentionPath::kDirectReference:
      attention = DirectOps(tokens, d);
      break;
    case AttentionPath::kEfficient:
    case AttentionPath::kEfficientReference:
      attention = EfficientOps(tokens, d);
      break;
    case AttentionPath::kAuto:
      attention = std::min(DirectOps(tokens, d), EfficientOps(tokens, d));
      break;
  }
  const double products = 2 * (4 * c * c + 2 * c * static_cast<double>(shape.mlp_hidden));
  return static_cast<double>(shape.depth) * (heads * attention + tokens * products);
}

std::int64_t SpeedCrossoverN0(std::int64_t head_dim) {
  const double d = static_cast<double>(head_dim);
  return static_cast<std::int64_t>(
      std::ceil((4 * d * d * d + 10 * d * d + 9 * d + 4) / (4 * d + 6)));
}

std::int64_t MemoryCrossoverN1(std::int64_t head_dim) {
  const double d = static_cast<double>(head_dim);
  const double root = std::sqrt(d * d * d * d + 12 * d * d * d + 14 * d * d + 4 * d + 1);
  return static_cast<std::int64_t>(std::ceil(0.25 * (d * d + 2 * d + 1 + root)));
}

std::int64_t TrainingCrossoverTokens(std::int64_t head_dim) {
  // {d, tokens}: the log-interpolated crossovers L of bench/run_train_bench (run of
  // 2026-11-28T20:44, --threads=1, with the direct path's recomputing backward;
  // docs/train_bench.md), plus one for CLS.
  constexpr std::array<std::pair<double, double>, 3> kMeasured = {{
      {8, 122},
      {16, 271},
      {32, 546},
  }};
  const double d = static_cast<double>(std::max<std::int64_t>(head_dim, 1));
  double tokens = 0;
  if (d <= kMeasured.front().first || d >= kMeasured.back().first) {
    const auto& [d_end, n_end] =
        d <= kMeasured.front().first ? kMeasured.front() : kMeasured.back();
    tokens =
        SpeedCrossoverN0(head_dim) * n_end / SpeedCrossoverN0(static_cast<std::int64_t>(d_end));
  } else {
    const auto hi = std::find_if(kMeasured.begin(), kMeasured.end(),
                                 [d](const auto& point) { return d <= point.first; });
    const auto& [d_lo, n_lo] = *(hi - 1);
    const auto& [d_hi, n_hi] = *hi;
    const double t = std::log(d / d_lo) / std::log(d_hi / d_lo);
    tokens = d == d_hi ? n_hi : std::exp(std::log(n_lo) + t * std::log(n_hi / n_lo));
  }
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(tokens)));
}

}  // namespace ts

namespace ts {

TrainingMemoryEstimate EstimateTrainingMemory(const TrainingMemoryShape& s) {
  TrainingMemoryEstimate e;
  const double c = static_cast<double>(s.embed_dim);
  const double hidden = static_cast<double>(s.mlp_hidden);
  const double n = static_cast<double>(s.max_length + 1);
  const double heads = static_cast<double>(std::max<std::int64_t>(s.heads, 1));
  const double d = c / heads;
  const double batch = static_cast<double>(s.batch);
  const double bytes = static_cast<double>(s.element_bytes);
  // Parameters: token embedding, per block qkv + projection + MLP + norms, head.
  const double per_block = 4 * c * c + 2 * c * hidden + hidden + 9 * c + 2 * heads;
  const double params = static_cast<double>(s.vocab_size) * c + c +
                        static_cast<double>(s.depth) * per_block +
                        c * static_cast<double>(s.num_classes) + 3 * c;
  e.parameters = static_cast<std::int64_t>(params);
  // Weights, gradients, the optimizer's moments, and one more copy for clipping / the update.
  e.state_bytes = static_cast<std::int64_t>(params * bytes * (3 + s.optimizer_states));
  // Saved for backward per token and block: two LayerNorms (input, output, statistics), q/k/v
  // and their normalised and scaled copies, the attention output, projection, residuals, the
  // MLP's hidden tensors (fc1's output, GELU's), its output. Fitted to bench/memory_grid.py's
  // measured peaks (docs/JOBS.md): 14C + 3L fell short by a quarter.
  const double saved_per_token = 19 * c + 4 * hidden;
  const double embedding = batch * n * c * 4;  // one-hot input, embedding, positions, dropout
  e.activation_bytes = static_cast<std::int64_t>(
      (batch * n * saved_per_token * static_cast<double>(s.depth) + embedding) * bytes);
  // One block's attention at its peak. Direct: its backward recomputes the scores (TaylorDirect),
  // so it holds q̂, k̂, v'', y, the denominators and their gradients, O(N·d) per head, and at most
  // two blocks of scores of the kernel options' budget (2^19 entries, at least 64 query rows of
  // every head in training). Softmax: 4 N×N tensors per head (probabilities, scores and the
  // backward's gradients of both). Efficient: O(N·d) features and the d³ moment tensors, held twice
  // (forward kept for backward, and the backward's temporaries). With a crossover, the peak is
  // the larger of the longest direct batch and the max_length batch.
  e.efficient_at_max_length = !s.softmax && n > static_cast<double>(s.direct_up_to_tokens);
  e.softmax = s.softmax;
  const double direct_n = std::min(n, static_cast<double>(s.direct_up_to_tokens));
  const double direct_entries =
      s.softmax ? batch * heads * (4 * n * n + 2 * n * d)
                : batch * heads * 8 * direct_n * (d + 1) +
                      2 * std::max(static_cast<double>(1 << 19),
                                   batch * heads * std::min(64.0, direct_n) * direct_n);
  const double efficient_entries =
      e.efficient_at_max_length ? 2 * batch * heads * (6 * n * d + 3 * d * d * d + 2 * d * d) : 0.0;
  e.attention_bytes =
      static_cast<std::int64_t>(std::max(direct_entries, efficient_entries) * bytes);
  e.data_bytes = s.data_bytes;
  e.runtime_bytes = std::int64_t{256} << 20;  // measured: ~190 MB resident for a tiny job
  e.total_bytes =
      e.state_bytes + e.activation_bytes + e.attention_bytes + e.data_bytes + e.runtime_bytes;
  return e;
}

std::vector<std::string> DominantMemoryTerms(const TrainingMemoryEstimate& e) {
  const char* attention = e.softmax ? "attention (softmax: N×N scores per head)"
                          : e.efficient_at_max_length
                              ? "attention (efficient path at max_length, direct below the "
                                "crossover)"
                              : "attention (direct path: blocks of scores, recomputed in backward)";
  std::vector<std::pair<std::int64_t, std::string>> terms = {
      {e.attention_bytes, attention},
      {e.activation_bytes, "activations kept for backward (batch × max_length × depth)"},
      {e.state_bytes, "weights, gradients and optimizer moments"},
      {e.data_bytes, "the data held in memory"},
      {e.runtime_bytes, "the worker process itself"},
  };
  std::stable_sort(terms.begin(), terms.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (const auto& [bytes, what] : terms) {
    char buffer[48];
    std::snprintf(buffer, sizeof(buffer), "%.2f GiB ", static_cast<double>(bytes) / (1 << 30));
    out.push_back(buffer + what);
  }
  return out;
}

}  // namespace ts
