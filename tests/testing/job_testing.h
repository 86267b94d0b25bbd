// Helpers of the job manager's unit tests (tests/server/job_*_test.cc): a JobContext and the real
// job stores (job_stores.h) in a scratch directory, a fake clock (the store's too), registry-only
// metrics and the log lines kept; and reading one sample of the metrics' text exposition.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "server/jobs/job_context.h"
#include "server/metrics.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/job_stores.h"

namespace ts::testing {

class JobTestContext {
 public:
  JobTestContext() {
    std::string pattern = ::testing::TempDir() + "/ts_job_test_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    dir_ = pattern;
    auto stores = JobStores::Open(dir_ + "/jobs.db", &clock_);
    EXPECT_TRUE(stores.ok()) << stores.status();
    stores_ = std::move(*stores);
    auto metrics = ts::server::Metrics::Create("");
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = std::move(*metrics);
    context_ = std::make_unique<ts::server::JobContext>(metrics_.get(), &clock_,
                                                        [this](const std::string& line) {
                                                          absl::MutexLock lock(&mu_);
                                                          log_.push_back(line);
                                                        });
  }

  const std::string& dir() const { return dir_; }
  ts::server::JobStore& jobs() { return stores_->jobs; }
  ts::server::JobHistoryStore& history() { return stores_->history; }
  ts::server::PromotionStore& promotions() { return stores_->promotions; }
  ts::server::Metrics& metrics() { return *metrics_; }
  FakeClock& clock() { return clock_; }
  ts::server::JobContext* context() { return context_.get(); }

  std::vector<std::string> log() const {
    absl::MutexLock lock(&mu_);
    return log_;
  }
  bool Logged(const std::string& part) const {
    for (const auto& line : log()) {
      if (absl::StrContains(line, part)) return true;
    }
    return false;
  }

  // The value of the sample `series` (name and labels as exposed, e.g.
  // `taylorshift_job_store_errors_total{operation="append_metric"}`), 0 when absent.
  double Sample(const std::string& series) const {
    for (absl::string_view line : absl::StrSplit(metrics_->Serialize(), '\n')) {
      if (!absl::StartsWith(line, series + " ")) continue;
      double value = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
    }
    return 0;
  }
  double StoreErrors(const std::string& operation) const {
    return Sample("taylorshift_job_store_errors_total{operation=\"" + operation + "\"}");
  }

 private:
  std::string dir_;
  FakeClock clock_;
  std::unique_ptr<JobStores> stores_;
  std::unique_ptr<ts::server::Metrics> metrics_;
  mutable absl::Mutex mu_;
  std::vector<std::string> log_;
  std::unique_ptr<ts::server::JobContext> context_;
};

}  // namespace ts::testing
