#include "server/jobs/job_context.h"

#include <google/protobuf/util/time_util.h>

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "api/proto_names.h"

namespace ts::server {
namespace pb = taylorshift::v1;

std::string JobKindName(pb::JobKind kind) {
  return kind == pb::JOB_KIND_EVALUATION ? "evaluation" : "training";
}

std::string JobStateName(pb::JobState state) {
  const std::string name = EnumValueName(*pb::JobState_descriptor(), state);
  return name.empty() ? "unspecified" : absl::AsciiStrToLower(name);
}

bool IsFinalJobState(pb::JobState state) {
  return state == pb::JOB_STATE_SUCCEEDED || state == pb::JOB_STATE_FAILED ||
         state == pb::JOB_STATE_CANCELLED;
}

void SetTimestamp(absl::Time time, google::protobuf::Timestamp* out) {
  *out = google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(time));
}

void JobContext::Log(const std::string& line) const {
  if (log) log(line);
}

bool JobContext::StoreWriteOk(const absl::Status& status, absl::string_view operation,
                              absl::string_view job_id, absl::string_view what) const {
  if (status.ok()) return true;
  Log(absl::StrCat("job ", job_id, ": cannot write ", what, " to the job store (", operation,
                   "): ", status.message()));
  if (metrics != nullptr) metrics->RecordJobStoreError(std::string(operation));
  return false;
}

}  // namespace ts::server
