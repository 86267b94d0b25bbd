// What this CPU's vector units can do, read once. The build targets generic x86-64; functions
// with wider instructions carry their own target attribute and check these first.
#pragma once

namespace ts {

// Whether this is an x86-64 CPU with AVX-512F.
inline bool HaveAvx512F() {
#if defined(__x86_64__)
  static const bool have = __builtin_cpu_supports("avx512f");
  return have;
#else
  return false;
#endif
}

}  // namespace ts
