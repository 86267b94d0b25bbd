// GPU utilisation and memory from NVIDIA's management library (NVML), which the driver installs
// (libnvidia-ml.so.1): loaded at run time, so building needs nothing of CUDA and a machine
// without the driver simply has no GPU telemetry. What LibTorch cannot say: how busy each GPU is
// (the share of the driver's last sample period in which a kernel ran, and in which device
// memory was read or written) and the memory every process on it uses, not only this one's.
// NVML numbers GPUs its own way (PCI order; CUDA_VISIBLE_DEVICES does not apply), so samples
// carry the GPU's UUID too. Torch-free; thread-safe (NVML is).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ts {

class GpuTelemetry {
 public:
  struct Sample {
    int index = 0;                  // NVML's index
    std::string uuid;               // "GPU-..." (nvidia-smi -L)
    double utilization = 0;         // 0..1: time a kernel ran, over the last sample period
    double memory_utilization = 0;  // 0..1: time device memory was read or written
    std::uint64_t memory_used_bytes = 0;
    std::uint64_t memory_total_bytes = 0;
  };

  // Loads `library` and initialises NVML. NOT_FOUND when the library cannot be loaded (no
  // driver), FAILED_PRECONDITION when it lacks a symbol or NVML does not start (the message
  // is NVML's own, e.g. "Driver Not Loaded").
  static absl::StatusOr<std::unique_ptr<GpuTelemetry>> Open(
      const std::string& library = "libnvidia-ml.so.1");
  ~GpuTelemetry();
  GpuTelemetry(const GpuTelemetry&) = delete;
  GpuTelemetry& operator=(const GpuTelemetry&) = delete;

  int device_count() const;
  // One sample per GPU NVML answers for; a GPU whose query fails (fallen off the bus, reset) is
  // left out, so a scrape never shows a stale or made-up number.
  std::vector<Sample> Read() const;

 private:
  struct Api;
  explicit GpuTelemetry(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace ts
