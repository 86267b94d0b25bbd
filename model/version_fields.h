// The --version fields of the binaries that link LibTorch (tsserver, tsworker, tsmodel): the
// LibTorch version, the CPU kernel level the kernels run at (model/kernels/cpu_features.h, with
// TS_CPU_CAPABILITY's cap) and CUDA (built with or without it; when built with it, the CUDA
// runtime and driver versions and the devices this process sees).
#pragma once

#include <vector>

#include "common/build_version.h"

namespace ts {

std::vector<VersionField> TorchVersionFields();

}  // namespace ts
