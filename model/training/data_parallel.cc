#include "model/training/data_parallel.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/torch_status.h"

#ifdef TS_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#ifdef TS_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ts {
namespace {

absl::StatusOr<int> IntFromEnvironment(const char* name, int fallback, int min, int max) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < min || parsed > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "=\"", std::string(value).substr(0, 64),
                     "\": expected an integer in [", min, ", ", max, "]"));
  }
  return parsed;
}

}  // namespace

absl::StatusOr<DataParallelOptions> DataParallelFromEnvironment() {
  DataParallelOptions options;
  TS_ASSIGN_OR_RETURN(options.world_size, IntFromEnvironment("WORLD_SIZE", 1, 1, 1 << 16));
  TS_ASSIGN_OR_RETURN(options.rank, IntFromEnvironment("RANK", 0, 0, options.world_size - 1));
  TS_ASSIGN_OR_RETURN(options.master_port,
                      IntFromEnvironment("MASTER_PORT", options.master_port, 1, 65535));
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    options.master_addr = addr;
  } else if (options.world_size > 1) {
    return absl::InvalidArgumentError(
        "environment variable MASTER_ADDR: required when WORLD_SIZE > 1");
  }
  return options;
}

#ifdef TS_HAVE_NCCL
bool HaveNccl() { return true; }
#else
bool HaveNccl() { return false; }
#endif

#ifdef TS_HAVE_GLOO

// c10d's Work type is named differently across LibTorch versions (ProcessGroup::Work in 1.x,
// Work in 2.x); the allreduce result names it for both.
using WorkPtr = decltype(std::declval<c10d::ProcessGroupGloo&>().allreduce(
    std::declval<std::vector<at::Tensor>&>()));

// One process group: Gloo for CPU ranks, NCCL for CUDA ranks.
struct DataParallelGroup::Backend {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#ifdef TS_HAVE_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif

  WorkPtr Allreduce(std::vector<at::Tensor>& tensors) {
#ifdef TS_HAVE_NCCL
    if (nccl) return nccl->allreduce(tensors);
#endif
    return gloo->allreduce(tensors);
  }
  WorkPtr Broadcast(std::vector<at::Tensor>& tensors) {
#ifdef TS_HAVE_NCCL
    if (nccl) return nccl->broadcast(tensors);
#endif
    return gloo->broadcast(tensors);
  }
};

