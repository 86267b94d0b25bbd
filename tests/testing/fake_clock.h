// FakeClock: a ts::Clock whose time moves only when the test calls Advance()/SetTime().
//
// WaitUntil() blocks until the condition variable is notified or the fake time reaches the
// deadline; Advance()/SetTime() wake every waiter whose deadline has been reached. Tests
// synchronise with threads blocked in WaitUntil() through BlockUntilWaiting(), whose real-time
// timeout is only a guard against a hung test.
// Thread safety: all methods may be called from any thread. A FakeClock must outlive every
// thread waiting on it.
#pragma once

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace ts::testing {

class FakeClock final : public ts::Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  FakeClock(const FakeClock&) = delete;
  FakeClock& operator=(const FakeClock&) = delete;

  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  bool WaitUntil(absl::CondVar& cv, absl::Mutex& mu, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Waiter waiter{&cv, &mu, deadline};
    {
      absl::MutexLock lock(&mu_);
      if (now_ >= deadline) return true;
      waiters_.push_back(&waiter);
    }
    // The caller holds `mu` from registration until Wait() releases it, and Advance() signals
    // only while holding `mu`, so a wake-up cannot fall between the two.
    cv.Wait(&mu);
    absl::MutexLock lock(&mu_);
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &waiter));
    return now_ >= deadline;
  }

  void Advance(absl::Duration d) {
    {
      absl::MutexLock lock(&mu_);
      now_ += d;
    }
    WakeDueWaiters();
  }

  void SetTime(absl::Time t) {
    {
      absl::MutexLock lock(&mu_);
      now_ = t;
    }
    WakeDueWaiters();
  }

  // Blocks until `threads` threads (at least) wait in WaitUntil() with exactly `deadline` and have
  // not been woken by the clock; false if that did not happen within `real_timeout`.
  bool BlockUntilWaiting(absl::Time deadline, absl::Duration real_timeout = absl::Seconds(10),
                         int threads = 1) {
    absl::MutexLock lock(&mu_);
    auto waiting = [this, deadline, threads]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::count_if(waiters_.begin(), waiters_.end(), [deadline](const Waiter* w) {
               return w->deadline == deadline && !w->woken;
             }) >= threads;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&waiting), real_timeout);
  }

 private:
  struct Waiter {
    absl::CondVar* cv;
    absl::Mutex* mu;
    absl::Time deadline;
    bool woken = false;
  };

  // Signals each due waiter's condition variable with the waiter's mutex held. mu_ is never
  // acquired after a waiter's mutex by this thread (waiters take them in the other order), so the
  // waiter's mutex is only tried; while its holder runs, retry.
  void WakeDueWaiters() {
    while (true) {
      bool retry = false;
      {
        absl::MutexLock lock(&mu_);
        for (Waiter* w : waiters_) {
          if (w->woken || w->deadline > now_) continue;
          if (!w->mu->TryLock()) {
            retry = true;
            continue;
          }
          w->woken = true;
          w->cv->SignalAll();
          w->mu->Unlock();
        }
      }
      if (!retry) return;
      std::this_thread::yield();
    }
  }

  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ts::testing
