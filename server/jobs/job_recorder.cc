#include "server/jobs/job_recorder.h"

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/jobs/job_checkpoints.h"

namespace ts::server {
namespace pb = taylorshift::v1;

namespace {

// The ETA of a progress report: set when the rate is known, cleared while it is not.
void SetEta(const std::optional<double>& eta, pb::TrainingProgress* progress) {
  if (eta.has_value()) {
    progress->set_eta_seconds(*eta);
  } else {
    progress->clear_eta_seconds();
  }
}

}  // namespace

void JobRecorder::Apply(ActiveJob& active, const pb::WorkerMessage& message) {
  const std::string& id = active.id;
  switch (message.kind_case()) {
    case pb::WorkerMessage::kStarted: {
      const pb::WorkerStarted& started = message.started();
      std::uint64_t reached_step = 0;  // by the attempts before this one
      queue_->Update(active, [&](pb::Job& job) {
        reached_step = job.progress().step();
        if (started.has_spec()) *job.mutable_training() = started.spec();
        *job.mutable_labels() = started.labels();
        auto* progress = job.mutable_progress();
        progress->set_total_steps(started.total_steps());
        progress->set_train_examples(started.train_examples());
        progress->set_validation_examples(started.validation_examples());
        progress->set_skipped_examples(started.skipped_examples());
        progress->set_step(started.resumed_step());
        progress->set_evaluated_examples(0);
        progress->clear_eta_seconds();  // the rate starts again
      });
      active.step_rate.Reset();
      if (context_->metrics != nullptr) {
        context_->metrics->SetJobTotalSteps(id, static_cast<std::int64_t>(started.total_steps()),
                                            static_cast<std::int64_t>(started.resumed_step()));
      }
      if (started.resumed_step() > 0) {
        context_->Log(absl::StrCat("job ", id, " resumes at step ", started.resumed_step()));
      } else if (reached_step > 0) {
        context_->Log(absl::StrCat("job ", id, " starts again at step 0 (no saved state; it had ",
                                   "reached step ", reached_step, ")"));
      }
      // The steps after the saved state (all of them when there is none: a worker killed before
      // its first checkpoint) are trained again: their first records go, and the history keeps
      // each step once, as the run that the job's model continues from logged it.
      if (started.resumed_step() > 0 || reached_step > 0) {
        const auto step = static_cast<std::int64_t>(started.resumed_step());
        context_->StoreWriteOk(history_->TruncateHistory(id, step), "truncate_history", id,
                               absl::StrCat("the removal of its history after step ", step));
      }
      queue_->Publish(active, pb::JobEvent::PROGRESS);
      return;
    }
    case pb::WorkerMessage::kProgress: {
      const pb::WorkerProgress& p = message.progress();
      // The worker's time of the report (a fake worker may leave it out: then now).
      active.step_rate.Add(
          static_cast<std::int64_t>(p.step()),
          p.time_ms() > 0 ? absl::FromUnixMillis(p.time_ms()) : context_->clock->Now());
      std::int64_t total_steps = 0;
      std::optional<double> eta;
      queue_->Update(active, [&](pb::Job& job) {
        auto* progress = job.mutable_progress();
        total_steps = static_cast<std::int64_t>(progress->total_steps());
        progress->set_step(p.step());
        progress->set_loss(p.loss());
        progress->set_learning_rate(p.learning_rate());
        progress->set_examples_per_second(p.examples_per_second());
        progress->set_epoch(p.epoch());
        eta = active.step_rate.EtaSeconds(static_cast<std::int64_t>(p.step()), total_steps);
        SetEta(eta, progress);
      });
      JobMetricRow row;
      row.step = static_cast<std::int64_t>(p.step());
      row.loss = p.loss();
      row.learning_rate = p.learning_rate();
      row.examples_per_second = p.examples_per_second();
      row.time_ms = p.time_ms();
      context_->StoreWriteOk(history_->AppendMetric(id, row), "append_metric", id,
                             absl::StrCat("the loss of step ", row.step));
      if (context_->metrics != nullptr) {
        JobProgressSample sample;
        sample.step = row.step;
        sample.total_steps = total_steps;
        sample.loss = p.loss();
        sample.examples_per_second = p.examples_per_second();
        sample.eta_seconds = eta.value_or(-1);
        context_->metrics->SetJobProgress(id, sample);
      }
      queue_->Publish(active, pb::JobEvent::PROGRESS);
      return;
    }
    case pb::WorkerMessage::kEvaluationProgress: {
      const pb::WorkerEvaluationProgress& p = message.evaluation_progress();
      const auto evaluated = static_cast<std::int64_t>(p.examples());
      active.step_rate.Add(
          evaluated, p.time_ms() > 0 ? absl::FromUnixMillis(p.time_ms()) : context_->clock->Now());
      queue_->Update(active, [&](pb::Job& job) {
        auto* progress = job.mutable_progress();
        progress->set_evaluated_examples(p.examples());
        if (p.total_examples() > 0) progress->set_validation_examples(p.total_examples());
        SetEta(active.step_rate.EtaSeconds(
                   evaluated, static_cast<std::int64_t>(progress->validation_examples())),
               progress);
      });
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
      queue_->Update(active, [&](pb::Job& job) {
        *job.mutable_report() = message.report();
        job.mutable_progress()->set_evaluated_examples(message.report().examples());
        job.mutable_progress()->set_eta_seconds(0);
      });
      // The report is the job's result: one the store refused fails the attempt (JobRunner),
      // instead of a success with nothing in its history.
      if (const absl::Status written = history_->AppendEvaluation(id, message.report());
          !context_->StoreWriteOk(written, "append_evaluation", id, "its evaluation report")) {
        active.unrecorded_result = absl::Status(
            written.code(), absl::StrCat("its evaluation report could not be written to the job "
                                         "store: ",
                                         written.message()));
      }
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
