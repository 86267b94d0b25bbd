#include "common/gpu_telemetry.h"

#include <dlfcn.h>

#include <array>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ts {
namespace {

// The parts of nvml.h used here (its C ABI, stable across driver versions: the _v2 entry
// points exist since driver 325).
using NvmlReturn = int;  // nvmlReturn_t; NVML_SUCCESS = 0
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;  // NOLINT(google-runtime-int): nvml.h's type
  unsigned long long free;   // NOLINT(google-runtime-int)
  unsigned long long used;   // NOLINT(google-runtime-int)
};
constexpr unsigned int kUuidBytes = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

}  // namespace

struct GpuTelemetry::Api {
  void* handle = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*device_count)(unsigned int*) = nullptr;
  NvmlReturn (*handle_by_index)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned int) = nullptr;
  bool initialised = false;

  ~Api() {
    if (initialised) shutdown();
    if (handle != nullptr) dlclose(handle);
  }
};

GpuTelemetry::GpuTelemetry(std::unique_ptr<Api> api) : api_(std::move(api)) {}
GpuTelemetry::~GpuTelemetry() = default;

absl::StatusOr<std::unique_ptr<GpuTelemetry>> GpuTelemetry::Open(const std::string& library) {
  auto api = std::make_unique<Api>();
  api->handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->handle == nullptr) {
    const char* error = dlerror();
    return absl::NotFoundError(absl::StrCat("NVML: cannot load ", library, ": ",
                                            error != nullptr ? error : "unknown error"));
  }
  const char* missing = nullptr;  // the first symbol the library lacks
  const auto bind = [&](const char* name, auto* out) {
    *out = reinterpret_cast<std::remove_pointer_t<decltype(out)>>(dlsym(api->handle, name));
    if (*out == nullptr && missing == nullptr) missing = name;
  };
  bind("nvmlInit_v2", &api->init);
  bind("nvmlShutdown", &api->shutdown);
  bind("nvmlErrorString", &api->error_string);
  bind("nvmlDeviceGetCount_v2", &api->device_count);
  bind("nvmlDeviceGetHandleByIndex_v2", &api->handle_by_index);
  bind("nvmlDeviceGetUtilizationRates", &api->utilization);
  bind("nvmlDeviceGetMemoryInfo", &api->memory);
  bind("nvmlDeviceGetUUID", &api->uuid);
  if (missing != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("NVML: ", library, " has no symbol ", missing));
  }
  const NvmlReturn status = api->init();
  if (status != 0) {
    const char* message = api->error_string(status);
    return absl::FailedPreconditionError(
        absl::StrCat("NVML: nvmlInit failed: ", message != nullptr ? message : "unknown error",
                     " (", status, ")"));
  }
  api->initialised = true;
  return std::unique_ptr<GpuTelemetry>(new GpuTelemetry(std::move(api)));
}

int GpuTelemetry::device_count() const {
  unsigned int count = 0;
  return api_->device_count(&count) == 0 ? static_cast<int>(count) : 0;
}

std::vector<GpuTelemetry::Sample> GpuTelemetry::Read() const {
  std::vector<Sample> samples;
  const int count = device_count();
  for (int i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    NvmlUtilization utilization{};
    NvmlMemory memory{};
    std::array<char, kUuidBytes> uuid{};
    if (api_->handle_by_index(static_cast<unsigned int>(i), &device) != 0 ||
        api_->utilization(device, &utilization) != 0 || api_->memory(device, &memory) != 0 ||
        api_->uuid(device, uuid.data(), kUuidBytes) != 0) {
      continue;
    }
    uuid.back() = '\0';
    Sample sample;
    sample.index = i;
    sample.uuid = uuid.data();
    sample.utilization = utilization.gpu / 100.0;
    sample.memory_utilization = utilization.memory / 100.0;
    sample.memory_used_bytes = memory.used;
    sample.memory_total_bytes = memory.total;
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace ts
