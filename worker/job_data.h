// What both kinds of job share: loading a spec's data source inside the data root, and turning
// an evaluation result into the API's report.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/data_root.h"
#include "model/data/dataset.h"
#include "model/training/training.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::worker {

// Reads (or generates, for listops) one data source; `field` prefixes errors ("data.train: ...").
// Once `stop` (may be null: never) is set, the read ends with ABORTED before its next record:
// a stop requested while a large data set loads need not wait for the whole load.
absl::StatusOr<Dataset> LoadSource(const DataRoot& root, const taylorshift::v1::DataSource& source,
                                   const std::vector<std::string>& labels, const std::string& field,
                                   const std::atomic<bool>* stop);

taylorshift::v1::EvaluationReport ToReport(const EvaluationResult& result,
                                           const std::vector<std::string>& labels,
                                           std::int64_t step);

}  // namespace ts::worker
