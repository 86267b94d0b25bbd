// StepRate: a training job's recent step rate, from the (step, time) of its last progress
// reports, and the time its remaining steps take at that rate (taylorshift_job_eta_seconds,
// TrainingProgress.eta_seconds). An evaluation job's examples are counted the same way (its
// "steps" are the examples evaluated).
// The rate is taken over a window of the last kWindow reports rather than the last one alone, so
// that a validation run or a checkpoint between two reports raises the ETA only by its share.
// Reset when the job's workers start (again): a resumed job's rate starts from its resume.
// Not thread-safe: one job's reports come from its runner's thread, in order.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

#include "absl/time/time.h"

namespace ts::server {

class StepRate {
 public:
  // Reports the rate is taken over (the first and the last of them).
  static constexpr std::size_t kWindow = 6;

  void Reset() { reports_.clear(); }
  // A progress report: the job was at `step` at time `at`. A step or time not after the last
  // report's (a worker restarted on a resume) starts the window again.
  void Add(std::int64_t step, absl::Time at);
  // Steps per second over the window; nullopt before two reports.
  std::optional<double> StepsPerSecond() const;
  // Seconds the steps after `step` up to `total_steps` take at that rate (0 once `step` reaches
  // `total_steps`); nullopt while the rate is unknown or 0.
  std::optional<double> EtaSeconds(std::int64_t step, std::int64_t total_steps) const;

 private:
  std::deque<std::pair<std::int64_t, absl::Time>> reports_;
};

}  // namespace ts::server
