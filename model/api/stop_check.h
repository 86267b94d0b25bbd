// StopCheck: how a long computation learns that nobody waits for its result any more. The
// computation calls the hook between its steps (the encoder between blocks, a batch between its
// passes over windows); OK means go on, any other status ends the computation, which returns that
// status (CANCELLED: every caller left; DEADLINE_EXCEEDED: every caller's deadline passed;
// UNAVAILABLE: the server is shutting down). An empty hook never stops. Torch-free and
// transport-free: the server fills it from its callers, the model only calls it.
#pragma once

#include <functional>

#include "absl/status/status.h"

namespace ts {

using StopCheck = std::function<absl::Status()>;

// OK for an empty hook, else what the hook says.
inline absl::Status CheckStop(const StopCheck& stop) { return stop ? stop() : absl::OkStatus(); }

}  // namespace ts
