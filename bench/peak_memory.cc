#include "bench/peak_memory.h"

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

}  // namespace ts::bench
