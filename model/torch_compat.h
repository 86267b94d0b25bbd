// The one place for calls whose spelling differs between LibTorch 1.13 (Debian, CPU) and
// LibTorch 2.x (CUDA builds). Everything else uses the stable API.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <functional>
#include <string>

namespace ts::compat {

// Sets intra-op threads (and inter-op threads once, before any parallel work starts) and
// remembers the count as the process's serving default (see UseDefaultThreadsOnThisThread).
void SetThreads(int intra_op_threads);

// The intra-op threads of the parallel regions this thread starts, and nothing else: unlike
// at::set_num_threads it leaves the process-wide count and LibTorch's other thread pools alone,
// so it is cheap enough to call per batch. (LibTorch's OpenMP build reads this per-thread
// setting in at::get_num_threads; OpenBLAS and oneDNN read it too.)
void SetThisThreadParallelism(int threads);

// The count last given to SetThreads, or at::get_num_threads() if it was never called.
int DefaultIntraOpThreads();
// The intra-op threads of the calling thread only (at::set_num_threads) to the count last given
// to SetThreads, once per thread. With LibTorch's OpenMP backend the team size is a per-thread
// setting (and LibTorch takes the count as the default of threads that have not run parallel
// work yet): threads that do torch work call this before their first op.
void UseDefaultThreadsOnThisThread();

// softmax(q kᵀ / sqrt(d)) v with padded keys excluded. `key_keep` is [B, 1, 1, N] bool
// (true = real key) or undefined. Uses the fused kernel where the LibTorch version has one.
torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& key_keep);

// Whether autocast is on for `device` on this thread.
bool AutocastEnabled(torch::DeviceType device);

// RAII: autocast to bfloat16 on `device` for this scope when `enabled` (the forward pass of
// mixed-precision training): matrix products and convolutions run in bfloat16, norms,
// reductions and losses in float32, as torch.autocast(device, torch.bfloat16) does; the cache of
// weights cast to bfloat16 is cleared when the outermost scope ends.
class Bf16Autocast {
 public:
  Bf16Autocast(bool enabled, torch::DeviceType device);
  ~Bf16Autocast();
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool enabled_;
  torch::DeviceType device_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

// RAII: autocast off for this scope (ops run in their inputs' dtype), for code that needs
// float32 inside an autocast region.
class NoAutocast {
 private:
  c10::impl::ExcludeDispatchKeyGuard guard_{c10::autocast_dispatch_keyset};
};

// CUDA devices this process sees: 0 in a CPU build or without a visible GPU.
int CudaDeviceCount();

// The CUDA device `device` names: its index, or the current device for "cuda" without one.
int CudaDeviceIndex(const torch::Device& device);

// Restricts scaled_dot_product_attention to one backend ("flash", "efficient", "cudnn", "math"),
// or allows all of them again ("auto"). False when this LibTorch has no such backend (1.13 has
// no fused SDPA: ScaledDotProductAttention computes it with matmul and softmax). Process-wide;
// for benchmarks.
bool UseOnlySdpaBackend(const std::string& backend);

// The key of a parameter in torch::optim::Optimizer's per-parameter state map: its TensorImpl's
// address as a string in LibTorch 1.x, the address itself in 2.x.
#if TORCH_VERSION_MAJOR >= 2
using OptimizerStateKey = void*;
inline OptimizerStateKey ParamStateKey(const torch::Tensor& p) { return p.unsafeGetTensorImpl(); }
#else
using OptimizerStateKey = std::string;
inline OptimizerStateKey ParamStateKey(const torch::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}
#endif

// Device memory of `device` (CUDA only; zeros elsewhere).
struct DeviceMemory {
  std::int64_t allocated_bytes = 0;
  std::int64_t reserved_bytes = 0;
  std::int64_t peak_allocated_bytes = 0;
};
DeviceMemory GetDeviceMemory(const torch::Device& device);
void ResetPeakDeviceMemory(const torch::Device& device);

// Bytes a new allocation on `device` can take without waiting: the device's free memory plus
// what the caching allocator holds unused. 0 on CPU or in a build without CUDA.
std::int64_t CudaAvailableBytes(const torch::Device& device);

// Whether float32 matrix products and convolutions on CUDA may use TF32 tensor cores (10-bit
// mantissa). LibTorch's defaults differ by library (cuBLAS off, cuDNN on); this sets both.
// Process-wide. No-op in a build without CUDA.
void SetCudaTf32(bool allow);
bool CudaTf32Allowed();

// a·b for [B, n, k] × [B, k, m] with the result in float32: bfloat16 or half inputs are
// multiplied with float32 accumulation and not rounded back (cuBLAS's out_dtype on CUDA with
// LibTorch ≥ 2.9; elsewhere the product in the inputs' dtype, converted).
torch::Tensor BmmFloat32(const torch::Tensor& a, const torch::Tensor& b);

// The CUDA device's compute capability major version (8 for A100, 9 for H100); 0 on CPU or in
// a build without CUDA.
int CudaComputeCapabilityMajor(const torch::Device& device);

// Runs `launch(stream, multiprocessors)` with `device` current: the current CUDA stream of that
// device (a cudaStream_t) and its number of streaming multiprocessors. For the fused kernels'
// launchers, which take raw streams. Throws in a build without CUDA.
void WithCudaStream(const torch::Device& device,
                    const std::function<void(void* stream, int multiprocessors)>& launch);

// "1.13.0" / "2.3.1": the LibTorch version this binary was compiled against.
std::string TorchVersion();

// Waits for queued work on `device` (no-op on CPU), so wall-clock timings are real.
void Synchronize(const torch::Device& device);

// Bytes held by CPU tensors, counted by a wrapper around LibTorch's CPU allocator. Counting
// starts with the first call of CountCpuAllocations() (tensors allocated earlier are not seen).
struct CpuAllocationCounts {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
};
void CountCpuAllocations();
CpuAllocationCounts GetCpuAllocationCounts();
void ResetPeakCpuAllocations();

}  // namespace ts::compat
