// Reading samples out of the Prometheus text a /metrics endpoint serves, for tests that observe
// a server the way a scraper does.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "tests/testing/server_process.h"

namespace ts::testing {

// The value of the first sample whose line starts with `series` (the name and the leading
// labels, e.g. `taylorshift_queue_depth{model="slow"`); nullopt when there is none.
inline std::optional<double> MetricSample(const std::string& metrics, const std::string& series) {
  std::size_t at = 0;
  while ((at = metrics.find(series, at)) != std::string::npos) {
    if (at == 0 || metrics[at - 1] == '\n') {
      const std::size_t labels_end = metrics.find('}', at);
      if (labels_end == std::string::npos) return std::nullopt;
      return std::stod(metrics.substr(labels_end + 1));
    }
    at += series.size();
  }
  return std::nullopt;
}

// Polls http://address/metrics until `series` reads `value`; false after `timeout`. For what
// only the network decides (calls reaching the server), not for time a fake clock can move.
inline bool WaitForMetric(const std::string& address, const std::string& series, double value,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (MetricSample(HttpGet(address, "/metrics"), series) == value) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace ts::testing
