#include "model/version_fields.h"

#include <ATen/detail/CUDAHooksInterface.h>

#include <exception>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/kernels/cpu_features.h"
#include "model/torch_compat.h"

namespace ts {
namespace {

#if defined(TS_WITH_CUDA)
// CUDA's integer versions (12040) as "12.4".
std::string CudaVersionName(long version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}
#endif

std::string CudaField() {
#if defined(TS_WITH_CUDA)
  std::string text = "built with CUDA";
  try {
    // The CUDA runtime LibTorch's CUDA library was built against (the one this process loads).
    absl::StrAppend(&text, " ", CudaVersionName(at::detail::getCUDAHooks().versionCUDART()));
  } catch (const std::exception&) {
    absl::StrAppend(&text, " (LibTorch's CUDA library is not loaded)");
  }
  absl::StrAppend(&text, ", ", compat::CudaDeviceCount(), " device(s) visible");
  return text;
#else
  return "not built with CUDA (CPU-only LibTorch)";
#endif
}

}  // namespace

std::vector<VersionField> TorchVersionFields() {
  return {{"libtorch", compat::TorchVersion()},
          {"cpu kernels", DescribeCpuCapability()},
          {"cuda", CudaField()}};
}

}  // namespace ts
