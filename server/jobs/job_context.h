// JobContext: what the parts of the job manager share — the metrics, the clock and the log — and
// the one place where a failed write to a job store is reported (logged with the job id
// and what was being written, and counted in taylorshift_job_store_errors_total{operation}), so
// that no store error is dropped unseen. Also the names of job kinds and states as the logs and
// metrics spell them.
//
// The JobManager owns one and hands it to its parts by pointer; it must outlive them. Thread-safe
// (the metrics are; `log` must be). Each part takes the store it writes (job_store.h,
// job_history_store.h, promotion_store.h) on its own.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/data_root.h"
#include "server/metrics.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

// "training", "evaluation".
std::string JobKindName(taylorshift::v1::JobKind kind);
// "queued", "running", "succeeded", "failed", "cancelled" ("unspecified" otherwise).
std::string JobStateName(taylorshift::v1::JobState state);
// SUCCEEDED, FAILED or CANCELLED.
bool IsFinalJobState(taylorshift::v1::JobState state);
void SetTimestamp(absl::Time time, google::protobuf::Timestamp* out);

struct JobContext {
  JobContext(Metrics* metrics, Clock* clock, std::function<void(const std::string& line)> log)
      : metrics(metrics), clock(clock), log(std::move(log)) {}

  Metrics* const metrics;  // may be null
  Clock* const clock;      // required: the only source of time of the job code
  const std::function<void(const std::string& line)> log;  // may be empty

  // Held while a promotion copies a job's checkpoint or a deletion removes a job's files, so
  // that neither removes what the other reads.
  absl::Mutex files_mu;

  void Log(const std::string& line) const;

  // The server's directories as a client may see them (common/data_root.h): set once by the job
  // manager before any job runs, read-only after.
  std::vector<ServerDir> client_dirs;
  // `message` with the data root's and the state directory's paths written relative to them: what
  // job reasons and Jobs RPC errors quote.
  std::string ForClient(absl::string_view message) const {
    return WithoutServerDirs(std::string_view(message.data(), message.size()), client_dirs);
  }
  absl::Status ForClient(const absl::Status& status) const {
    if (status.ok() || client_dirs.empty()) return status;
    return absl::Status(status.code(), ForClient(status.message()));
  }

  // True when `status` is OK. Otherwise logs "job <job_id>: cannot write <what> to the job store
  // (<operation>): <message>", counts taylorshift_job_store_errors_total{operation}, and returns
  // false; a caller that must fail passes `status` on.
  bool StoreWriteOk(const absl::Status& status, absl::string_view operation,
                    absl::string_view job_id, absl::string_view what) const;
};

}  // namespace ts::server
