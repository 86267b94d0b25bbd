#include "model/heap_policy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "common/sanitizers.h"

namespace ts {
namespace {

TEST(HeapPolicyTest, NegativeIsRejectedZeroKeepsDefaults) {
  const absl::Status negative = KeepFreedHeapMemory(-1);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.ToString().find("heap_keep_freed_bytes must be >= 0, got -1"),
            std::string::npos)
      << negative;
  EXPECT_TRUE(KeepFreedHeapMemory(0).ok());
}

TEST(HeapPolicyTest, LargeBlocksComeFromTheHeapNotFreshMappings) {
  if (kAddressSanitizer || kThreadSanitizer) {
    GTEST_SKIP() << "a sanitizer's allocator replaces glibc's malloc, whose policy this is";
  }
#if defined(__GLIBC__)
  // With glibc's defaults a 16 MiB block is a fresh mapping (above the 128 KiB mmap threshold)
  // that the OS must fault in and zero on every use; with the policy it comes from the heap.
  constexpr std::size_t kBytes = std::size_t{16} << 20;
  void* probe = std::malloc(kBytes);
  ASSERT_NE(probe, nullptr);
  const std::size_t mapped_with_defaults = mallinfo2().hblkhd;
  std::free(probe);
  ASSERT_GE(mapped_with_defaults, kBytes) << "glibc's defaults were expected to map the block";

  ASSERT_TRUE(KeepFreedHeapMemory(kDefaultHeapKeepFreedBytes).ok());
  const std::size_t mapped_before = mallinfo2().hblkhd;
  void* block = std::malloc(kBytes);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  EXPECT_EQ(mallinfo2().hblkhd, mapped_before);
  std::free(block);
  // Freed, it stays in the heap (free bytes of the arena) for the next step.
  EXPECT_GE(mallinfo2().fordblks, kBytes);
#else
  GTEST_SKIP() << "the heap policy needs glibc";
#endif
}

}  // namespace
}  // namespace ts
