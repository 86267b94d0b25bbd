#include "bench/peak_memory.h"

#include <malloc.h>

#include <fstream>
#include <string>

#include "model/torch_compat.h"

namespace ts::bench {

std::int64_t MeasurePeakBytes(const torch::Device& device, const std::function<void()>& work) {
  if (device.is_cuda()) {
    compat::Synchronize(device);
    const auto before = compat::GetDeviceMemory(device).allocated_bytes;
    compat::ResetPeakDeviceMemory(device);
    work();
    compat::Synchronize(device);
    return compat::GetDeviceMemory(device).peak_allocated_bytes - before;
  }
  compat::CountCpuAllocations();
  const auto before = compat::GetCpuAllocationCounts().current_bytes;
  compat::ResetPeakCpuAllocations();
  work();
  return compat::GetCpuAllocationCounts().peak_bytes - before;
}

namespace {

// A "Vm...:   1234 kB" field of /proc/self/status in bytes; -1 if absent.
std::int64_t ProcStatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

}  // namespace

std::int64_t MeasurePeakResidentBytes(const std::function<void()>& work) {
  malloc_trim(0);
  {
    // "5" resets the peak resident set (VmHWM) to the current one.
    std::ofstream clear_refs("/proc/self/clear_refs");
    if (!(clear_refs << "5" << std::flush)) {
      work();
      return -1;
    }
  }
  const std::int64_t before = ProcStatusBytes("VmRSS");
  work();
  const std::int64_t peak = ProcStatusBytes("VmHWM");
  return before < 0 || peak < 0 ? -1 : peak - before;
}

}  // namespace ts::bench
