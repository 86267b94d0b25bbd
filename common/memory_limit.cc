#include "common/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"

namespace ts {

std::int64_t MemoryLimitBytes() {
  std::int64_t limit = std::int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE);
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream cgroup(path);
    std::string text;
    std::int64_t cgroup_limit = 0;
    if (cgroup >> text && absl::SimpleAtoi(text, &cgroup_limit) && cgroup_limit > 0) {
      limit = limit > 0 ? std::min(limit, cgroup_limit) : cgroup_limit;
    }
  }
  return std::max<std::int64_t>(limit, 0);
}

}  // namespace ts
