// Peak tensor memory of a piece of work: the CUDA caching allocator's peak on CUDA, a counting
// wrapper around LibTorch's CPU allocator on CPU (what tensors hold, not the malloc cache).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

namespace ts::bench {

// Bytes by which `work` raised peak memory above what was in use before it started.
std::int64_t MeasurePeakBytes(const torch::Device& device, const std::function<void()>& work);

// Bytes by which `work` raised the process's peak resident set (VmHWM) above its resident set
// before it started, after returning free heap memory to the system (malloc_trim), so that the
// malloc cache left by earlier work does not hide this work's peak. Counts everything resident,
// not only tensors. For CPU work that MeasurePeakBytes cannot count: the counting allocator
// breaks LibTorch operators that allocate through Allocator::raw_allocate (oneDNN's GELU among
// them). Linux only (/proc/self/clear_refs); -1 where the peak cannot be reset.
std::int64_t MeasurePeakResidentBytes(const std::function<void()>& work);

}  // namespace ts::bench
