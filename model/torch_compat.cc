#include "model/torch_compat.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/core/CPUAllocator.h>
#include <omp.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <limits>
#if defined(TS_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

// Debian's gRPC, protobuf and absl pass std::string across their interfaces with the C++11 ABI;
// so must every LibTorch this links (CMakeLists.txt refuses the old ABI at configure time).
static_assert(_GLIBCXX_USE_CXX11_ABI == 1, "LibTorch and Debian's libraries need the C++11 ABI");

namespace ts::compat {

namespace {
std::atomic<int> default_threads{0};  // 0 = SetThreads was never called
}  // namespace

void SetThreads(int intra_op_threads) {
  const int threads = std::max(1, intra_op_threads);
  default_threads.store(threads);
  at::set_num_threads(threads);
  // Inter-op threads can only be set once per process and before first use.
  static std::atomic<bool> interop_set{false};
  if (!interop_set.exchange(true)) {
    try {
      at::set_num_interop_threads(threads);
    } catch (const std::exception&) {
      // Already started by an earlier parallel call: keep its value.
    }
  }
}

void SetThisThreadParallelism(int threads) { omp_set_num_threads(std::max(1, threads)); }

int DefaultIntraOpThreads() {
  const int threads = default_threads.load();
  return threads > 0 ? threads : at::get_num_threads();
}

void UseDefaultThreadsOnThisThread() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  if (const int threads = default_threads.load(); threads > 0) at::set_num_threads(threads);
}

torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& key_keep) {
#if TORCH_VERSION_MAJOR >= 2
  if (key_keep.defined()) {
    return at::scaled_dot_product_attention(q, k, v, key_keep);
  }
  return at::scaled_dot_product_attention(q, k, v);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q, k.transpose(-2, -1)).mul_(scale);
  if (key_keep.defined()) {
    scores.masked_fill_(key_keep.logical_not(), -std::numeric_limits<float>::infinity());
  }
  return torch::matmul(torch::softmax(scores, -1), v);
#endif
}

bool AutocastEnabled(torch::DeviceType device) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR >= 3
  return at::autocast::is_autocast_enabled(device);
#else
  return device == torch::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

Bf16Autocast::Bf16Autocast(bool enabled, torch::DeviceType device)
    : enabled_(enabled), device_(device) {
  if (!enabled_) return;
  was_enabled_ = AutocastEnabled(device_);
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR >= 3
  was_dtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_dtype(device_, at::kBFloat16);
  at::autocast::set_autocast_enabled(device_, true);
#else
  if (device_ == torch::kCPU) {
    was_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
  } else {
    was_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
  }
#endif
  at::autocast::increment_nesting();
}

Bf16Autocast::~Bf16Autocast() {
  if (!enabled_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR >= 3
  at::autocast::set_autocast_enabled(device_, was_enabled_);
  at::autocast::set_autocast_dtype(device_, was_dtype_);
#else
  if (device_ == torch::kCPU) {
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(was_dtype_);
  } else {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(was_dtype_);
  }
#endif
}

int CudaDeviceCount() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

int CudaDeviceIndex(const torch::Device& device) {
#if defined(TS_WITH_CUDA)
  if (device.is_cuda() && !device.has_index()) return c10::cuda::current_device();
#endif
  return device.has_index() ? device.index() : 0;
}

bool UseOnlySdpaBackend(const std::string& backend) {
#if TORCH_VERSION_MAJOR >= 2
  auto& context = at::globalContext();
  const bool all = backend == "auto";
  if (!all && backend != "flash" && backend != "efficient" && backend != "cudnn" &&
      backend != "math") {
    return false;
  }
  context.setSDPUseFlash(all || backend == "flash");
  context.setSDPUseMemEfficient(all || backend == "efficient");
  context.setSDPUseCuDNN(all || backend == "cudnn");
  context.setSDPUseMath(all || backend == "math");
  return true;
#else
  return backend == "auto";
#endif
}

#if defined(TS_WITH_CUDA)
namespace {
// The caching allocator sizes its per-device tables at its first allocation; before that its
// statistics calls throw "Invalid device argument" (seen on an H200: tsserver's first metrics
// read). Nothing allocated yet means zero bytes.
bool CudaAllocatorStarted() { return c10::cuda::CUDACachingAllocator::get()->initialized(); }
}  // namespace
#endif

DeviceMemory GetDeviceMemory([[maybe_unused]] const torch::Device& device) {
  DeviceMemory memory;
#if defined(TS_WITH_CUDA)
  if (device.is_cuda() && CudaAllocatorStarted()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(CudaDeviceIndex(device));
    // Index 0 is StatType::AGGREGATE in every LibTorch version.
    memory.allocated_bytes = stats.allocated_bytes[0].current;
    memory.reserved_bytes = stats.reserved_bytes[0].current;
    memory.peak_allocated_bytes = stats.allocated_bytes[0].peak;
  }
#endif
  return memory;
}

void ResetPeakDeviceMemory([[maybe_unused]] const torch::Device& device) {
#if defined(TS_WITH_CUDA)
  if (device.is_cuda() && CudaAllocatorStarted()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(CudaDeviceIndex(device));
  }
#endif
}

std::int64_t CudaAvailableBytes([[maybe_unused]] const torch::Device& device) {
#if defined(TS_WITH_CUDA)
  if (device.is_cuda()) {
    const int index = CudaDeviceIndex(device);
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
    std::size_t free = 0, total = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    if (!CudaAllocatorStarted()) return static_cast<std::int64_t>(free);
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    return static_cast<std::int64_t>(free) + stats.reserved_bytes[0].current -
           stats.allocated_bytes[0].current;
  }
#endif
  return 0;
}

void SetCudaTf32([[maybe_unused]] bool allow) {
#if defined(TS_WITH_CUDA)
  at::globalContext().setAllowTF32CuBLAS(allow);
  at::globalContext().setAllowTF32CuDNN(allow);
#endif
}

bool CudaTf32Allowed() {
#if defined(TS_WITH_CUDA)
  return at::globalContext().allowTF32CuBLAS() || at::globalContext().allowTF32CuDNN();
#else
  return false;
#endif
}

torch::Tensor BmmFloat32(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat) return torch::bmm(a, b);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
  if (a.is_cuda()) return at::bmm(a, b, torch::kFloat);
#endif
  return torch::bmm(a, b).to(torch::kFloat);
}

