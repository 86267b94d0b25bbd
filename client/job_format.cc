#include "client/job_format.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/json_number.h"
#include "client/result_format.h"
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

// The enum's value name without its type prefix ("JOB_STATE_QUEUED" → "QUEUED").
std::string ShortName(const std::string& name, absl::string_view prefix) {
  return absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name;
}

// "AttentionPath" → "ATTENTION_PATH_".
std::string EnumValuePrefix(const pb::EnumDescriptor& type) {
  std::string prefix;
  for (const char c : type.name()) {
    if (absl::ascii_isupper(static_cast<unsigned char>(c)) && !prefix.empty()) prefix += '_';
    prefix += absl::ascii_toupper(static_cast<unsigned char>(c));
  }
  return prefix + "_";
}

bool HasTime(const pb::Timestamp& time) { return time.seconds() != 0 || time.nanos() != 0; }

std::string FormatTime(const pb::Timestamp& time) {
  const absl::Time t = absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos());
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", t, absl::UTCTimeZone());
}

void WriteTime(JsonWriter& json, const pb::Timestamp& time) {
  if (HasTime(time)) {
    json.String(FormatTime(time));
  } else {
    json.Null();
  }
}

// A number with `digits` significant digits, for people ("0.00099", "1.234").
std::string Significant(double value, int digits) { return absl::StrFormat("%.*g", digits, value); }

std::string Lower(const std::string& name) { return absl::AsciiStrToLower(name); }

void WriteReportJson(JsonWriter& json, const EvaluationReport& report) {
  json.BeginObject();
  json.Key("step").Int(static_cast<std::int64_t>(report.step()));
  json.Key("examples").Int(static_cast<std::int64_t>(report.examples()));
  WriteNumber(json.Key("loss"), report.loss());
  WriteNumber(json.Key("accuracy"), report.accuracy());
  WriteNumber(json.Key("macro_f1"), report.macro_f1());
  WriteNumber(json.Key("examples_per_second"), report.examples_per_second());
  json.Key("classes").BeginArray();
  for (const auto& entry : report.classes()) {
    json.BeginObject();
    json.Key("label").String(entry.label());
    WriteNumber(json.Key("precision"), entry.precision());
    WriteNumber(json.Key("recall"), entry.recall());
    WriteNumber(json.Key("f1"), entry.f1());
    json.Key("support").Int(static_cast<std::int64_t>(entry.support()));
    json.EndObject();
  }
  json.EndArray();
  json.Key("confusion").BeginArray();
  for (const auto& row : report.confusion()) {
    json.BeginArray();
    for (const std::uint64_t count : row.counts()) json.Int(static_cast<std::int64_t>(count));
    json.EndArray();
  }
  json.EndArray();
  json.EndObject();
}

void WriteCheckpointJson(JsonWriter& json, const CheckpointInfo& checkpoint) {
  json.BeginObject();
  json.Key("kind").String(checkpoint.kind());
  json.Key("step").Int(static_cast<std::int64_t>(checkpoint.step()));
  json.Key("path").String(checkpoint.path());
  json.Key("validation_accuracy");
  if (checkpoint.has_validation_accuracy()) {
    WriteNumber(json, checkpoint.validation_accuracy());
  } else {
    json.Null();
  }
  json.Key("time");
  WriteTime(json, checkpoint.time());
  json.EndObject();
}

bool IsTraining(const Job& job) {
  return job.kind() == taylorshift::v1::JOB_KIND_TRAINING || job.has_training();
}

// "40/300" (a training job's position), or "-" before it has one.
std::string StepText(const Job& job) {
  if (!IsTraining(job) || job.progress().total_steps() == 0) return "-";
  return absl::StrCat(job.progress().step(), "/", job.progress().total_steps());
}

