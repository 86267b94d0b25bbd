// An evaluation job: one pass of a checkpoint over a data set. It has no step boundaries to
// stop at; a SIGTERM ends the process at once (tsworker_main.cc).
#include "absl/strings/str_cat.h"
#include "api/proto_convert.h"
#include "common/status_macros.h"
#include "model/checkpoints/checkpoint.h"
#include "model/torch_status.h"
#include "worker/job_data.h"
#include "worker/jobs.h"

namespace ts::worker {
namespace pb = taylorshift::v1;

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

  TS_ASSIGN_OR_RETURN(const EvaluationResult result,
                      EvaluateClassifier(loaded.model, loaded.options, data.examples,
                                         spec.batch_size(), attention));
  pb::WorkerMessage report;
  *report.mutable_report() = ToReport(result, loaded.metadata.labels, 0);
  context.emit(report);
  return absl::OkStatus();
}

}  // namespace ts::worker
