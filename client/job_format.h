// How tsctl prints jobs (taylorshift/v1/jobs.proto): enum names, one compact JSON object per
// job or event (--json), and text lines for people. Stateless and thread-safe.
//
// Job JSON (train/eval without --wait, jobs get/cancel/list, the last line of --wait/watch):
//   {"id":"j-1","kind":"TRAINING","name":"filetype","state":"SUCCEEDED","reason":"",
//    "step":300,"total_steps":300,"epoch":4.8,
//    "create_time":"2024-05-01T12:00:00Z","start_time":"…","end_time":"…",
//    "labels":["neg","pos"],
//    "progress":{"loss":0.41,"learning_rate":0.0001,"examples_per_second":812.5,
//                "train_examples":1000,"validation_examples":100,"skipped_examples":0,
//                "resumes":0},
//    "metrics":{"step":300,"examples":100,"loss":0.52,"accuracy":0.81,"macro_f1":0.8,
//               "examples_per_second":2100,
//               "classes":[{"label":"neg","precision":0.8,"recall":0.84,"f1":0.82,
//                           "support":50},…],
//               "confusion":[[42,8],[11,39]]},
//    "validation":{…},
//    "checkpoints":[{"kind":"best","step":300,"path":"…","validation_accuracy":0.81,
//                    "time":"…"}],
//    "spec":{…the spec's set fields, proto field names…}}
// `metrics` is the best validation report of a training job (null before the first one) or
// the report of an evaluation job (null until it succeeds); `validation` is a training job's
// latest report. Times are RFC 3339 in UTC, null when not reached; a checkpoint without a
// recorded accuracy has "validation_accuracy":null. Enum names are upper case without their
// prefix ("TRAINING", "SUCCEEDED"); the spec's `path` is lower case as in the YAML ("auto").
//
// Event JSON (--wait/watch with --json, one per event):
//   {"event":"progress","id":"j-1","state":"RUNNING","step":40,"total_steps":300,"epoch":0.64,
//    "loss":1.234,"learning_rate":0.00099,"examples_per_second":12.3}
//   an evaluation job's (it has no steps, loss or learning rate; the counts are known once its
//   report is in): {"event":"progress","id":"j-2","state":"RUNNING","examples":null,
//    "total_examples":512,"examples_per_second":null}
//   {"event":"validation","id":…,"state":…,"step":40,"metrics":{…as above…}}
//   {"event":"checkpoint","id":…,"state":…,"checkpoint":{…as above…}}
//   {"event":"state"|"snapshot","id":…,"state":"FAILED","reason":"…","kind":…,"name":…,
//    "step":…,"total_steps":…}
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "api/api_json.h"
#include "client/progress_line.h"
#include "common/json_output.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::client {

// "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED" ("UNSPECIFIED", "STATE_<n>").
std::string JobStateName(taylorshift::v1::JobState state);
// "TRAINING", "EVALUATION" ("UNSPECIFIED", "KIND_<n>").
std::string JobKindName(taylorshift::v1::JobKind kind);
// queued|running|succeeded|failed|cancelled, any case, or the full enum name; INVALID_ARGUMENT
// otherwise.
absl::StatusOr<taylorshift::v1::JobState> ParseJobState(absl::string_view name);
// training|evaluation, any case, or the full enum name.
absl::StatusOr<taylorshift::v1::JobKind> ParseJobKind(absl::string_view name);
// SUCCEEDED, FAILED or CANCELLED: the job will not change any more.
bool IsFinalState(taylorshift::v1::JobState state);

// With `history` (tsctl jobs get --curve --json), the object ends in
//   "history":{"loss_curve":[{"step":10,"loss":1.09,"learning_rate":0.0003,
//                             "examples_per_second":812.5,"time":"…"},…],
//              "validations":[{…a report as in "metrics"…},…]}
std::string JobJson(const taylorshift::v1::Job& job,
                    const taylorshift::v1::GetJobHistoryResponse* history = nullptr);
std::string JobEventJson(const taylorshift::v1::JobEvent& event);
std::string PromoteJson(const taylorshift::v1::PromoteCheckpointResponse& response);
// tsctl jobs delete --json: {"id":"j-1","state":"CANCELLED","files_removed":3,"bytes_freed":1024};
// the state in upper case, as in every other JSON tsctl prints.
std::string DeleteJson(const taylorshift::v1::DeleteJobResponse& response);

// One line per event, without a newline:
//   snapshot    job j-1 filetype (training): RUNNING, step 40/300
//   state       state RUNNING | state FAILED: <reason> | state SUCCEEDED: best val acc …
//               (evaluation) state SUCCEEDED: evaluated 512/512 examples 2100.0 ex/s; acc …
//   progress    step 40/300 loss 1.234 lr 0.00099 12.3 ex/s epoch 0.64
//               (evaluation) evaluating 512 examples | evaluated 512/512 examples 2100.0 ex/s
//   validation  val acc 0.62 f1 0.58 loss 0.9 (step 40, 512 examples)
//   checkpoint  checkpoint best step 40 val acc 0.62: <path>
std::string JobEventText(const taylorshift::v1::JobEvent& event);
// What the progress display of --wait / watch shows for the job as last heard of: a training
// job's steps (of total_steps) and loss; an evaluation's examples as a detail, since the
// server reports no partial count while it runs; the state when it is not RUNNING.
Progress WatchProgress(const taylorshift::v1::Job& job);
// "key: value" lines for one job, with the per-class table and the confusion matrix of its
// metrics.
std::string JobDetails(const taylorshift::v1::Job& job);
// A table with a header row and one row per job, ending in a newline.
std::string JobTable(const std::vector<taylorshift::v1::Job>& jobs);
// "promoted imdb version v4 (previous v3); validation accuracy 0.91 (previous 0.89)".
std::string PromoteText(const taylorshift::v1::PromoteCheckpointResponse& response);
// promote --rollback's line: "rolled back NAME to version V (was W)".
std::string RollbackText(const taylorshift::v1::PromoteCheckpointResponse& response);
// models --history: one row per promotion or rollback, oldest first (TIME, KIND, VERSION, SOURCE,
// ACCURACY, BY; a forced promotion's kind reads "promote (forced)"); JSON: one object a line.
std::string PromotionHistoryTable(const taylorshift::v1::ListPromotionsResponse& response);
std::string PromotionEntryJson(const taylorshift::v1::PromotionEntry& entry);

}  // namespace ts::client
