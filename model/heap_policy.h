// Heap policy for tensor workloads (glibc malloc). By default glibc hands every freed block above
// its mmap threshold back to the OS and trims the top of the heap above its trim threshold, so a
// training step or a batch that frees and re-allocates the same activations pays a page fault and
// a page of zeroing for every 4 KiB of them, on every step. Measured (bench/train_bench, issue 9's
// model, L 512, batch 16, 1 thread): 48 → 100 training examples/s with freed memory kept; a
// quarter of the step was page faults. The price: memory freed by a large step stays in the
// process (up to `keep_bytes`) for the next one instead of going back to the OS.
// Torch-free; call once at start, before threads allocate.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace ts {

// Keeps up to `keep_bytes` of freed memory in the heap for reuse (M_TRIM_THRESHOLD), serves
// blocks up to glibc's mmap ceiling (32 MiB on 64-bit) from the heap, not from fresh mappings
// (M_MMAP_THRESHOLD = min(keep_bytes, 32 MiB)), and lets every thread use the main arena
// (M_ARENA_MAX = 1: per-thread arenas unmap their 64 MiB heaps once free, whatever the trim
// threshold, and training jobs run on their own threads). 0 leaves glibc's defaults.
// INVALID_ARGUMENT for a negative value; FAILED_PRECONDITION when the C library refuses (a
// non-glibc libc). In a sanitizer build (scripts/sanitize), whose allocator replaces glibc's, it
// does nothing.
absl::Status KeepFreedHeapMemory(std::int64_t keep_bytes);

// The default of tsserver's `heap_keep_freed_bytes` and of the tools: 1 GiB.
inline constexpr std::int64_t kDefaultHeapKeepFreedBytes = std::int64_t{1} << 30;

// Bounds oneDNN's primitive cache (LibTorch's CPU operators and our sgemm run on oneDNN) to
// `capacity` primitives, by setting ONEDNN_PRIMITIVE_CACHE_CAPACITY (and the older
// DNNL_PRIMITIVE_CACHE_CAPACITY) for this process and the processes it starts, unless the
// environment sets it already. oneDNN keeps a primitive, with its JIT code and buffers, per
// distinct shape, 1024 by default; training batches padded to their longest document have a new
// shape nearly every step, so a worker's resident memory grew without bound (0.8 → 2.3 GiB over
// 200 steps of the demo recipe; flat with the cache off; bench/memory_grid.py; tsserver gives its
// workers jobs.onednn_primitive_cache_capacity). Call at start, before any tensor operation.
// INVALID_ARGUMENT for a negative capacity.
absl::Status LimitOneDnnPrimitiveCache(int capacity);

// The default of tsserver's `onednn_primitive_cache_capacity`.
inline constexpr int kDefaultOneDnnPrimitiveCacheCapacity = 64;

}  // namespace ts
