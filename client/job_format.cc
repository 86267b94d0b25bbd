#include "client/job_format.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/api_json.h"
#include "api/proto_names.h"
#include "client/result_format.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/timestamp.pb.h"

namespace ts::client {
namespace {

namespace pb = google::protobuf;

using taylorshift::v1::CheckpointInfo;
using taylorshift::v1::EvaluationReport;
using taylorshift::v1::Job;
using taylorshift::v1::JobEvent;
using taylorshift::v1::JobKind;
using taylorshift::v1::JobState;

// RFC 3339 in UTC as in the JSON, or "-" when unset.
std::string TimeText(const pb::Timestamp& time) {
  const Json text = MessageJson(time);
  return text.is_null() ? "-" : text.get<std::string>();
}

// A number with `digits` significant digits, for people ("0.00099", "1.234").
std::string Significant(double value, int digits) { return absl::StrFormat("%.*g", digits, value); }

std::string Lower(const std::string& name) { return absl::AsciiStrToLower(name); }

Json ReportJson(const EvaluationReport& report) {
  Json classes = Json::array();
  for (const auto& entry : report.classes()) classes.push_back(MessageJson(entry, true));
  Json confusion = Json::array();
  for (const auto& row : report.confusion()) {
    confusion.push_back(std::vector<std::uint64_t>(row.counts().begin(), row.counts().end()));
  }
  return Json{{"step", report.step()},
              {"examples", report.examples()},
              {"loss", JsonNumber(report.loss())},
              {"accuracy", JsonNumber(report.accuracy())},
              {"macro_f1", JsonNumber(report.macro_f1())},
              {"examples_per_second", JsonNumber(report.examples_per_second())},
              {"classes", std::move(classes)},
              {"confusion", std::move(confusion)}};
}

// validation_accuracy is null when the checkpoint has none (has_validation_accuracy).
Json CheckpointJson(const CheckpointInfo& checkpoint) {
  Json object = MessageJson(checkpoint, true);
  object.erase("has_validation_accuracy");
  if (!checkpoint.has_validation_accuracy()) object["validation_accuracy"] = nullptr;
  return object;
}

// "best step 40 val acc 0.62: <path>" (no accuracy when none was recorded).
std::string CheckpointText(const CheckpointInfo& checkpoint) {
  std::string out = absl::StrCat(checkpoint.kind(), " step ", checkpoint.step());
  if (checkpoint.has_validation_accuracy()) {
    absl::StrAppend(&out, " val acc ", Significant(checkpoint.validation_accuracy(), 4));
  }
  return absl::StrCat(out, ": ", checkpoint.path());
}

bool IsTraining(const Job& job) {
  return job.kind() == taylorshift::v1::JOB_KIND_TRAINING || job.has_training();
}

// Evaluation jobs have examples and a report instead of steps, loss and a learning rate. A job
// of no known kind is shown as training, as before kinds were told apart.
bool IsEvaluation(const Job& job) {
  return job.kind() == taylorshift::v1::JOB_KIND_EVALUATION || job.has_evaluation();
}

// "40/300" (a training job's position), or "-" before it has one.
std::string StepText(const Job& job) {
  if (!IsTraining(job) || job.progress().total_steps() == 0) return "-";
  return absl::StrCat(job.progress().step(), "/", job.progress().total_steps());
}

// An evaluation's examples evaluated so far: its report's count once it has one, else the
// worker's last progress report.
std::uint64_t EvaluatedExamples(const Job& job) {
  return job.has_report() ? job.report().examples() : job.progress().evaluated_examples();
}

// An evaluation's position: "128/512 examples" once it has evaluated some (the report's count
// once it is in), "512 examples" (the data set's size) before.
std::string ExamplesText(const Job& job) {
  const std::uint64_t total = job.progress().validation_examples();
  if (!job.has_report() && job.progress().evaluated_examples() == 0) {
    return absl::StrCat(total, " examples");
  }
  return absl::StrCat(EvaluatedExamples(job), total > 0 ? absl::StrCat("/", total) : "",
                      " examples");
}

// A running job's ETA in seconds (the server's, from its recent rate); nullopt when it has none.
std::optional<double> RunningEta(const Job& job) {
  if (job.state() != taylorshift::v1::JOB_STATE_RUNNING || !job.progress().has_eta_seconds()) {
    return std::nullopt;
  }
  return job.progress().eta_seconds();
}

// ", eta 0:07" while a running job has an ETA, else "".
std::string EtaText(const Job& job) {
  const std::optional<double> eta = RunningEta(job);
  return eta.has_value() ? absl::StrCat(", eta ", FormatDuration(*eta)) : "";
}

// The ETA for JSON: seconds while a running job has one, else null.
Json EtaJson(const Job& job) {
  const std::optional<double> eta = RunningEta(job);
  return eta.has_value() ? JsonNumber(*eta) : Json(nullptr);
}

// The report a job is judged by: a training job's best validation (else its latest), an
// evaluation job's report; nullptr when there is none yet.
const EvaluationReport* JobMetrics(const Job& job) {
  if (IsTraining(job)) {
    if (job.has_best_validation()) return &job.best_validation();
    if (job.has_validation()) return &job.validation();
    return nullptr;
  }
  return job.has_report() ? &job.report() : nullptr;
}

// "acc 0.62 f1 0.58 loss 0.9 (step 40, 512 examples)"; the step only when non-zero.
std::string ReportSummary(const EvaluationReport& report) {
  std::string out = absl::StrCat("acc ", Significant(report.accuracy(), 4), " f1 ",
                                 Significant(report.macro_f1(), 4), " loss ",
                                 Significant(report.loss(), 4), " (");
  if (report.step() > 0) absl::StrAppend(&out, "step ", report.step(), ", ");
  absl::StrAppend(&out, report.examples(), " examples)");
  return out;
}

}  // namespace

std::string JobStateName(JobState state) {
  const std::string name = EnumValueName(*taylorshift::v1::JobState_descriptor(), state);
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

std::string JobKindName(JobKind kind) {
  const std::string name = EnumValueName(*taylorshift::v1::JobKind_descriptor(), kind);
  return name.empty() ? absl::StrCat("KIND_", static_cast<int>(kind)) : name;
}

absl::StatusOr<JobState> ParseJobState(absl::string_view name) {
  TS_ASSIGN_OR_RETURN(const int state,
                      ParseEnumValueName(*taylorshift::v1::JobState_descriptor(), name, "state"));
  return static_cast<JobState>(state);
}

absl::StatusOr<JobKind> ParseJobKind(absl::string_view name) {
  TS_ASSIGN_OR_RETURN(const int kind,
                      ParseEnumValueName(*taylorshift::v1::JobKind_descriptor(), name, "kind"));
  return static_cast<JobKind>(kind);
}

bool IsFinalState(JobState state) {
  return state == taylorshift::v1::JOB_STATE_SUCCEEDED ||
         state == taylorshift::v1::JOB_STATE_FAILED ||
         state == taylorshift::v1::JOB_STATE_CANCELLED;
}

std::string JobJson(const Job& job, const taylorshift::v1::GetJobHistoryResponse* history) {
  const auto& progress = job.progress();
  Json object = {
      {"id", job.id()},
      {"kind", JobKindName(job.kind())},
      {"name", job.name()},
      {"state", JobStateName(job.state())},
      {"reason", job.reason()},
      {"step", progress.step()},
      {"total_steps", progress.total_steps()},
      {"epoch", JsonNumber(progress.epoch())},
      {"create_time", MessageJson(job.create_time())},
      {"start_time", MessageJson(job.start_time())},
      {"end_time", MessageJson(job.end_time())},
      {"labels", std::vector<std::string>(job.labels().begin(), job.labels().end())},
      // null: stored before submitters were recorded (no owner).
      {"submitted_by", job.submitted_by().empty() ? Json(nullptr) : Json(job.submitted_by())},
      {"progress", MessageJson(progress, true)}};
  // The position fields are the job's own, above.
  for (const char* key : {"step", "total_steps", "epoch"}) object["progress"].erase(key);
  if (IsTraining(job)) object["progress"].erase("evaluated_examples");  // an evaluation's count
  // Seconds while a running job has an ETA; null (not 0) while unknown or once it ended.
  object["progress"]["eta_seconds"] = EtaJson(job);
  const EvaluationReport* metrics = JobMetrics(job);
  object["metrics"] = metrics != nullptr ? ReportJson(*metrics) : Json(nullptr);
  if (IsTraining(job)) {
    object["validation"] = job.has_validation() ? ReportJson(job.validation()) : Json(nullptr);
  }
  Json& checkpoints = object["checkpoints"] = Json::array();
  for (const CheckpointInfo& checkpoint : job.checkpoints()) {
    checkpoints.push_back(CheckpointJson(checkpoint));
  }
  object["spec"] = job.has_training()     ? MessageJson(job.training())
                   : job.has_evaluation() ? MessageJson(job.evaluation())
                                          : Json(nullptr);
  if (history != nullptr) {
    Json loss_curve = Json::array();
    for (const taylorshift::v1::LossPoint& point : history->loss_curve()) {
      loss_curve.push_back(MessageJson(point, true));
    }
    Json validations = Json::array();
    for (const EvaluationReport& report : history->validations()) {
      validations.push_back(ReportJson(report));
    }
    object["history"] = {{"loss_curve", std::move(loss_curve)},
                         {"validations", std::move(validations)}};
  }
  return DumpJson(object);
}

std::string JobEventJson(const JobEvent& event) {
  const Job& job = event.job();
  const auto& progress = job.progress();
  Json object = Json::object();
  const std::string type = EnumValueName(*JobEvent::Type_descriptor(), event.type());
  object["event"] = type.empty() || event.type() == JobEvent::TYPE_UNSPECIFIED
                        ? absl::StrCat("type_", static_cast<int>(event.type()))
                        : absl::AsciiStrToLower(type);
  object["id"] = job.id();
  object["state"] = JobStateName(job.state());
  switch (event.type()) {
    case JobEvent::PROGRESS:
      if (IsEvaluation(job)) {
        // An evaluation has no steps, loss or learning rate: its examples instead.
        object["examples"] = EvaluatedExamples(job);
        object["total_examples"] = progress.validation_examples();
        object["examples_per_second"] =
            job.has_report() ? JsonNumber(job.report().examples_per_second()) : Json(nullptr);
        object["eta_seconds"] = EtaJson(job);
        break;
      }
      object["step"] = progress.step();
      object["total_steps"] = progress.total_steps();
      object["epoch"] = JsonNumber(progress.epoch());
      object["loss"] = JsonNumber(progress.loss());
      object["learning_rate"] = JsonNumber(progress.learning_rate());
      object["examples_per_second"] = JsonNumber(progress.examples_per_second());
      object["eta_seconds"] = EtaJson(job);
      break;
    case JobEvent::VALIDATION:
      object["step"] = job.validation().step();
      object["metrics"] = ReportJson(job.validation());
      break;
    case JobEvent::CHECKPOINT:
      object["checkpoint"] = CheckpointJson(event.checkpoint());
      break;
    default:
      object["kind"] = JobKindName(job.kind());
      object["name"] = job.name();
      object["reason"] = job.reason();
      object["step"] = progress.step();
      object["total_steps"] = progress.total_steps();
      break;
  }
  return DumpJson(object);
}

std::string DeleteJson(const taylorshift::v1::DeleteJobResponse& response) {
  Json object = MessageJson(response, true);
  object["state"] = JobStateName(response.state());
  return DumpJson(object);
}

std::string PromoteJson(const taylorshift::v1::PromoteCheckpointResponse& response) {
  Json object = MessageJson(response, true);
  object["model"] = ModelInfoJson(response.model());
  return DumpJson(object);
}

std::string JobEventText(const JobEvent& event) {
  const Job& job = event.job();
  const auto& progress = job.progress();
  switch (event.type()) {
    case JobEvent::PROGRESS: {
      if (IsEvaluation(job)) {
        if (!job.has_report()) return absl::StrCat("evaluating ", ExamplesText(job), EtaText(job));
        return absl::StrCat("evaluated ", ExamplesText(job), " ",
                            absl::StrFormat("%.1f", job.report().examples_per_second()), " ex/s");
      }
      // A job that has started but whose worker has not reported a step yet (building the model,
      // reading the data) has no loss or rate to show.
      if (progress.step() == 0 && progress.examples_per_second() == 0) {
        return progress.total_steps() > 0
                   ? absl::StrCat("step 0/", progress.total_steps(), ", waiting for the first step")
                   : "started, waiting for the first step";
      }
      std::string out = absl::StrCat(
          "step ", progress.step(), "/", progress.total_steps(), " loss ",
          Significant(progress.loss(), 4), " lr ", Significant(progress.learning_rate(), 3), " ",
          absl::StrFormat("%.1f", progress.examples_per_second()), " ex/s");
      if (progress.epoch() > 0) absl::StrAppend(&out, " epoch ", Significant(progress.epoch(), 3));
      return out;
    }
    case JobEvent::VALIDATION:
      return absl::StrCat("val ", ReportSummary(job.validation()));
    case JobEvent::CHECKPOINT:
      return absl::StrCat("checkpoint ", CheckpointText(event.checkpoint()));
    case JobEvent::SNAPSHOT: {
      std::string out =
          absl::StrCat("job ", job.id(), " ", job.name(), " (", Lower(JobKindName(job.kind())),
                       "): ", JobStateName(job.state()));
      if (progress.total_steps() > 0) absl::StrAppend(&out, ", step ", StepText(job));
      if (IsEvaluation(job) && (job.has_report() || progress.validation_examples() > 0)) {
        absl::StrAppend(&out, ", ", ExamplesText(job));
      }
      if (!job.reason().empty()) absl::StrAppend(&out, ": ", job.reason());
      return out;
    }
    default: {
      std::string out = absl::StrCat("state ", JobStateName(job.state()));
      if (!job.reason().empty()) {
        absl::StrAppend(&out, ": ", job.reason());
      } else if (job.state() == taylorshift::v1::JOB_STATE_SUCCEEDED) {
        if (const EvaluationReport* metrics = JobMetrics(job); metrics != nullptr) {
          if (IsEvaluation(job)) {
            absl::StrAppend(&out, ": evaluated ", ExamplesText(job), " ",
                            absl::StrFormat("%.1f", metrics->examples_per_second()), " ex/s; ",
                            ReportSummary(*metrics));
          } else {
            absl::StrAppend(&out, ": ", IsTraining(job) ? "best val " : "",
                            ReportSummary(*metrics));
          }
        }
      }
      return out;
    }
  }
}

Progress WatchProgress(const Job& job) {
  Progress out;
  const auto& progress = job.progress();
  std::vector<std::string> details;
  if (job.state() != taylorshift::v1::JOB_STATE_RUNNING)
    details.push_back(JobStateName(job.state()));
  if (IsEvaluation(job)) {
    // Examples evaluated of the total, and the ETA from their rate, as steps for training.
    if (progress.validation_examples() > 0) {
      out.unit = "examples";
      out.done = static_cast<double>(EvaluatedExamples(job));
      out.total = static_cast<double>(progress.validation_examples());
    } else {
      details.push_back(
          absl::StrCat(job.has_report() ? "evaluated " : "evaluating ", ExamplesText(job)));
    }
  } else if (progress.total_steps() > 0) {
    out.unit = "steps";
    out.done = static_cast<double>(progress.step());
    out.total = static_cast<double>(progress.total_steps());
    if (progress.step() > 0)
      details.push_back(absl::StrCat("loss ", Significant(progress.loss(), 4)));
  }
  out.detail = absl::StrJoin(details, ", ");
  return out;
}

std::string JobDetails(const Job& job) {
  std::string out;
  const auto line = [&](absl::string_view key, const absl::AlphaNum& value) {
    absl::StrAppend(&out, key, ": ", value, "\n");
  };
  const auto& progress = job.progress();
  line("id", job.id());
  line("name", job.name());
  line("kind", Lower(JobKindName(job.kind())));
  line("state", JobStateName(job.state()));
  if (!job.reason().empty()) line("reason", job.reason());
  line("submitted_by", job.submitted_by().empty() ? "-" : job.submitted_by());
  line("created", TimeText(job.create_time()));
  line("started", TimeText(job.start_time()));
  line("ended", TimeText(job.end_time()));
  if (IsTraining(job)) {
    line("step", absl::StrCat(StepText(job), " (epoch ", Significant(progress.epoch(), 3), ")"));
    line("loss", Significant(progress.loss(), 4));
    line("learning_rate", Significant(progress.learning_rate(), 3));
    line("examples_per_second", absl::StrFormat("%.1f", progress.examples_per_second()));
    line("train_examples", progress.train_examples());
    line("validation_examples", progress.validation_examples());
    if (progress.resumes() > 0) line("resumes", progress.resumes());
    if (progress.memory_estimate_bytes() > 0) {
      line("memory_estimate",
           absl::StrFormat("%.2f GiB", static_cast<double>(progress.memory_estimate_bytes()) /
                                           static_cast<double>(1 << 30)));
    }
  }
  if (IsEvaluation(job)) {
    line("examples", job.has_report() ? ExamplesText(job)
                     : progress.evaluated_examples() > 0
                         ? absl::StrCat(ExamplesText(job), " evaluated")
                         : absl::StrCat(ExamplesText(job), " to evaluate"));
    if (job.has_report()) {
      line("examples_per_second", absl::StrFormat("%.1f", job.report().examples_per_second()));
    }
  }
  if (const std::optional<double> eta = RunningEta(job); eta.has_value()) {
    line("eta", FormatDuration(*eta));
  }
  if (progress.retries() > 0) line("retries", progress.retries());
  if (progress.skipped_examples() > 0) line("skipped_examples", progress.skipped_examples());
  if (!job.labels().empty()) line("labels", absl::StrJoin(job.labels(), ", "));
  if (IsTraining(job) && job.has_validation()) line("validation", ReportSummary(job.validation()));
  const EvaluationReport* metrics = JobMetrics(job);
  if (metrics != nullptr) {
    line(IsTraining(job) ? "best_validation" : "report", ReportSummary(*metrics));
    int width = 5;
    for (const auto& entry : metrics->classes()) {
      width = std::max(width, static_cast<int>(entry.label().size()));
    }
    absl::StrAppendFormat(&out, "  %-*s  %9s  %6s  %6s  %7s\n", width, "class", "precision",
                          "recall", "f1", "support");
    for (const auto& entry : metrics->classes()) {
      absl::StrAppendFormat(&out, "  %-*s  %9.4f  %6.4f  %6.4f  %7d\n", width, entry.label(),
                            entry.precision(), entry.recall(), entry.f1(), entry.support());
    }
    if (!metrics->confusion().empty()) {
      const auto label_of = [&](int i) {
        return i < metrics->classes_size() ? metrics->classes(i).label() : absl::StrCat(i);
      };
      const int column = std::max(7, width);
      absl::StrAppend(&out, "  confusion (rows: label, columns: prediction)\n");
      absl::StrAppendFormat(&out, "  %-*s", width, "");
      for (int i = 0; i < metrics->confusion_size(); ++i) {
        absl::StrAppendFormat(&out, "  %*s", column, label_of(i));
      }
      out += "\n";
      for (int i = 0; i < metrics->confusion_size(); ++i) {
        absl::StrAppendFormat(&out, "  %-*s", width, label_of(i));
        for (const std::uint64_t count : metrics->confusion(i).counts()) {
          absl::StrAppendFormat(&out, "  %*d", column, count);
        }
        out += "\n";
      }
    }
  }
  for (const CheckpointInfo& checkpoint : job.checkpoints()) {
    line("checkpoint", CheckpointText(checkpoint));
  }
  return out;
}

std::string JobTable(const std::vector<Job>& jobs) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "KIND", "NAME", "STATE", "STEP", "ACCURACY", "CREATED", "SUBMITTED BY"}};
  for (const Job& job : jobs) {
    const EvaluationReport* metrics = JobMetrics(job);
    rows.push_back(
        {job.id(), Lower(JobKindName(job.kind())), job.name(), JobStateName(job.state()),
         StepText(job), metrics != nullptr ? absl::StrFormat("%.4f", metrics->accuracy()) : "-",
         TimeText(job.create_time()), job.submitted_by().empty() ? "-" : job.submitted_by()});
  }
  return FormatTable(rows);
}