absl::StatusOr<std::unique_ptr<DataParallelGroup>> DataParallelGroup::Connect(
    const DataParallelOptions& options) {
  std::unique_ptr<DataParallelGroup> group(new DataParallelGroup(options));
  if (options.world_size == 1 && !options.group_of_one) return group;
  if (options.device.is_cuda() && !HaveNccl()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a world of ", options.world_size,
                     " CUDA ranks needs c10d's NCCL backend, which this "
                     "build lacks (the CUDA build against the torch wheel has it)"));
  }
  TS_RETURN_IF_ERROR(CatchTorch("joining the data-parallel world", [&] {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(options.master_port);
    store_options.isServer = options.rank == 0;
    store_options.numWorkers = static_cast<std::size_t>(options.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    auto backend = std::make_unique<Backend>();
    backend->store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
#ifdef TS_HAVE_NCCL
    if (options.device.is_cuda()) {
      c10::cuda::set_device(options.device.has_index() ? options.device.index() : 0);
      auto nccl = c10d::ProcessGroupNCCL::Options::create();
      nccl->timeout = options.timeout;
      backend->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(backend->store, options.rank,
                                                                  options.world_size, nccl);
      group->backend_ = std::move(backend);
      return;
    }
#endif
    auto gloo = c10d::ProcessGroupGloo::Options::create(options.timeout);
    // As PyTorch: GLOO_SOCKET_IFNAME picks the interface; a loopback master means one machine.
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (options.master_addr == "127.0.0.1" || options.master_addr == "localhost") {
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    backend->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(backend->store, options.rank,
                                                                options.world_size, gloo);
    group->backend_ = std::move(backend);
  }));
  return group;
}

absl::Status DataParallelGroup::AverageGradients(const std::vector<torch::Tensor>& parameters) {
  if (backend_ == nullptr) return absl::OkStatus();
  return CatchTorch("averaging gradients", [&] {
    torch::NoGradGuard no_grad;
    // Buckets in reverse parameter order (the order backward produces them), one dtype each;
    // every bucket's all-reduce is in flight before the first is awaited.
    std::vector<std::vector<torch::Tensor>> buckets;
    std::int64_t bucket_bytes = 0;
    for (auto it = parameters.rbegin(); it != parameters.rend(); ++it) {
      const torch::Tensor& grad = it->grad();
      if (!grad.defined()) continue;
      const std::int64_t bytes = grad.numel() * static_cast<std::int64_t>(grad.element_size());
      if (buckets.empty() || bucket_bytes + bytes > options_.bucket_bytes ||
          buckets.back().front().scalar_type() != grad.scalar_type()) {
        buckets.emplace_back();
        bucket_bytes = 0;
      }
      buckets.back().push_back(grad);
      bucket_bytes += bytes;
    }
    std::vector<torch::Tensor> flats;
    std::vector<WorkPtr> works;
    for (const auto& bucket : buckets) {
      std::vector<torch::Tensor> pieces;
      pieces.reserve(bucket.size());
      for (const auto& g : bucket) pieces.push_back(g.reshape({-1}));
      std::vector<torch::Tensor> flat{torch::cat(pieces)};
      works.push_back(backend_->Allreduce(flat));
      flats.push_back(flat[0]);
    }
    const double scale = 1.0 / options_.world_size;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      works[b]->wait();
      std::int64_t offset = 0;
      for (auto& g : buckets[b]) {
        const std::int64_t n = g.numel();
        g.copy_(flats[b].narrow(0, offset, n).view(g.sizes()).mul_(scale));
        offset += n;
      }
    }
  });
}

absl::StatusOr<std::vector<double>> DataParallelGroup::Sum(const std::vector<double>& values) {
  if (backend_ == nullptr) return values;
  return CatchTorch("summing over the ranks", [&] {
    std::vector<torch::Tensor> tensor{
        torch::tensor(values, torch::TensorOptions().dtype(torch::kFloat64)).to(options_.device)};
    backend_->Allreduce(tensor)->wait();
    const torch::Tensor sums = tensor[0].cpu().contiguous();
    return std::vector<double>(sums.data_ptr<double>(), sums.data_ptr<double>() + sums.numel());
  });
}

absl::Status DataParallelGroup::Broadcast(const std::vector<torch::Tensor>& tensors) {
  if (backend_ == nullptr) return absl::OkStatus();
  return CatchTorch("broadcasting from rank 0", [&] {
    torch::NoGradGuard no_grad;
    for (const auto& t : tensors) {
      std::vector<torch::Tensor> one{t.detach()};
      backend_->Broadcast(one)->wait();
    }
  });
}

#else  // !TS_HAVE_GLOO

struct DataParallelGroup::Backend {};

absl::StatusOr<std::unique_ptr<DataParallelGroup>> DataParallelGroup::Connect(
    const DataParallelOptions& options) {
  if (options.world_size > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a world of ", options.world_size,
        " ranks needs c10d's Gloo backend, which this build lacks (build against a LibTorch "
        "with gloo headers: on Debian, install libgloo-dev and rebuild)"));
  }
  return std::unique_ptr<DataParallelGroup>(new DataParallelGroup(options));
}

absl::Status DataParallelGroup::AverageGradients(const std::vector<torch::Tensor>&) {
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> DataParallelGroup::Sum(const std::vector<double>& values) {
  return values;
}

absl::Status DataParallelGroup::Broadcast(const std::vector<torch::Tensor>&) {
  return absl::OkStatus();
}

#endif  // TS_HAVE_GLOO

DataParallelGroup::DataParallelGroup(const DataParallelOptions& options) : options_(options) {}
DataParallelGroup::~DataParallelGroup() = default;

}  // namespace ts
