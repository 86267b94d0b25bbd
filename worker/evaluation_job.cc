// An evaluation job: one pass of a checkpoint over a data set, reporting its position in examples
// as it goes. It has no step boundaries to stop at; a SIGTERM ends the process at once
// (tsworker_main.cc).
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "api/proto_convert.h"
#include "common/status_macros.h"
#include "model/checkpoints/checkpoint.h"
#include "model/torch_status.h"
#include "worker/job_data.h"
#include "worker/jobs.h"

namespace ts::worker {
namespace pb = taylorshift::v1;

namespace {
// The least time between two progress reports of an evaluation (but its first and last).
constexpr absl::Duration kProgressInterval = absl::Seconds(1);
}  // namespace

absl::Status RunEvaluationJob(const JobContext& context) {
  const pb::WorkerTask& task = *context.task;
  const pb::EvaluationSpec& spec = task.job().evaluation();
  TS_ASSIGN_OR_RETURN(const DataRoot root, DataRoot::Create(task.data_root()));
  TS_ASSIGN_OR_RETURN(const torch::Device device, CatchTorch("device", [&spec] {
                        return torch::Device(spec.device().empty() ? "cpu" : spec.device());
                      }));
  TS_ASSIGN_OR_RETURN(auto loaded, LoadCheckpoint(task.checkpoint_path(), device));
  TS_ASSIGN_OR_RETURN(const Dataset data,
                      LoadSource(root, spec.data(), loaded.metadata.labels, "data", context.stop));
  TS_ASSIGN_OR_RETURN(const AttentionPath attention, FromProtoPath(spec.path()));

  pb::WorkerMessage started;
  for (const auto& label : loaded.metadata.labels) started.mutable_started()->add_labels(label);
  started.mutable_started()->set_validation_examples(data.examples.size());
  started.mutable_started()->set_skipped_examples(static_cast<std::uint64_t>(data.skipped));
  started.mutable_started()->set_world_size(1);
  context.emit(started);

  // The position after the first batch, then at most once per kProgressInterval, and after the
  // last batch: the server's count and ETA (TrainingProgress.evaluated_examples, eta_seconds).
  const auto total = static_cast<std::int64_t>(data.examples.size());
  std::optional<absl::Time> last_report;
  const auto on_batch = [&](std::int64_t evaluated) {
    const absl::Time now = context.clock->Now();
    if (last_report.has_value() && evaluated < total && now - *last_report < kProgressInterval) {
      return;
    }
    last_report = now;
    pb::WorkerMessage progress;
    progress.mutable_evaluation_progress()->set_examples(static_cast<std::uint64_t>(evaluated));
    progress.mutable_evaluation_progress()->set_total_examples(static_cast<std::uint64_t>(total));
    progress.mutable_evaluation_progress()->set_time_ms(absl::ToUnixMillis(now));
    context.emit(std::move(progress));
  };
  TS_ASSIGN_OR_RETURN(const EvaluationResult result,
                      EvaluateClassifier(loaded.model, loaded.options, data.examples,
                                         spec.batch_size(), attention, on_batch));
  pb::WorkerMessage report;
  *report.mutable_report() = ToReport(result, loaded.metadata.labels, 0);
  context.emit(report);
  return absl::OkStatus();
}

}  // namespace ts::worker
