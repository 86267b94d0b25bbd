// A CUDA stream of its own for the calling thread's work on one device, for the scope of an
// object: the serving batch threads run their batches side by side on LibTorch's stream pool
// instead of queueing on the device's default stream.
#pragma once

#include <torch/torch.h>

#include <memory>

namespace ts {

class CudaStreamScope {
 public:
  // On a CUDA device, makes a stream from LibTorch's pool current for `device` until
  // destruction; elsewhere (the CPU, a build without CUDA) does nothing.
  explicit CudaStreamScope(const torch::Device& device);
  ~CudaStreamScope();
  CudaStreamScope(const CudaStreamScope&) = delete;
  CudaStreamScope& operator=(const CudaStreamScope&) = delete;

 private:
  struct Guard;
  std::unique_ptr<Guard> guard_;
};

}  // namespace ts