void WithCudaStream(const torch::Device& device,
                    const std::function<void(void* stream, int multiprocessors)>& launch) {
#if defined(TS_WITH_CUDA)
  TORCH_CHECK(device.is_cuda(), "WithCudaStream: ", device, " is not a CUDA device");
  const auto index = static_cast<c10::DeviceIndex>(CudaDeviceIndex(device));
  c10::cuda::CUDAGuard guard(index);
  launch(at::cuda::getCurrentCUDAStream(index).stream(),
         at::cuda::getDeviceProperties(index)->multiProcessorCount);
#else
  (void)launch;
  TORCH_CHECK(false, "WithCudaStream: this build has no CUDA (", device, ")");
#endif
}

int CudaComputeCapabilityMajor([[maybe_unused]] const torch::Device& device) {
#if defined(TS_WITH_CUDA)
  if (device.is_cuda()) {
    return at::cuda::getDeviceProperties(CudaDeviceIndex(device))->major;
  }
#endif
  return 0;
}

std::string TorchVersion() { return TORCH_VERSION; }

void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

namespace {

// LibTorch 2.3 made Allocator::allocate non-const and added the pure virtual copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define TS_ALLOCATE_QUALIFIER
#define TS_ALLOCATOR_HAS_COPY_DATA 1
#else
#define TS_ALLOCATE_QUALIFIER const
#define TS_ALLOCATOR_HAS_COPY_DATA 0
#endif

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(std::size_t bytes) TS_ALLOCATE_QUALIFIER override {
    auto* context = new Context{base_->allocate(bytes), static_cast<std::int64_t>(bytes), this};
    const auto now = current_.fetch_add(context->bytes) + context->bytes;
    auto peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return {context->inner.get(), context, &Release, c10::Device(c10::DeviceType::CPU)};
  }
#if TS_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  CpuAllocationCounts Counts() const { return {current_.load(), peak_.load()}; }
  void ResetPeak() { peak_.store(current_.load()); }

 private:
  struct Context {
    c10::DataPtr inner;
    std::int64_t bytes;
    const CountingCpuAllocator* owner;
  };
  static void Release(void* raw) {
    auto* context = static_cast<Context*>(raw);
    context->owner->current_.fetch_sub(context->bytes);
    delete context;
  }

  c10::Allocator* base_;
  mutable std::atomic<std::int64_t> current_{0};
  mutable std::atomic<std::int64_t> peak_{0};
};

CountingCpuAllocator* Counter() {
  // Process lifetime: tensors counted by it may outlive any scope.
  static auto* counter = [] {
    auto* allocator = new CountingCpuAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(allocator, /*priority=*/100);
    return allocator;
  }();
  return counter;
}

}  // namespace

void CountCpuAllocations() { Counter(); }
CpuAllocationCounts GetCpuAllocationCounts() { return Counter()->Counts(); }
void ResetPeakCpuAllocations() { Counter()->ResetPeak(); }

}  // namespace ts::compat