void WriteScalar(JsonWriter& json, const pb::Message& message, const pb::FieldDescriptor& field,
                 int index) {
  const pb::Reflection& reflection = *message.GetReflection();
  const bool repeated = field.is_repeated();
  switch (field.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      json.Int(repeated ? reflection.GetRepeatedInt32(message, &field, index)
                        : reflection.GetInt32(message, &field));
      return;
    case pb::FieldDescriptor::CPPTYPE_INT64:
      json.Int(repeated ? reflection.GetRepeatedInt64(message, &field, index)
                        : reflection.GetInt64(message, &field));
      return;
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      json.Int(repeated ? reflection.GetRepeatedUInt32(message, &field, index)
                        : reflection.GetUInt32(message, &field));
      return;
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      const std::uint64_t value = repeated ? reflection.GetRepeatedUInt64(message, &field, index)
                                           : reflection.GetUInt64(message, &field);
      if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        json.Double(static_cast<double>(value));
      } else {
        json.Int(static_cast<std::int64_t>(value));
      }
      return;
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      WriteNumber(json, repeated ? reflection.GetRepeatedDouble(message, &field, index)
                                 : reflection.GetDouble(message, &field));
      return;
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      WriteFloat(json, repeated ? reflection.GetRepeatedFloat(message, &field, index)
                                : reflection.GetFloat(message, &field));
      return;
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      json.Bool(repeated ? reflection.GetRepeatedBool(message, &field, index)
                         : reflection.GetBool(message, &field));
      return;
    case pb::FieldDescriptor::CPPTYPE_STRING:
      json.String(repeated ? reflection.GetRepeatedString(message, &field, index)
                           : reflection.GetString(message, &field));
      return;
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      const int number = repeated ? reflection.GetRepeatedEnumValue(message, &field, index)
                                  : reflection.GetEnumValue(message, &field);
      const pb::EnumValueDescriptor* value = field.enum_type()->FindValueByNumber(number);
      if (value == nullptr) {
        json.Int(number);
      } else {
        json.String(Lower(ShortName(value->name(), EnumValuePrefix(*field.enum_type()))));
      }
      return;
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE: {
      const pb::Message& child = repeated ? reflection.GetRepeatedMessage(message, &field, index)
                                          : reflection.GetMessage(message, &field);
      if (child.GetDescriptor() == pb::Timestamp::descriptor()) {
        pb::Timestamp time;
        time.CopyFrom(child);
        WriteTime(json, time);
      } else {
        WriteMessageJson(json, child);
      }
      return;
    }
  }
  json.Null();
}

}  // namespace

std::string JobStateName(JobState state) {
  switch (state) {
    case taylorshift::v1::JOB_STATE_UNSPECIFIED:
      return "UNSPECIFIED";
    case taylorshift::v1::JOB_STATE_QUEUED:
      return "QUEUED";
    case taylorshift::v1::JOB_STATE_RUNNING:
      return "RUNNING";
    case taylorshift::v1::JOB_STATE_SUCCEEDED:
      return "SUCCEEDED";
    case taylorshift::v1::JOB_STATE_FAILED:
      return "FAILED";
    case taylorshift::v1::JOB_STATE_CANCELLED:
      return "CANCELLED";
    default:
      return absl::StrCat("STATE_", static_cast<int>(state));
  }
}

std::string JobKindName(JobKind kind) {
  switch (kind) {
    case taylorshift::v1::JOB_KIND_UNSPECIFIED:
      return "UNSPECIFIED";
    case taylorshift::v1::JOB_KIND_TRAINING:
      return "TRAINING";
    case taylorshift::v1::JOB_KIND_EVALUATION:
      return "EVALUATION";
    default:
      return absl::StrCat("KIND_", static_cast<int>(kind));
  }
}

