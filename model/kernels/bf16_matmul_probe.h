// What LibTorch's bfloat16 matrix products do on this CPU, measured rather than assumed.
//
// Whether a bf16 product sums in float32 depends on the LibTorch build and the CPU, not on a
// flag either exposes: Debian's LibTorch 1.13 hands bf16 GEMMs to oneDNN (float32 sums) only on
// CPUs with AVX-512 and otherwise runs its own kernel, which sums in bfloat16 (0.5 of the largest
// entry off at 2048 terms); PyTorch 2.11 sums in float32 everywhere. So every CPU path that
// multiplies in bfloat16 asks this probe first and either multiplies in bf16 (float32 sums
// measured) or refuses (precision bf16, training autocast) or multiplies in float32 (the
// attention kernels' bf16_products). docs/MODEL.md, "Precision", has the table per CPU and build.
//
// The measurement: a [kBf16ProbeRows, depth] × [depth, kBf16ProbeCols] product (torch::mm, and
// the same as a batch of two with torch::bmm) of seeded uniform (0, 1] bfloat16 values against
// the float64 product of the same bfloat16 inputs. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ts {

inline constexpr std::int64_t kBf16ProbeDepth = 2048;
inline constexpr std::int64_t kBf16ProbeRows = 153;
inline constexpr std::int64_t kBf16ProbeCols = 17;
// A float32 sum rounded once to bfloat16 is off by at most 2^-8 of the result (~0.004); a
// bfloat16 running sum of 2048 positive terms by ~0.5. The bound sits between with margin.
inline constexpr double kBf16AccumulationBound = 1e-2;

struct Bf16MatmulProbe {
  bool ran = false;              // false: LibTorch refused the product (`error` says why)
  double relative_error = 0.0;   // max |product − exact| / max |exact|, of mm and bmm
  std::string error;             // LibTorch's message where it refused
  bool onednn_bypassed = false;  // oneDNN refused bf16 (capped below AVX-512): LibTorch's own
                                 // kernels were measured instead, as such a CPU runs them
  // bf16 products with float32 sums: the only ones this project runs on a CPU.
  bool float32_sums() const { return ran && relative_error <= kBf16AccumulationBound; }
  // "relative error 0.53 at 2048 terms (bfloat16 sums)" and the like, for messages.
  std::string Describe() const;
};

// Measures now, at `depth` terms per sum (tests use other depths). Where oneDNN refuses the
// product (ONEDNN_MAX_CPU_ISA below AVX-512 on a CPU that has it: LibTorch 1.13 still routes
// bf16 there), LibTorch's oneDNN routing is turned off for the process and the product measured
// again: what a CPU without AVX-512 computes.
Bf16MatmulProbe MeasureCpuBf16Matmul(std::int64_t depth = kBf16ProbeDepth);

// MeasureCpuBf16Matmul() once per process, on first use.
const Bf16MatmulProbe& CpuBf16Matmul();

// OK where CpuBf16Matmul() measured float32 sums; FAILED_PRECONDITION otherwise, naming the
// measurement, the CPU feature and the alternative ("use precision: fp32"). Torch-free callers
// (the server's job admission) check a bf16 training spec with it.
absl::Status CheckCpuBf16SumsInFloat32();

}  // namespace ts
