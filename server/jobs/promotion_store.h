// PromotionStore: the record of checkpoint promotions — which checkpoint each served model name
// was given, and when — in the StoreDatabase (store_database.h). Promotions outlive the jobs
// they came from (a promoted copy is not the job's).
//
// Contract: durability, atomicity (each call one transaction), errors and thread safety as
// JobStore's (job_store.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/jobs/store_database.h"

namespace ts::server {

// One promotion of a checkpoint to a served model version.
struct PromotionRecord {
  std::string model;       // served model name
  std::string version;     // the version it was served as
  std::string checkpoint;  // the promoted .tsckpt path
  std::string source;      // where it came from, e.g. "job:job-7" or the requested path
  std::optional<double> validation_accuracy;  // the candidate's, when recorded
  std::int64_t time_ms = 0;                   // Unix time
};

class PromotionStore {
 public:
  // `database` is not owned and must outlive the store.
  explicit PromotionStore(StoreDatabase* database) : database_(database) {}

  // `record.model` must not be empty (INVALID_ARGUMENT).
  absl::Status RecordPromotion(const PromotionRecord& record);
  // The latest promotion of each model name, sorted by model name.
  absl::StatusOr<std::vector<PromotionRecord>> CurrentPromotions() const;
  // Every promotion of `model`, oldest first (empty for a name never promoted).
  absl::StatusOr<std::vector<PromotionRecord>> PromotionHistory(const std::string& model) const;

 private:
  StoreDatabase* const database_;
};

}  // namespace ts::server
