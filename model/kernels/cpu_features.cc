#include "model/kernels/cpu_features.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ts {
namespace {

constexpr std::array<std::pair<CpuCapability, std::string_view>, 5> kNames = {{
    {CpuCapability::kDefault, "default"},
    {CpuCapability::kAvx2, "avx2"},
    {CpuCapability::kAvx512, "avx512"},
    {CpuCapability::kAvx512Bf16, "avx512_bf16"},
    {CpuCapability::kAmx, "amx"},
}};

constexpr char kVariable[] = "TS_CPU_CAPABILITY";

CpuCapability Detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    return CpuCapability::kDefault;
  }
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))) {
    return CpuCapability::kAvx2;
  }
  if (!__builtin_cpu_supports("avx512bf16")) return CpuCapability::kAvx512;
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
  if (__builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("amx-tile")) {
    return CpuCapability::kAmx;
  }
#endif
  return CpuCapability::kAvx512Bf16;
#else
  return CpuCapability::kDefault;
#endif
}

// -1: no test override.
std::atomic<int> test_cap{-1};

CpuCapability FromEnvironmentOrDetected() {
  auto level = CpuCapabilityFromEnvironment();
  return level.ok() ? *level : DetectedCpuCapability();
}

}  // namespace

std::string_view CpuCapabilityName(CpuCapability capability) {
  for (const auto& [level, name] : kNames) {
    if (level == capability) return name;
  }
  return "unknown";
}

absl::StatusOr<CpuCapability> ParseCpuCapability(std::string_view name) {
  for (const auto& [level, known] : kNames) {
    if (known == name) return level;
  }
  const auto append_name = [](std::string* out, const auto& entry) { out->append(entry.second); };
  return absl::InvalidArgumentError(absl::StrCat("CPU capability '", std::string(name),
                                                 "' is not one of ",
                                                 absl::StrJoin(kNames, ", ", append_name)));
}

CpuCapability DetectedCpuCapability() {
  static const CpuCapability detected = Detect();
  return detected;
}

absl::StatusOr<CpuCapability> CpuCapabilityFromEnvironment() {
  const char* value = std::getenv(kVariable);  // NOLINT(concurrency-mt-unsafe): read-only
  if (value == nullptr || *value == '\0') return DetectedCpuCapability();
  auto cap = ParseCpuCapability(value);
  if (!cap.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(kVariable, ": ", cap.status().message()));
  }
  return std::min(*cap, DetectedCpuCapability());
}

CpuCapability ActiveCpuCapability() {
  static const CpuCapability from_environment = FromEnvironmentOrDetected();
  const int cap = test_cap.load(std::memory_order_relaxed);
  if (cap < 0) return from_environment;
  return std::min(static_cast<CpuCapability>(cap), DetectedCpuCapability());
}

std::string DescribeCpuCapability() {
  const CpuCapability active = ActiveCpuCapability();
  const CpuCapability detected = DetectedCpuCapability();
  std::string name(CpuCapabilityName(active));
  if (active == detected) return name;
  return absl::StrCat(name, " (detected ", std::string(CpuCapabilityName(detected)), ", capped by ",
                      kVariable, ")");
}

ScopedCpuCapability::ScopedCpuCapability(CpuCapability cap)
    : previous_(test_cap.exchange(static_cast<int>(cap))) {}

ScopedCpuCapability::~ScopedCpuCapability() { test_cap.store(previous_); }

}  // namespace ts
