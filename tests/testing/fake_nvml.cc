// A stand-in for NVIDIA's libnvidia-ml.so.1 with the entry points common/gpu_telemetry.cc uses,
// so that the NVML path runs on machines without a GPU: two GPUs with fixed readings.
// FAKE_NVML_INIT_ERROR=N makes nvmlInit_v2 return N; FAKE_NVML_FAIL_INDEX=I makes every query
// of GPU I fail (as for a GPU that fell off the bus).
#include <cstdlib>
#include <cstring>

namespace {

struct FakeDevice {
  int index;
};
FakeDevice devices[2] = {{0}, {1}};

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

bool Fails(const FakeDevice* device) { return device->index == EnvInt("FAKE_NVML_FAIL_INDEX", -1); }

}  // namespace

extern "C" {

struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;  // NOLINT(google-runtime-int): nvml.h's type
  unsigned long long free;   // NOLINT(google-runtime-int)
  unsigned long long used;   // NOLINT(google-runtime-int)
};

int nvmlInit_v2() { return EnvInt("FAKE_NVML_INIT_ERROR", 0); }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int status) {
  return status == 9 ? "Driver Not Loaded" : "Unknown Error";
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, FakeDevice** device) {
  if (index >= 2) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = &devices[index];
  return 0;
}
int nvmlDeviceGetUtilizationRates(FakeDevice* device, NvmlUtilization* out) {
  if (Fails(device)) return 15;  // NVML_ERROR_GPU_IS_LOST
  out->gpu = device->index == 0 ? 37 : 100;
  out->memory = device->index == 0 ? 12 : 64;
  return 0;
}
int nvmlDeviceGetMemoryInfo(FakeDevice* device, NvmlMemory* out) {
  if (Fails(device)) return 15;
  out->total = 80ULL << 30;
  out->used = device->index == 0 ? 1ULL << 30 : 79ULL << 30;
  out->free = out->total - out->used;
  return 0;
}
int nvmlDeviceGetUUID(FakeDevice* device, char* uuid, unsigned int length) {
  if (Fails(device)) return 15;
  const char* value = device->index == 0 ? "GPU-fake-0000" : "GPU-fake-0001";
  if (std::strlen(value) + 1 > length) return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  std::strcpy(uuid, value);  // NOLINT(clang-analyzer-security.insecureAPI.strcpy): length checked
  return 0;
}

}  // extern "C"