std::string PromoteText(const taylorshift::v1::PromoteCheckpointResponse& response) {
  std::string out =
      absl::StrCat("promoted ", response.model().name(), " version ", response.model().version());
  if (!response.previous_version().empty()) {
    absl::StrAppend(&out, " (previous ", response.previous_version(), ")");
  }
  if (response.validation_accuracy() > 0 || response.previous_validation_accuracy() > 0) {
    absl::StrAppend(&out, "; validation accuracy ", Significant(response.validation_accuracy(), 4));
    if (!response.previous_version().empty()) {
      absl::StrAppend(&out, " (previous ", Significant(response.previous_validation_accuracy(), 4),
                      ")");
    }
  }
  return out;
}

std::string RollbackText(const taylorshift::v1::PromoteCheckpointResponse& response) {
  return absl::StrCat("rolled back ", response.model().name(), " to version ",
                      response.model().version(), " (was ", response.previous_version(), ")");
}

std::string PromotionHistoryTable(const taylorshift::v1::ListPromotionsResponse& response) {
  std::vector<std::vector<std::string>> rows = {
      {"TIME", "KIND", "VERSION", "SOURCE", "ACCURACY", "BY"}};
  for (const auto& entry : response.entries()) {
    rows.push_back({TimeText(entry.time()),
                    entry.forced() ? absl::StrCat(entry.kind(), " (forced)") : entry.kind(),
                    entry.version(), entry.source(),
                    entry.has_validation_accuracy()
                        ? absl::StrFormat("%.4f", entry.validation_accuracy())
                        : "-",
                    entry.actor().empty() ? "-" : entry.actor()});
  }
  return FormatTable(rows);
}

std::string PromotionEntryJson(const taylorshift::v1::PromotionEntry& entry) {
  return DumpJson(MessageJson(entry, true));
}

}  // namespace ts::client
