// Peak memory of a piece of work: device allocator peak on CUDA, the resident-set high-water
// mark (VmHWM, reset through /proc/self/clear_refs) on CPU.
#pragma once

#include <cstdint>
#include <functional>

#include <torch/torch.h>

namespace ts::bench {

// Bytes by which `work` raised peak memory above what was in use before it started.
std::int64_t MeasurePeakBytes(const torch::Device& device, const std::function<void()>& work);

}  // namespace ts::bench
