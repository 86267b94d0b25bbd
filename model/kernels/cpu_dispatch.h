// Run-time dispatch of a plain C++ loop over instruction sets: the loop is written once as an
// always-inline function and compiled into one function per level of model/kernels/cpu_features.h
// (AVX-512, AVX2 + FMA, generic x86-64), where GCC vectorises it with that level's registers; a
// dispatcher calls the one ActiveCpuCapability() picks. Unlike GCC's target_clones (the CPU's
// best, fixed at load time), TS_CPU_CAPABILITY and ScopedCpuCapability reach it, so tests run
// every variant on one machine. Kernels written with intrinsics dispatch by hand instead.
#pragma once

#include "model/kernels/cpu_features.h"

// NOLINTBEGIN(cppcoreguidelines-macro-usage): target attributes cannot be templated
#define TS_ALWAYS_INLINE inline __attribute__((always_inline))

#if defined(__x86_64__)
#define TS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define TS_TARGET_AVX2 __attribute__((target("avx2,fma")))

// Defines `void NAME PARAMS` calling LOOP ARGS in the variant for ActiveCpuCapability(), and the
// variants NAME##Avx512, NAME##Avx2 and NAME##Default. PARAMS and ARGS are parenthesised lists.
#define TS_CPU_VARIANTS(NAME, LOOP, PARAMS, ARGS)          \
  TS_TARGET_AVX512 void NAME##Avx512 PARAMS { LOOP ARGS; } \
  TS_TARGET_AVX2 void NAME##Avx2 PARAMS { LOOP ARGS; }     \
  void NAME##Default PARAMS { LOOP ARGS; }                 \
  void NAME PARAMS {                                       \
    switch (::ts::ActiveCpuCapability()) {                 \
      case ::ts::CpuCapability::kDefault:                  \
        NAME##Default ARGS;                                \
        return;                                            \
      case ::ts::CpuCapability::kAvx2:                     \
        NAME##Avx2 ARGS;                                   \
        return;                                            \
      default:                                             \
        NAME##Avx512 ARGS;                                 \
        return;                                            \
    }                                                      \
  }
#else  // one portable variant
#define TS_CPU_VARIANTS(NAME, LOOP, PARAMS, ARGS) \
  void NAME PARAMS { LOOP ARGS; }
#endif
// NOLINTEND(cppcoreguidelines-macro-usage)
