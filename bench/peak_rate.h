// This CPU's arithmetic ceilings, measured by register-only loops (no memory traffic): float32
// fused multiply-adds (vfmadd231ps) and bfloat16 dot products with float32 sums (vdpbf16ps), on
// AVX-512 registers (the FMAs on AVX2 registers where the CPU, or TS_CPU_CAPABILITY, stops at
// AVX2; model/kernels/cpu_features.h), one loop per thread. What no kernel can beat: their ratio
// bounds what bf16 can gain over fp32 for GEMM-bound work (docs/PERFORMANCE.md). Torch-free.
#pragma once

namespace ts::bench {

struct PeakRates {
  double fp32_fma = 0;  // FLOP/s, 2 per lane per FMA
  double bf16_dot =
      0;  // FLOP/s, 4 per lane per dot (two products, two sums); 0 without AVX512-BF16
};

// Runs both loops on `threads` threads at once for about `seconds` each; the best of three.
// Both 0 on a CPU without AVX2 + FMA.
PeakRates MeasurePeakRates(int threads, double seconds = 0.05);

}  // namespace ts::bench
