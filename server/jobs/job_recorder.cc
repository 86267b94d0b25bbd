#include "server/jobs/job_recorder.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/jobs/job_checkpoints.h"

namespace ts::server {
namespace pb = taylorshift::v1;

void JobRecorder::Apply(ActiveJob& active, const pb::WorkerMessage& message) {
  const std::string& id = active.id;
  switch (message.kind_case()) {
    case pb::WorkerMessage::kStarted: {
      const pb::WorkerStarted& started = message.started();
      queue_->Update(active, [&](pb::Job& job) {
        if (started.has_spec()) *job.mutable_training() = started.spec();
        *job.mutable_labels() = started.labels();
        auto* progress = job.mutable_progress();
        progress->set_total_steps(started.total_steps());
        progress->set_train_examples(started.train_examples());
        progress->set_validation_examples(started.validation_examples());
        progress->set_skipped_examples(started.skipped_examples());
        if (started.resumed_step() > 0) progress->set_step(started.resumed_step());
      });
      active.step_rate.Reset();
      if (context_->metrics != nullptr) {
        context_->metrics->SetJobTotalSteps(id, static_cast<std::int64_t>(started.total_steps()),
                                            static_cast<std::int64_t>(started.resumed_step()));
      }
      if (started.resumed_step() > 0) {
        context_->Log(absl::StrCat("job ", id, " resumes at step ", started.resumed_step()));
        // The steps after the saved state are trained again: their first records go.
        const auto step = static_cast<std::int64_t>(started.resumed_step());
        context_->StoreWriteOk(history_->TruncateHistory(id, step), "truncate_history", id,
                               absl::StrCat("the removal of its history after step ", step));
      }
      queue_->Publish(active, pb::JobEvent::PROGRESS);
      return;
    }
    case pb::WorkerMessage::kProgress: {
      const pb::WorkerProgress& p = message.progress();
      std::int64_t total_steps = 0;
      queue_->Update(active, [&](pb::Job& job) {
        auto* progress = job.mutable_progress();
        total_steps = static_cast<std::int64_t>(progress->total_steps());
        progress->set_step(p.step());
        progress->set_loss(p.loss());
        progress->set_learning_rate(p.learning_rate());
        progress->set_examples_per_second(p.examples_per_second());
        progress->set_epoch(p.epoch());
      });
      JobMetricRow row;
      row.step = static_cast<std::int64_t>(p.step());
      row.loss = p.loss();
      row.learning_rate = p.learning_rate();
      row.examples_per_second = p.examples_per_second();
      row.time_ms = p.time_ms();
      context_->StoreWriteOk(history_->AppendMetric(id, row), "append_metric", id,
                             absl::StrCat("the loss of step ", row.step));
      // The worker's time of the report (a fake worker may leave it out: then now).
      active.step_rate.Add(
          row.step, p.time_ms() > 0 ? absl::FromUnixMillis(p.time_ms()) : context_->clock->Now());
      if (context_->metrics != nullptr) {
        JobProgressSample sample;
        sample.step = row.step;
        sample.total_steps = total_steps;
        sample.loss = p.loss();
        sample.examples_per_second = p.examples_per_second();
        sample.eta_seconds = active.step_rate.EtaSeconds(row.step, total_steps).value_or(-1);
        context_->metrics->SetJobProgress(id, sample);
      }
      queue_->Publish(active, pb::JobEvent::PROGRESS);
      return;
    }
    case pb::WorkerMessage::kValidation: {
      const pb::EvaluationReport& report = message.validation();
      context_->StoreWriteOk(history_->AppendEvaluation(id, report), "append_evaluation", id,
                             absl::StrCat("the validation run of step ", report.step()));
      queue_->Update(active, [&](pb::Job& job) {
        *job.mutable_validation() = report;
        if (!job.has_best_validation() || report.accuracy() > job.best_validation().accuracy()) {
          *job.mutable_best_validation() = report;
        }
      });
      if (context_->metrics != nullptr) {
        context_->metrics->SetJobValidationAccuracy(id, report.accuracy());
      }
      queue_->Publish(active, pb::JobEvent::VALIDATION);
      return;
    }
    case pb::WorkerMessage::kCheckpoint: {
      const pb::WorkerCheckpoint& checkpoint = message.checkpoint();
      RecordCheckpoint(history_, *context_, id, checkpoint);
      queue_->Update(active,
                     [&](pb::Job& job) { KeepCheckpoints(checkpoint, job.mutable_checkpoints()); });
      queue_->Publish(active, pb::JobEvent::CHECKPOINT, &checkpoint.checkpoint());
      return;
    }
    case pb::WorkerMessage::kReport: {
      queue_->Update(active, [&](pb::Job& job) { *job.mutable_report() = message.report(); });
      context_->StoreWriteOk(history_->AppendEvaluation(id, message.report()), "append_evaluation",
                             id, "its evaluation report");
      return;
    }
    case pb::WorkerMessage::kLog:
      context_->Log(absl::StrCat("job ", id, ": ", message.log()));
      return;
    default:
      return;
  }
}

}  // namespace ts::server
