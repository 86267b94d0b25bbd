#include "model/kernels/cuda_stream.h"

#if defined(TS_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include "model/torch_compat.h"

namespace ts {

#if defined(TS_WITH_CUDA)
struct CudaStreamScope::Guard {
  explicit Guard(c10::DeviceIndex index) : guard(at::cuda::getStreamFromPool(false, index)) {}
  c10::cuda::CUDAStreamGuard guard;
};

CudaStreamScope::CudaStreamScope(const torch::Device& device) {
  if (device.is_cuda()) {
    guard_ =
        std::make_unique<Guard>(static_cast<c10::DeviceIndex>(compat::CudaDeviceIndex(device)));
  }
}
#else
struct CudaStreamScope::Guard {};

CudaStreamScope::CudaStreamScope(const torch::Device& /*device*/) {}
#endif

CudaStreamScope::~CudaStreamScope() = default;

}  // namespace ts
