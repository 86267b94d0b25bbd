// Peak tensor memory of a piece of work: the CUDA caching allocator's peak on CUDA, a counting
// wrapper around LibTorch's CPU allocator on CPU (what tensors hold, not the malloc cache).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

namespace ts::bench {

// Bytes by which `work` raised peak memory above what was in use before it started.
std::int64_t MeasurePeakBytes(const torch::Device& device, const std::function<void()>& work);

}  // namespace ts::bench
