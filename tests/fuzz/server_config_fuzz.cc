// The server configuration file (server/config.h: ParseServerConfig, through yaml-cpp and
// common/yaml_fields.h), with its relative paths resolved against an empty scratch folder; then
// the job threads a valid configuration gives on a small and a large machine.
#include <cstdint>
#include <string>

#include "server/config.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto config = ts::server::ParseServerConfig(text, ts::fuzz::ScratchFolder::Get().path());
  if (!config.ok()) return 0;
  for (const int cores : {1, 4, 256}) {
    if (ts::server::ThreadsPerJob(config->jobs, cores) < 1) {
      ts::fuzz::Broken("a valid configuration gives a job fewer than one thread");
    }
  }
  return 0;
}
