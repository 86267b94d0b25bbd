#include "model/heap_policy.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"
#include "common/sanitizers.h"

namespace ts {

absl::Status KeepFreedHeapMemory(std::int64_t keep_bytes) {
  if (keep_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("heap_keep_freed_bytes must be >= 0, got ", keep_bytes));
  }
  if (keep_bytes == 0) return absl::OkStatus();
  // A sanitizer's allocator takes glibc's place (ASan's mallopt refuses everything): there is no
  // glibc heap to keep memory in.
  if (kAddressSanitizer || kThreadSanitizer) return absl::OkStatus();
#if defined(__GLIBC__)
  // glibc accepts an mmap threshold up to 32 MiB (64-bit); larger blocks are always mapped.
  constexpr std::int64_t kMmapCeiling = std::int64_t{32} << 20;
  const auto trim = static_cast<int>(std::min<std::int64_t>(keep_bytes, INT_MAX));
  const auto mmap = static_cast<int>(std::min(keep_bytes, kMmapCeiling));
  // One arena: a thread's own arena lives in 64 MiB heaps that glibc unmaps as soon as one is
  // wholly free, whatever the trim threshold, so a job thread's step would fault its
  // activations in again; the main arena keeps them. Tensor work makes few, large allocations,
  // so sharing one arena's lock costs little.
  if (mallopt(M_TRIM_THRESHOLD, trim) != 1 || mallopt(M_MMAP_THRESHOLD, mmap) != 1 ||
      mallopt(M_ARENA_MAX, 1) != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("the C library refused heap_keep_freed_bytes ", keep_bytes));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(
      "heap_keep_freed_bytes needs glibc's malloc; set it to 0 with this C library");
#endif
}

absl::Status LimitOneDnnPrimitiveCache(int capacity) {
  if (capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("onednn_primitive_cache_capacity must be >= 0, got ", capacity));
  }
  const std::string value = std::to_string(capacity);
  // Not overwritten: an operator's own setting wins.
  for (const char* name : {"ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"}) {
    if (setenv(name, value.c_str(), /*overwrite=*/0) != 0) {
      return absl::InternalError(absl::StrCat("setenv ", name, " failed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ts
