#include "server/jobs/step_rate.h"

namespace ts::server {

void StepRate::Add(std::int64_t step, absl::Time at) {
  if (!reports_.empty() && (step <= reports_.back().first || at <= reports_.back().second)) {
    reports_.clear();
  }
  reports_.emplace_back(step, at);
  while (reports_.size() > kWindow) reports_.pop_front();
}

std::optional<double> StepRate::StepsPerSecond() const {
  if (reports_.size() < 2) return std::nullopt;
  const auto& [first_step, first_time] = reports_.front();
  const auto& [last_step, last_time] = reports_.back();
  return static_cast<double>(last_step - first_step) /
         absl::ToDoubleSeconds(last_time - first_time);
}

std::optional<double> StepRate::EtaSeconds(std::int64_t step, std::int64_t total_steps) const {
  if (total_steps > 0 && step >= total_steps) return 0.0;
  const std::optional<double> rate = StepsPerSecond();
  if (!rate.has_value() || *rate <= 0 || total_steps <= 0) return std::nullopt;
  return static_cast<double>(total_steps - step) / *rate;
}

}  // namespace ts::server
