// Cost model of the two TaylorShift paths (DESIGN.md, paper §4): operations and memory per
// head, the crossovers N0(d) (speed) and N1(d) (memory), and the measured crossover that the
// calibration finds on this machine. Torch-free; calibration lives in calibration.h.
#pragma once

#include <cstdint>

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

// Tokens (incl. CLS) above which the efficient path trains faster than the direct one: a whole
// training step (forward, backward, optimizer) measured by bench/run_train_bench on the 2-core
// CPU machine (docs/PERFORMANCE.md, "Training throughput") at d = 8, 16, 32; log-log
// interpolated between them, and N0(d) times the ratio measured at the nearest end beyond them.
// Training jobs resolve `auto` with it: backward costs the paths differently than inference does.
std::int64_t TrainingCrossoverTokens(std::int64_t head_dim);

}  // namespace ts
