// Time source of the server. Production uses RealClock; tests inject a fake clock
// (tests/testing/fake_clock.h) that only moves when the test says, so batching timeouts are
// tested without sleeps.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ts {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  // Blocks on `cv` (with `mu` held by the caller) until notified or until Now() ≥ deadline,
  // whichever comes first. Returns true when the deadline was reached.
  virtual bool WaitUntil(absl::CondVar& cv, absl::Mutex& mu, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
};

// absl::Now() and CondVar::WaitWithDeadline.
Clock* RealClock();

}  // namespace ts
