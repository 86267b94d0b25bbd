#include "common/clock.h"

namespace ts {
namespace {

class RealClockImpl final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  bool WaitUntil(absl::CondVar& cv, absl::Mutex& mu, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return cv.WaitWithDeadline(&mu, deadline);
  }
};

}  // namespace

Clock* RealClock() {
  static auto* clock = new RealClockImpl();
  return clock;
}

}  // namespace ts
