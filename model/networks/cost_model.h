// Cost model of the two TaylorShift paths (docs/MODEL.md, paper §4): operations and memory per
// head, the crossovers N0(d) (speed) and N1(d) (memory), and the measured crossover that the
// calibration finds on this machine. Torch-free; calibration lives in calibration.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/api/attention_path.h"

namespace ts {

// Floating-point operations of one head: 4N²d + 6N² (direct), N(4d³+10d²+9d+4) (efficient).
double DirectOps(double tokens, double head_dim);
double EfficientOps(double tokens, double head_dim);
// Entries held at the peak of one head: dN + 2N² (direct);
// d²(d+1) + 2dN + (d+1)N + d²N (efficient).
double DirectMemoryEntries(double tokens, double head_dim);
double EfficientMemoryEntries(double tokens, double head_dim);

// N0 = (4d³+10d²+9d+4)/(4d+6) rounded up: tokens from which efficient needs fewer operations.
std::int64_t SpeedCrossoverN0(std::int64_t head_dim);
// N1 = ¼[d²+2d+1+√(d⁴+12d³+14d²+4d+1)] rounded up: tokens from which efficient needs less memory.
std::int64_t MemoryCrossoverN1(std::int64_t head_dim);

// The encoder's sizes as the inference cost needs them.
struct EncoderCostShape {
  std::int64_t embed_dim = 0;   // C
  std::int64_t depth = 0;       // blocks
  std::int64_t heads = 1;       // H (d = C / H)
  std::int64_t mlp_hidden = 0;  // L
};

// Floating-point operations of one inference forward over one sequence of `tokens` tokens
// (incl. CLS): per block, every head's attention on `path` (DirectOps for the quadratic paths —
// direct, softmax and the direct reference —, EfficientOps for the efficient ones; kAuto the
// cheaper of the two) plus the qkv, output and MLP products, 2·(4C² + 2CL) per token. What
// admission charges a request with (docs/SERVING.md, "Admission by cost"); it counts
// arithmetic only, so the softmax path, which also writes and reads its N×N scores, takes longer
// per counted operation than the others.
double EncoderForwardOps(const EncoderCostShape& shape, double tokens, AttentionPath path);

// Tokens (incl. CLS) above which the efficient path trains faster than the direct one: a whole
// training step (forward, backward, optimizer) measured by bench/run_train_bench on the 2-core
// CPU machine (docs/PERFORMANCE.md, "Training throughput") at d = 8, 16, 32; log-log
// interpolated between them, and N0(d) times the ratio measured at the nearest end beyond them.
// Training jobs resolve `auto` with it: backward costs the paths differently than inference does.
std::int64_t TrainingCrossoverTokens(std::int64_t head_dim);

}  // namespace ts

namespace ts {

// Peak memory of one training rank, estimated before the job runs (job admission). Sizes in
// bytes; every term is an upper-bound model of what LibTorch holds at the peak of a step.
struct TrainingMemoryShape {
  std::int64_t embed_dim = 0;   // C
  std::int64_t depth = 0;       // blocks
  std::int64_t heads = 0;       // H
  std::int64_t mlp_hidden = 0;  // MLP width
  std::int64_t max_length = 0;  // input tokens (the CLS token is added)
  std::int64_t num_classes = 2;
  std::int64_t vocab_size = 256;
  std::int64_t batch = 1;  // examples per rank per step
  // The path as the trainer runs it: direct for sequences of up to `direct_up_to_tokens` tokens
  // (incl. CLS), efficient above. 0 = always efficient; kAlwaysDirect = always direct; `auto`
  // is TrainingCrossoverTokens(d). The peak is the larger of both sides: a batch of the longest
  // direct length and one of max_length + 1.
  static constexpr std::int64_t kAlwaysDirect = INT64_MAX;
  std::int64_t direct_up_to_tokens = kAlwaysDirect;
  // The softmax baseline instead: its backward keeps the N×N probabilities of every head.
  bool softmax = false;
  int element_bytes = 4;        // 4 float32, 8 float64
  int optimizer_states = 2;     // AdamW / LAMB moments per parameter
  std::int64_t data_bytes = 0;  // the training and validation data held in memory
};

struct TrainingMemoryEstimate {
  std::int64_t parameters = 0;        // parameter count
  std::int64_t state_bytes = 0;       // weights, gradients, optimizer moments, clipping copy
  std::int64_t activation_bytes = 0;  // what the forward keeps for the backward, all blocks
  std::int64_t attention_bytes = 0;   // the attention terms of one block at its peak
  std::int64_t data_bytes = 0;
  std::int64_t runtime_bytes = 0;  // the process itself (LibTorch, allocator, threads)
  std::int64_t total_bytes = 0;
  bool efficient_at_max_length = false;  // the path the longest batch runs
  bool softmax = false;                  // the softmax baseline (N×N probabilities per head)
};

// The terms of `estimate`, largest first, as "attention 15.9 GiB (softmax: N×N scores per head),
// activations 0.4 GiB, ...": what a refusal names so that the user knows what to change.
std::vector<std::string> DominantMemoryTerms(const TrainingMemoryEstimate& estimate);

TrainingMemoryEstimate EstimateTrainingMemory(const TrainingMemoryShape& shape);

}  // namespace ts