absl::StatusOr<JobState> ParseJobState(absl::string_view name) {
  std::string upper = absl::AsciiStrToUpper(name);
  if (absl::StartsWith(upper, "JOB_STATE_")) upper = upper.substr(10);
  for (JobState state : {taylorshift::v1::JOB_STATE_QUEUED, taylorshift::v1::JOB_STATE_RUNNING,
                         taylorshift::v1::JOB_STATE_SUCCEEDED, taylorshift::v1::JOB_STATE_FAILED,
                         taylorshift::v1::JOB_STATE_CANCELLED}) {
    if (upper == JobStateName(state)) return state;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown state '", name, "': expected queued, running, succeeded, failed or cancelled"));
}

absl::StatusOr<JobKind> ParseJobKind(absl::string_view name) {
  std::string upper = absl::AsciiStrToUpper(name);
  if (absl::StartsWith(upper, "JOB_KIND_")) upper = upper.substr(9);
  for (JobKind kind : {taylorshift::v1::JOB_KIND_TRAINING, taylorshift::v1::JOB_KIND_EVALUATION}) {
    if (upper == JobKindName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kind '", name, "': expected training or evaluation"));
}

bool IsFinalState(JobState state) {
  return state == taylorshift::v1::JOB_STATE_SUCCEEDED ||
         state == taylorshift::v1::JOB_STATE_FAILED ||
         state == taylorshift::v1::JOB_STATE_CANCELLED;
}

const EvaluationReport* JobMetrics(const Job& job) {
  if (IsTraining(job)) {
    if (job.has_best_validation()) return &job.best_validation();
    if (job.has_validation()) return &job.validation();
    return nullptr;
  }
  return job.has_report() ? &job.report() : nullptr;
}

void WriteMessageJson(JsonWriter& json, const pb::Message& message) {
  std::vector<const pb::FieldDescriptor*> fields;
  message.GetReflection()->ListFields(message, &fields);
  json.BeginObject();
  for (const pb::FieldDescriptor* field : fields) {
    json.Key(field->name());
    if (field->is_repeated()) {
      json.BeginArray();
      const int size = message.GetReflection()->FieldSize(message, field);
      for (int i = 0; i < size; ++i) WriteScalar(json, message, *field, i);
      json.EndArray();
    } else {
      WriteScalar(json, message, *field, -1);
    }
  }
  json.EndObject();
}

std::string JobJson(const Job& job, const taylorshift::v1::GetJobHistoryResponse* history) {
  JsonWriter json;
  json.BeginObject();
  json.Key("id").String(job.id());
  json.Key("kind").String(JobKindName(job.kind()));
  json.Key("name").String(job.name());
  json.Key("state").String(JobStateName(job.state()));
  json.Key("reason").String(job.reason());
  const auto& progress = job.progress();
  json.Key("step").Int(static_cast<std::int64_t>(progress.step()));
  json.Key("total_steps").Int(static_cast<std::int64_t>(progress.total_steps()));
  WriteNumber(json.Key("epoch"), progress.epoch());
  json.Key("create_time");
  WriteTime(json, job.create_time());
  json.Key("start_time");
  WriteTime(json, job.start_time());
  json.Key("end_time");
  WriteTime(json, job.end_time());
  json.Key("labels").BeginArray();
  for (const std::string& label : job.labels()) json.String(label);
  json.EndArray();
  json.Key("progress").BeginObject();
  WriteNumber(json.Key("loss"), progress.loss());
  WriteNumber(json.Key("learning_rate"), progress.learning_rate());
  WriteNumber(json.Key("examples_per_second"), progress.examples_per_second());
  json.Key("train_examples").Int(static_cast<std::int64_t>(progress.train_examples()));
  json.Key("validation_examples").Int(static_cast<std::int64_t>(progress.validation_examples()));
  json.Key("skipped_examples").Int(static_cast<std::int64_t>(progress.skipped_examples()));
  json.Key("resumes").Int(progress.resumes());
  json.Key("retries").Int(progress.retries());
  json.Key("memory_estimate_bytes")
      .Int(static_cast<std::int64_t>(progress.memory_estimate_bytes()));
  json.EndObject();
  json.Key("metrics");
  if (const EvaluationReport* metrics = JobMetrics(job); metrics != nullptr) {
    WriteReportJson(json, *metrics);
  } else {
    json.Null();
  }
  if (IsTraining(job)) {
    json.Key("validation");
    if (job.has_validation()) {
      WriteReportJson(json, job.validation());
    } else {
      json.Null();
    }
  }
  json.Key("checkpoints").BeginArray();
  for (const CheckpointInfo& checkpoint : job.checkpoints()) WriteCheckpointJson(json, checkpoint);
  json.EndArray();
  json.Key("spec");
  if (job.has_training()) {
    WriteMessageJson(json, job.training());
  } else if (job.has_evaluation()) {
    WriteMessageJson(json, job.evaluation());
  } else {
    json.Null();
  }
  if (history != nullptr) {
    json.Key("history").BeginObject();
    json.Key("loss_curve").BeginArray();
    for (const taylorshift::v1::LossPoint& point : history->loss_curve()) {
      json.BeginObject();
      json.Key("step").Int(static_cast<std::int64_t>(point.step()));
      WriteNumber(json.Key("loss"), point.loss());
      WriteNumber(json.Key("learning_rate"), point.learning_rate());
      WriteNumber(json.Key("examples_per_second"), point.examples_per_second());
      json.Key("time");
      WriteTime(json, point.time());
      json.EndObject();
    }
    json.EndArray();
    json.Key("validations").BeginArray();
    for (const EvaluationReport& report : history->validations()) WriteReportJson(json, report);
    json.EndArray();
    json.EndObject();
  }
  json.EndObject();
  return json.str();
}

std::string JobEventJson(const JobEvent& event) {
  const Job& job = event.job();
  const auto& progress = job.progress();
  JsonWriter json;
  json.BeginObject();
  switch (event.type()) {
    case JobEvent::PROGRESS:
      json.Key("event").String("progress");
      break;
    case JobEvent::VALIDATION:
      json.Key("event").String("validation");
      break;
    case JobEvent::CHECKPOINT:
      json.Key("event").String("checkpoint");
      break;
    case JobEvent::STATE:
      json.Key("event").String("state");
      break;
    case JobEvent::SNAPSHOT:
      json.Key("event").String("snapshot");
      break;
    default:
      json.Key("event").String(absl::StrCat("type_", static_cast<int>(event.type())));
      break;
  }
  json.Key("id").String(job.id());
  json.Key("state").String(JobStateName(job.state()));
  switch (event.type()) {
    case JobEvent::PROGRESS:
      json.Key("step").Int(static_cast<std::int64_t>(progress.step()));
      json.Key("total_steps").Int(static_cast<std::int64_t>(progress.total_steps()));
      WriteNumber(json.Key("epoch"), progress.epoch());
      WriteNumber(json.Key("loss"), progress.loss());
      WriteNumber(json.Key("learning_rate"), progress.learning_rate());
      WriteNumber(json.Key("examples_per_second"), progress.examples_per_second());
      break;
    case JobEvent::VALIDATION:
      json.Key("step").Int(static_cast<std::int64_t>(job.validation().step()));
      json.Key("metrics");
      WriteReportJson(json, job.validation());
      break;
    case JobEvent::CHECKPOINT:
      json.Key("checkpoint");
      WriteCheckpointJson(json, event.checkpoint());
      break;
    default:
      json.Key("kind").String(JobKindName(job.kind()));
      json.Key("name").String(job.name());
      json.Key("reason").String(job.reason());
      json.Key("step").Int(static_cast<std::int64_t>(progress.step()));
      json.Key("total_steps").Int(static_cast<std::int64_t>(progress.total_steps()));
      break;
  }
  json.EndObject();
  return json.str();
}

std::string PromoteJson(const taylorshift::v1::PromoteCheckpointResponse& response) {
  JsonWriter json;
  json.BeginObject();
  json.Key("model");
  WriteModelJson(json, response.model());
  json.Key("previous_version").String(response.previous_version());
  WriteNumber(json.Key("validation_accuracy"), response.validation_accuracy());
  WriteNumber(json.Key("previous_validation_accuracy"), response.previous_validation_accuracy());
  json.EndObject();
  return json.str();
}

std::string ReportSummary(const EvaluationReport& report) {
  std::string out = absl::StrCat("acc ", Significant(report.accuracy(), 4), " f1 ",
                                 Significant(report.macro_f1(), 4), " loss ",
                                 Significant(report.loss(), 4), " (");
  if (report.step() > 0) absl::StrAppend(&out, "step ", report.step(), ", ");
  absl::StrAppend(&out, report.examples(), " examples)");
  return out;
}

std::string JobEventText(const JobEvent& event) {
  const Job& job = event.job();
  const auto& progress = job.progress();
  switch (event.type()) {
    case JobEvent::PROGRESS: {
      std::string out = absl::StrCat(
          "step ", progress.step(), "/", progress.total_steps(), " loss ",
          Significant(progress.loss(), 4), " lr ", Significant(progress.learning_rate(), 3), " ",
          absl::StrFormat("%.1f", progress.examples_per_second()), " ex/s");
      if (progress.epoch() > 0) absl::StrAppend(&out, " epoch ", Significant(progress.epoch(), 3));
      return out;
    }
    case JobEvent::VALIDATION:
      return absl::StrCat("val ", ReportSummary(job.validation()));
    case JobEvent::CHECKPOINT: {
      const CheckpointInfo& checkpoint = event.checkpoint();
      std::string out = absl::StrCat("checkpoint ", checkpoint.kind(), " step ", checkpoint.step());
      if (checkpoint.has_validation_accuracy()) {
        absl::StrAppend(&out, " val acc ", Significant(checkpoint.validation_accuracy(), 4));
      }
      return absl::StrCat(out, ": ", checkpoint.path());
    }
    case JobEvent::SNAPSHOT: {
      std::string out =
          absl::StrCat("job ", job.id(), " ", job.name(), " (", Lower(JobKindName(job.kind())),
                       "): ", JobStateName(job.state()));
      if (progress.total_steps() > 0) absl::StrAppend(&out, ", step ", StepText(job));
      if (!job.reason().empty()) absl::StrAppend(&out, ": ", job.reason());
      return out;
    }
    default: {
      std::string out = absl::StrCat("state ", JobStateName(job.state()));
      if (!job.reason().empty()) {
        absl::StrAppend(&out, ": ", job.reason());
      } else if (job.state() == taylorshift::v1::JOB_STATE_SUCCEEDED) {
        if (const EvaluationReport* metrics = JobMetrics(job); metrics != nullptr) {
          absl::StrAppend(&out, ": ", IsTraining(job) ? "best val " : "", ReportSummary(*metrics));
        }
      }
      return out;
    }
  }
}

std::string JobDetails(const Job& job) {
  std::string out;
  const auto line = [&](absl::string_view key, const std::string& value) {
    absl::StrAppend(&out, key, ": ", value, "\n");
  };
  const auto time = [](const pb::Timestamp& t) { return HasTime(t) ? FormatTime(t) : "-"; };
  const auto& progress = job.progress();
  line("id", job.id());
  line("name", job.name());
  line("kind", Lower(JobKindName(job.kind())));
  line("state", JobStateName(job.state()));
  if (!job.reason().empty()) line("reason", job.reason());
  line("created", time(job.create_time()));
  line("started", time(job.start_time()));
  line("ended", time(job.end_time()));
  if (IsTraining(job)) {
    line("step", absl::StrCat(StepText(job), " (epoch ", Significant(progress.epoch(), 3), ")"));
    line("loss", Significant(progress.loss(), 4));
    line("learning_rate", Significant(progress.learning_rate(), 3));
    line("examples_per_second", absl::StrFormat("%.1f", progress.examples_per_second()));
    line("train_examples", absl::StrCat(progress.train_examples()));
    line("validation_examples", absl::StrCat(progress.validation_examples()));
    if (progress.resumes() > 0) line("resumes", absl::StrCat(progress.resumes()));
    if (progress.memory_estimate_bytes() > 0) {
      line("memory_estimate",
           absl::StrFormat("%.2f GiB", static_cast<double>(progress.memory_estimate_bytes()) /
                                           static_cast<double>(1 << 30)));
    }
  }
  if (progress.retries() > 0) line("retries", absl::StrCat(progress.retries()));
  if (progress.skipped_examples() > 0) {
    line("skipped_examples", absl::StrCat(progress.skipped_examples()));
  }
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
    std::string text = absl::StrCat(checkpoint.kind(), " step ", checkpoint.step());
    if (checkpoint.has_validation_accuracy()) {
      absl::StrAppend(&text, " val acc ", Significant(checkpoint.validation_accuracy(), 4));
    }
    line("checkpoint", absl::StrCat(text, ": ", checkpoint.path()));
  }
  return out;
}

std::string JobTable(const std::vector<Job>& jobs) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "KIND", "NAME", "STATE", "STEP", "ACCURACY", "CREATED"}};
  for (const Job& job : jobs) {
    const EvaluationReport* metrics = JobMetrics(job);
    rows.push_back({job.id(), Lower(JobKindName(job.kind())), job.name(), JobStateName(job.state()),
                    StepText(job),
                    metrics != nullptr ? absl::StrFormat("%.4f", metrics->accuracy()) : "-",
                    HasTime(job.create_time()) ? FormatTime(job.create_time()) : "-"});
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

}  // namespace ts::client
