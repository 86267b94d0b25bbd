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

// One promotion of a checkpoint to a served model version, or one rollback to an earlier one.
struct PromotionRecord {
  std::string model;    // served model name
  std::string version;  // the version it was served as
  // The promoted .tsckpt path; for a rollback, the file of the version it serves again, empty
  // for the configuration's own checkpoint.
  std::string checkpoint;
  std::string source;  // where it came from, e.g. "job:job-7:best" or "checkpoint:<path>"
  std::optional<double> validation_accuracy;  // the candidate's, when recorded
  std::int64_t time_ms = 0;                   // Unix time
  std::string job_id;                         // the source job, when it was one
  // Who asked (Authorizer::Identity: "token:<fingerprint>", "cert:<subject>", "anonymous");
  // empty in records written before it was kept.
  std::string actor;
  std::string kind = "promote";  // "promote" or "rollback"
  bool forced = false;           // the task guard was overridden (force)
};

class PromotionStore {
 public:
  // `database` is not owned and must outlive the store.
  explicit PromotionStore(StoreDatabase* database) : database_(database) {}

  // `record.model` must not be empty (INVALID_ARGUMENT).
  absl::Status RecordPromotion(const PromotionRecord& record);
  // The latest record (promotion or rollback) of each model name, sorted by model name.
  absl::StatusOr<std::vector<PromotionRecord>> CurrentPromotions() const;
  // Every record of `model`, oldest first (empty for a name never promoted).
  absl::StatusOr<std::vector<PromotionRecord>> PromotionHistory(const std::string& model) const;

 private:
  StoreDatabase* const database_;
};

}  // namespace ts::server
