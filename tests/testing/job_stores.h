// The job stores over one database file, as the JobManager holds them (server/jobs/
// store_database.h), for the store tests, the job manager's unit tests and the fuzz targets.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/jobs/job_history_store.h"
#include "server/jobs/job_store.h"
#include "server/jobs/promotion_store.h"
#include "server/jobs/store_database.h"

namespace ts::testing {

struct JobStores {
  // Opens the database at `path`; `clock` (not owned) stamps the jobs' writes.
  static absl::StatusOr<std::unique_ptr<JobStores>> Open(const std::string& path,
                                                         Clock* clock = RealClock()) {
    absl::StatusOr<std::unique_ptr<server::StoreDatabase>> database =
        server::StoreDatabase::Open(path);
    if (!database.ok()) return database.status();
    return std::make_unique<JobStores>(*std::move(database), clock);
  }

  JobStores(std::unique_ptr<server::StoreDatabase> opened, Clock* clock)
      : database(std::move(opened)),
        jobs(database.get(), clock),
        history(database.get()),
        promotions(database.get()) {}

  const std::unique_ptr<server::StoreDatabase> database;
  server::JobStore jobs;
  server::JobHistoryStore history;
  server::PromotionStore promotions;
};

}  // namespace ts::testing
