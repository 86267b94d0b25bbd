// Data-parallel training across processes (and machines) with c10d: a TCPStore rendezvous and
// a Gloo process group that averages gradients in buckets after each backward pass, the way
// torch.nn.parallel.DistributedDataParallel does (without overlapping communication with the
// backward pass). The world comes from the torchrun / Kubeflow PyTorchJob environment
// (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) or from explicit options.
//
// CUDA ranks (options.device a CUDA device, one device per rank) all-reduce over c10d's NCCL
// backend, as torch.distributed does: the CUDA build against the torch wheel has it (HaveNccl()).
//
// Builds without c10d's Gloo backend (TS_HAVE_GLOO unset: LibTorch without gloo headers) still
// compile: Connect() then fails with FAILED_PRECONDITION for a world of more than one rank, as it
// does for CUDA ranks in a build without NCCL.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ts {

struct DataParallelOptions {
  std::string master_addr = "127.0.0.1";  // rank 0 hosts the TCPStore here
  int master_port = 29500;
  int world_size = 1;
  int rank = 0;
  // How long a rendezvous or a collective may wait for the other ranks.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // Gradients are averaged in buckets of about this many bytes (DDP's default: 25 MiB).
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  // This rank's device: CPU ranks all-reduce over Gloo, CUDA ranks over NCCL (their tensors stay
  // on the device). Connect makes a CUDA device the thread's current one.
  torch::Device device = torch::kCPU;
  // Builds the process group even for a world of one rank (tests of the backend on one GPU).
  bool group_of_one = false;
};

// Reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK (all absent = one rank; WORLD_SIZE > 1
// needs the other three). INVALID_ARGUMENT naming the variable for a malformed value.
absl::StatusOr<DataParallelOptions> DataParallelFromEnvironment();

// True when this build has c10d's NCCL backend (CUDA ranks).
bool HaveNccl();

class DataParallelGroup {
 public:
  // Joins the world (blocks until every rank has joined, up to options.timeout). A world of one
  // rank needs no backend and communicates nothing.
  static absl::StatusOr<std::unique_ptr<DataParallelGroup>> Connect(
      const DataParallelOptions& options);
  ~DataParallelGroup();

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }

  // Replaces each gradient by its mean over the ranks (undefined gradients are left alone; every
  // rank must have the same ones).
  absl::Status AverageGradients(const std::vector<torch::Tensor>& parameters);
  // Sums each value over the ranks (float64).
  absl::StatusOr<std::vector<double>> Sum(const std::vector<double>& values);
  // Copies rank 0's values of these tensors to every rank.
  absl::Status Broadcast(const std::vector<torch::Tensor>& tensors);

 private:
  struct Backend;
  explicit DataParallelGroup(const DataParallelOptions& options);

  DataParallelOptions options_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace ts
