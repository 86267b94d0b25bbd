// The memory a process may use: the machine's, or its container's limit when that is lower.
#ifndef TS_COMMON_MEMORY_LIMIT_H_
#define TS_COMMON_MEMORY_LIMIT_H_

#include <cstdint>

namespace ts {

// The lower of the machine's memory (MemTotal) and the limit of the process's cgroup as a
// container sees it at the root of /sys/fs/cgroup (v2 memory.max, "max" = none; v1
// memory/memory.limit_in_bytes, a huge number = none); 0 when neither is known.
std::int64_t MemoryLimitBytes();

}  // namespace ts

#endif  // TS_COMMON_MEMORY_LIMIT_H_
