#include "bench/peak_memory.h"

#include <fstream>
#include <string>

#include "model/torch_compat.h"

namespace ts::bench {
namespace {

// A field of /proc/self/status in bytes ("VmHWM:   1234 kB").
std::int64_t ProcStatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stoll(line.substr(field.size() + 1)) * 1024;
    }
  }
  return -1;
}

}  // namespace

std::int64_t MeasurePeakBytes(const torch::Device& device, const std::function<void()>& work) {
  if (device.is_cuda()) {
    compat::Synchronize(device);
    const auto before = compat::GetDeviceMemory(device).allocated_bytes;
    compat::ResetPeakDeviceMemory(device);
    work();
    compat::Synchronize(device);
    return compat::GetDeviceMemory(device).peak_allocated_bytes - before;
  }
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";  // resets VmHWM to the current RSS
  }
  const auto before = ProcStatusBytes("VmRSS");
  work();
  return ProcStatusBytes("VmHWM") - before;
}

}  // namespace ts::bench
