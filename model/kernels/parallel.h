// at::parallel_for for kernels that create or update tensors inside the loop (model/ only).
//
// at::parallel_for runs the body on LibTorch's OpenMP threads without the caller's thread-local
// state, so on a worker thread InferenceMode and the grad mode are off: an in-place update of an
// inference tensor there throws ("Inplace update to inference tensor outside InferenceMode").
// ParallelFor carries the caller's state to every thread, as at::launch does.
//
// `work` is the call's total multiply-adds: below kMinParallelWork the body runs on the calling
// thread, since waking the pool costs more than tiny work gains (the demo model's attention on
// short documents runs faster on one thread: bench/model_profile --threads 1 against 2).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <cstdint>

namespace ts {

inline constexpr std::int64_t kMinParallelWork = std::int64_t{1} << 20;

template <typename F>
void ParallelFor(std::int64_t begin, std::int64_t end, std::int64_t grain, std::int64_t work,
                 const F& body) {
  if (work < kMinParallelWork) {
    if (begin < end) body(begin, end);
    return;
  }
  const at::ThreadLocalState state;
  at::parallel_for(begin, end, grain, [&](std::int64_t first, std::int64_t last) {
    const at::ThreadLocalStateGuard guard(state);
    body(first, last);
  });
}

}  // namespace ts
