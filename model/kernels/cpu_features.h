// The one CPU probe every hand-written CPU kernel dispatches on. The build targets generic
// x86-64; kernels with wider instructions carry their own target attribute and are chosen here,
// at run time, by the capability level: the best the CPU has, capped by the environment
// variable TS_CPU_CAPABILITY (as ATen's ATEN_CPU_CAPABILITY caps its kernels), so that every
// variant, the fallbacks included, runs and is tested on one machine. The cap covers this
// project's kernels and its bf16 check (model/kernels/mixed_linear.h), not LibTorch's own GEMMs
// (oneDNN has ONEDNN_MAX_CPU_ISA, OpenBLAS OPENBLAS_CORETYPE). docs/MODEL.md, "CPU kernels".
// Torch-free; thread-safe (the level is read once; the test override is for single-threaded
// test set-up only).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ts {

// Ordered: each level has everything of the ones below it.
enum class CpuCapability {
  kDefault = 0,     // generic x86-64 (or not x86): the portable loops
  kAvx2 = 1,        // AVX2 + FMA (Intel Haswell, AMD Zen and later)
  kAvx512 = 2,      // AVX-512 F/BW/VL/DQ (Intel Skylake-SP, AMD Zen 4 and later)
  kAvx512Bf16 = 3,  // + AVX512-BF16 (Intel Cooper Lake / Sapphire Rapids, AMD Zen 4)
  kAmx = 4,         // + AMX-BF16 tiles (Intel Sapphire Rapids); used through oneDNN's GEMMs
};

// "default", "avx2", "avx512", "avx512_bf16", "amx" (the values TS_CPU_CAPABILITY takes).
std::string_view CpuCapabilityName(CpuCapability capability);
// The inverse of CpuCapabilityName; INVALID_ARGUMENT listing the names otherwise.
absl::StatusOr<CpuCapability> ParseCpuCapability(std::string_view name);

// The best level this CPU has (read once).
CpuCapability DetectedCpuCapability();
// TS_CPU_CAPABILITY parsed; INVALID_ARGUMENT naming the variable and its values when it is set
// to something else, and the detected level when unset or empty. tsserver and tsmodel refuse to
// start on an error; kernels never see one (ActiveCpuCapability ignores a bad value).
absl::StatusOr<CpuCapability> CpuCapabilityFromEnvironment();
// The level kernels use: min(detected, TS_CPU_CAPABILITY), read once (or the test override).
CpuCapability ActiveCpuCapability();
// "avx512_bf16 (detected amx, capped by TS_CPU_CAPABILITY)" for start-up logs and `tsmodel info`.
std::string DescribeCpuCapability();

inline bool HaveAvx2() { return ActiveCpuCapability() >= CpuCapability::kAvx2; }
inline bool HaveAvx512F() { return ActiveCpuCapability() >= CpuCapability::kAvx512; }

// Tests: caps ActiveCpuCapability at min(detected, `cap`) while alive (no nesting across
// threads; set it before the kernels under test run).
class ScopedCpuCapability {
 public:
  explicit ScopedCpuCapability(CpuCapability cap);
  ~ScopedCpuCapability();
  ScopedCpuCapability(const ScopedCpuCapability&) = delete;
  ScopedCpuCapability& operator=(const ScopedCpuCapability&) = delete;

 private:
  int previous_;
};

}  // namespace ts
