#include "client/job_format.h"

#include <google/protobuf/text_format.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ts::client {
namespace {

using taylorshift::v1::EvaluationReport;
using taylorshift::v1::Job;
using taylorshift::v1::JobEvent;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

template <typename Message>
Message FromText(const std::string& text) {
  Message message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message)) << text;
  return message;
}

// A finished training job with two validation reports and two checkpoints.
Job TrainingJob() {
  return FromText<Job>(R"pb(
    id: "j-7"
    kind: JOB_KIND_TRAINING
    name: "filetype"
    state: JOB_STATE_SUCCEEDED
    training {
      name: "filetype"
      model { embed_dim: 64 depth: 2 heads: 8 mlp_ratio: 2 max_length: 2048 }
      data {
        train { format: "jsonl" path: "train.jsonl" }
        validation { split: 0.1 }
      }
      optimizer { name: "adamw" lr: 0.001 weight_decay: 0 }
      batch_size: 16
      steps: 300
      seed: 1
      path: ATTENTION_PATH_EFFICIENT
      labels: [ "neg", "pos" ]
    }
    create_time { seconds: 1714564800 }
    start_time { seconds: 1714564801 nanos: 500000000 }
    end_time { seconds: 1714564900 }
    progress {
      step: 300
      total_steps: 300
      epoch: 4.8
      loss: 0.41
      learning_rate: 0.0001
      examples_per_second: 812.5
      train_examples: 1000
      validation_examples: 100
    }
    validation { step: 300 examples: 100 loss: 0.6 accuracy: 0.79 macro_f1: 0.78 }
    best_validation {
      step: 200
      examples: 100
      loss: 0.52
      accuracy: 0.81
      macro_f1: 0.8
      examples_per_second: 2100
      classes { label: "neg" precision: 0.8 recall: 0.84 f1: 0.82 support: 50 }
      classes { label: "pos" precision: 0.83 recall: 0.78 f1: 0.8 support: 50 }
      confusion { counts: [ 42, 8 ] }
      confusion { counts: [ 11, 39 ] }
    }
    checkpoints {
      kind: "best"
      step: 200
      path: "state/jobs/j-7/step-200.tsckpt"
      validation_accuracy: 0.81
      has_validation_accuracy: true
      time { seconds: 1714564880 }
    }
    checkpoints { kind: "last" step: 300 path: "state/jobs/j-7/step-300.tsckpt" }
    labels: [ "neg", "pos" ]
  )pb");
}

TEST(JobFormatTest, EnumNames) {
  EXPECT_EQ(JobStateName(taylorshift::v1::JOB_STATE_SUCCEEDED), "SUCCEEDED");
  EXPECT_EQ(JobStateName(taylorshift::v1::JOB_STATE_CANCELLED), "CANCELLED");
  EXPECT_EQ(JobStateName(static_cast<taylorshift::v1::JobState>(42)), "STATE_42");
  EXPECT_EQ(JobKindName(taylorshift::v1::JOB_KIND_EVALUATION), "EVALUATION");
  for (const auto& [name, expected] :
       std::vector<std::pair<std::string, taylorshift::v1::JobState>>{
           {"queued", taylorshift::v1::JOB_STATE_QUEUED},
           {"RUNNING", taylorshift::v1::JOB_STATE_RUNNING},
           {"Succeeded", taylorshift::v1::JOB_STATE_SUCCEEDED},
           {"failed", taylorshift::v1::JOB_STATE_FAILED},
           {"job_state_cancelled", taylorshift::v1::JOB_STATE_CANCELLED}}) {
    absl::StatusOr<taylorshift::v1::JobState> state = ParseJobState(name);
    ASSERT_TRUE(state.ok()) << name;
    EXPECT_EQ(*state, expected) << name;
  }
  EXPECT_EQ(*ParseJobKind("Training"), taylorshift::v1::JOB_KIND_TRAINING);
  EXPECT_EQ(*ParseJobKind("JOB_KIND_EVALUATION"), taylorshift::v1::JOB_KIND_EVALUATION);
  EXPECT_EQ(ParseJobState("done").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJobState("unspecified").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJobKind("inference").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsFinalState(taylorshift::v1::JOB_STATE_FAILED));
  EXPECT_FALSE(IsFinalState(taylorshift::v1::JOB_STATE_RUNNING));
}

TEST(JobFormatTest, TrainingJobJson) {
  EXPECT_EQ(
      JobJson(TrainingJob()),
      R"({"id":"j-7","kind":"TRAINING","name":"filetype","state":"SUCCEEDED","reason":"",)"
      R"("step":300,"total_steps":300,"epoch":4.8,"create_time":"2024-05-01T12:00:00Z",)"
      R"("start_time":"2024-05-01T12:00:01.5Z","end_time":"2024-05-01T12:01:40Z",)"
      R"("labels":["neg","pos"],"submitted_by":null,)"
      R"("progress":{"loss":0.41,"learning_rate":0.0001,"examples_per_second":812.5,)"
      R"("train_examples":1000,"validation_examples":100,"skipped_examples":0,"resumes":0,)"
      R"("retries":0,"memory_estimate_bytes":0,"eta_seconds":null},)"
      R"("metrics":{"step":200,"examples":100,"loss":0.52,"accuracy":0.81,"macro_f1":0.8,)"
      R"("examples_per_second":2100,)"
      R"("classes":[{"label":"neg","precision":0.8,"recall":0.84,"f1":0.82,"support":50},)"
      R"({"label":"pos","precision":0.83,"recall":0.78,"f1":0.8,"support":50}],)"
      R"("confusion":[[42,8],[11,39]]},)"
      R"("validation":{"step":300,"examples":100,"loss":0.6,"accuracy":0.79,"macro_f1":0.78,)"
      R"("examples_per_second":0,"classes":[],"confusion":[]},)"
      R"("checkpoints":[{"kind":"best","step":200,"path":"state/jobs/j-7/step-200.tsckpt",)"
      R"("validation_accuracy":0.81,"time":"2024-05-01T12:01:20Z"},)"
      R"({"kind":"last","step":300,"path":"state/jobs/j-7/step-300.tsckpt",)"
      R"("validation_accuracy":null,"time":null}],)"
      R"("spec":{"name":"filetype","model":{"embed_dim":64,"depth":2,"heads":8,"mlp_ratio":2,)"
      R"("max_length":2048},"data":{"train":{"format":"jsonl","path":"train.jsonl"},)"
      R"("validation":{"split":0.1}},"optimizer":{"name":"adamw","lr":0.001,"weight_decay":0},)"
      R"("batch_size":16,"steps":300,"seed":1,"path":"efficient","labels":["neg","pos"]}})");
}

TEST(JobFormatTest, MetricsFallBackToTheLatestValidationThenNull) {
  Job job = TrainingJob();
  job.clear_best_validation();
  EXPECT_THAT(JobJson(job), HasSubstr(R"("metrics":{"step":300,"examples":100,"loss":0.6,)"));
  job.clear_validation();
  EXPECT_THAT(JobJson(job), HasSubstr(R"("metrics":null,"validation":null,)"));
}

TEST(JobFormatTest, EvaluationJobJsonHasTheReport) {
  const Job job = FromText<Job>(R"pb(
    id: "j-8"
    kind: JOB_KIND_EVALUATION
    name: "eval"
    state: JOB_STATE_FAILED
    reason: "data.path: not found"
    evaluation {
      name: "eval"
      model: "imdb"
      data { format: "jsonl" path: "t.jsonl" }
    }
    report { examples: 10 accuracy: 0.5 }
  )pb");
  const std::string json = JobJson(job);
  EXPECT_THAT(json, StartsWith(R"({"id":"j-8","kind":"EVALUATION","name":"eval","state":"FAILED",)"
                               R"("reason":"data.path: not found","step":0,"total_steps":0,)"));
  EXPECT_THAT(json, HasSubstr(R"("create_time":null,)"));
  EXPECT_THAT(json, HasSubstr(R"("metrics":{"step":0,"examples":10,"loss":0,"accuracy":0.5,)"));
  EXPECT_THAT(json, Not(HasSubstr(R"("validation":)")));
  EXPECT_THAT(json, HasSubstr(R"("spec":{"name":"eval","model":"imdb",)"
                              R"("data":{"format":"jsonl","path":"t.jsonl"}}})"));
}

TEST(JobFormatTest, ProgressLine) {
  JobEvent event = FromText<JobEvent>(R"pb(
    type: PROGRESS
    job {
      state: JOB_STATE_RUNNING
      progress {
        step: 40
        total_steps: 300
        loss: 1.23412
        learning_rate: 0.00099
        examples_per_second: 12.34
      }
    }
  )pb");
  EXPECT_EQ(JobEventText(event), "step 40/300 loss 1.234 lr 0.00099 12.3 ex/s");
  event.mutable_job()->mutable_progress()->set_epoch(0.64);
  EXPECT_EQ(JobEventText(event), "step 40/300 loss 1.234 lr 0.00099 12.3 ex/s epoch 0.64");
  {
    // Before the worker's first report there is no loss, rate or step count to show (it printed
    // "step 0/0 loss 0 lr 0 0.0 ex/s").
    JobEvent early = event;
    early.mutable_job()->mutable_progress()->Clear();
    EXPECT_EQ(JobEventText(early), "started, waiting for the first step");
    early.mutable_job()->mutable_progress()->set_total_steps(500);
    EXPECT_EQ(JobEventText(early), "step 0/500, waiting for the first step");
  }
  EXPECT_EQ(JobEventJson(event),
            R"({"event":"progress","id":"","state":"RUNNING","step":40,"total_steps":300,)"
            R"("epoch":0.64,"loss":1.23412,"learning_rate":0.00099,"examples_per_second":12.34,)"
            R"("eta_seconds":null})");
}

TEST(JobFormatTest, AnEvaluationShowsItsExamplesNotSteps) {
  // What the server publishes when an evaluation starts: the data set's size, no steps.
  JobEvent event = FromText<JobEvent>(R"pb(
    type: PROGRESS
    job {
      id: "j-2"
      kind: JOB_KIND_EVALUATION
      name: "e"
      state: JOB_STATE_RUNNING
      progress { validation_examples: 512 }
    }
  )pb");
  EXPECT_EQ(JobEventText(event), "evaluating 512 examples");
  EXPECT_EQ(JobEventJson(event),
            R"({"event":"progress","id":"j-2","state":"RUNNING","examples":0,)"
            R"("total_examples":512,"examples_per_second":null,"eta_seconds":null})");
  event.set_type(JobEvent::SNAPSHOT);
  EXPECT_EQ(JobEventText(event), "job j-2 e (evaluation): RUNNING, 512 examples");
  const std::string running = JobDetails(event.job());
  EXPECT_THAT(running, HasSubstr("examples: 512 examples to evaluate\n"));
  EXPECT_THAT(running, Not(HasSubstr("step")));

  Job* job = event.mutable_job();
  job->set_state(taylorshift::v1::JOB_STATE_SUCCEEDED);
  *job->mutable_report() = FromText<EvaluationReport>(
      R"pb(examples: 512 loss: 0.52 accuracy: 0.81 macro_f1: 0.8 examples_per_second: 2100)pb");
  event.set_type(JobEvent::STATE);
  EXPECT_EQ(JobEventText(event),
            "state SUCCEEDED: evaluated 512/512 examples 2100.0 ex/s; acc 0.81 f1 0.8 loss 0.52 "
            "(512 examples)");
  event.set_type(JobEvent::PROGRESS);
  EXPECT_EQ(JobEventText(event), "evaluated 512/512 examples 2100.0 ex/s");
  EXPECT_THAT(JobEventJson(event), HasSubstr(R"("examples":512,"total_examples":512,)"
                                             R"("examples_per_second":2100,"eta_seconds":null})"));
  for (const std::string& text : {JobEventText(event), JobDetails(*job)}) {
    EXPECT_THAT(text, Not(HasSubstr("loss 0 lr 0"))) << text;
    EXPECT_THAT(text, Not(HasSubstr("0/0"))) << text;
  }
  const std::string done = JobDetails(*job);
  EXPECT_THAT(done, HasSubstr("examples: 512/512 examples\nexamples_per_second: 2100.0\n"));
  EXPECT_THAT(done, HasSubstr("report: acc 0.81 f1 0.8 loss 0.52 (512 examples)\n"));
}

TEST(JobFormatTest, WatchProgressCountsStepsOrNamesTheExamples) {
  Job job = FromText<Job>(R"pb(
    kind: JOB_KIND_TRAINING
    state: JOB_STATE_RUNNING
    progress { step: 40 total_steps: 300 loss: 1.23412 }
  )pb");
  Progress progress = WatchProgress(job);
  EXPECT_EQ(progress.unit, "steps");
  EXPECT_EQ(progress.done, 40);
  EXPECT_EQ(progress.total, 300);
  EXPECT_EQ(progress.detail, "loss 1.234");
  job.set_state(taylorshift::v1::JOB_STATE_QUEUED);
  job.mutable_progress()->set_step(0);
  EXPECT_EQ(WatchProgress(job).detail, "QUEUED");

  job = FromText<Job>(R"pb(
    kind: JOB_KIND_EVALUATION
    state: JOB_STATE_RUNNING
    progress { validation_examples: 512 }
  )pb");
  progress = WatchProgress(job);
  // Issue 45: an evaluation counts its examples as training counts steps (the line's rate and
  // ETA follow from the count).
  EXPECT_EQ(progress.unit, "examples");
  EXPECT_EQ(progress.done, 0);
  EXPECT_EQ(progress.total, 512);
  EXPECT_EQ(progress.detail, "");
  job.mutable_progress()->set_evaluated_examples(128);
  EXPECT_EQ(WatchProgress(job).done, 128);
  std::ostringstream shown;
  ProgressLine line(ProgressLineOptions(), &shown);
  line.Update(0, WatchProgress(job));
  job.mutable_progress()->set_evaluated_examples(256);
  EXPECT_EQ(line.Text(2, WatchProgress(job)),
            "256/512 examples (50%), 64.0 examples/s, elapsed 0:02, eta 0:04");
  // Before the worker has counted its data set: no total, the size unknown.
  job.mutable_progress()->Clear();
  progress = WatchProgress(job);
  EXPECT_EQ(progress.unit, "");
  EXPECT_EQ(progress.detail, "evaluating 0 examples");
}

// Issue 45: a running evaluation shows the examples evaluated of its total and the server's ETA
// in every view (event line, --json, jobs get); a training job's ETA too; none once it ended.
TEST(JobFormatTest, ARunningEvaluationShowsItsCountAndEta) {
  JobEvent event = FromText<JobEvent>(R"pb(
    type: PROGRESS
    job {
      id: "j-2"
      kind: JOB_KIND_EVALUATION
      name: "e"
      state: JOB_STATE_RUNNING
      progress { validation_examples: 512 evaluated_examples: 128 eta_seconds: 7.4 }
    }
  )pb");
  EXPECT_EQ(JobEventText(event), "evaluating 128/512 examples, eta 0:07");
  EXPECT_EQ(JobEventJson(event),
            R"({"event":"progress","id":"j-2","state":"RUNNING","examples":128,)"
            R"("total_examples":512,"examples_per_second":null,"eta_seconds":7.4})");
  const std::string details = JobDetails(event.job());
  EXPECT_THAT(details, HasSubstr("examples: 128/512 examples evaluated\neta: 0:07\n"));
  EXPECT_THAT(JobJson(event.job()), HasSubstr(R"("evaluated_examples":128)"));
  EXPECT_THAT(JobJson(event.job()), HasSubstr(R"("eta_seconds":7.4)"));
  event.set_type(JobEvent::SNAPSHOT);
  EXPECT_EQ(JobEventText(event), "job j-2 e (evaluation): RUNNING, 128/512 examples");

  // Not running: no ETA, whatever the progress says.
  event.set_type(JobEvent::PROGRESS);
  event.mutable_job()->set_state(taylorshift::v1::JOB_STATE_FAILED);
  EXPECT_EQ(JobEventText(event), "evaluating 128/512 examples");
  EXPECT_THAT(JobEventJson(event), HasSubstr(R"("eta_seconds":null)"));
  EXPECT_THAT(JobDetails(event.job()), Not(HasSubstr("eta:")));

  JobEvent training = FromText<JobEvent>(R"pb(
    type: PROGRESS
    job {
      kind: JOB_KIND_TRAINING
      state: JOB_STATE_RUNNING
      progress { step: 40 total_steps: 300 eta_seconds: 80 }
    }
  )pb");
  EXPECT_THAT(JobEventJson(training), HasSubstr(R"("eta_seconds":80})"));
  EXPECT_THAT(JobDetails(training.job()), HasSubstr("eta: 1:20\n"));
}

TEST(JobFormatTest, ValidationLine) {
  JobEvent event;
  event.set_type(JobEvent::VALIDATION);
  *event.mutable_job() = TrainingJob();
  EvaluationReport* report = event.mutable_job()->mutable_validation();
  report->set_accuracy(0.62);
  report->set_macro_f1(0.58);
  report->set_loss(0.9);
  report->set_step(40);
  report->set_examples(512);
  EXPECT_EQ(JobEventText(event), "val acc 0.62 f1 0.58 loss 0.9 (step 40, 512 examples)");
  EXPECT_THAT(JobEventJson(event),
              StartsWith(R"({"event":"validation","id":"j-7","state":"SUCCEEDED","step":40,)"
                         R"("metrics":{"step":40,"examples":512,"loss":0.9,"accuracy":0.62,)"));
}

TEST(JobFormatTest, CheckpointLine) {
  JobEvent event;
  event.set_type(JobEvent::CHECKPOINT);
  *event.mutable_checkpoint() = TrainingJob().checkpoints(0);
  EXPECT_EQ(JobEventText(event),
            "checkpoint best step 200 val acc 0.81: state/jobs/j-7/step-200.tsckpt");
  *event.mutable_checkpoint() = TrainingJob().checkpoints(1);
  EXPECT_EQ(JobEventText(event), "checkpoint last step 300: state/jobs/j-7/step-300.tsckpt");
  EXPECT_THAT(JobEventJson(event), HasSubstr(R"("checkpoint":{"kind":"last","step":300,)"));
}

TEST(JobFormatTest, StateAndSnapshotLines) {
  JobEvent event;
  event.set_type(JobEvent::STATE);
  Job* job = event.mutable_job();
  job->set_id("j-9");
  job->set_name("n");
  job->set_kind(taylorshift::v1::JOB_KIND_TRAINING);
  job->set_state(taylorshift::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(JobEventText(event), "state RUNNING");
  job->set_state(taylorshift::v1::JOB_STATE_FAILED);
  job->set_reason("data.train.path: \"x.jsonl\" not found");
  EXPECT_EQ(JobEventText(event), "state FAILED: data.train.path: \"x.jsonl\" not found");
  EXPECT_EQ(JobEventJson(event),
            R"({"event":"state","id":"j-9","state":"FAILED",)"
            R"("kind":"TRAINING","name":"n","reason":"data.train.path: \"x.jsonl\" not found",)"
            R"("step":0,"total_steps":0})");

  *job = TrainingJob();
  EXPECT_EQ(JobEventText(event),
            "state SUCCEEDED: best val acc 0.81 f1 0.8 loss 0.52 (step 200, 100 examples)");
  event.set_type(JobEvent::SNAPSHOT);
  EXPECT_EQ(JobEventText(event), "job j-7 filetype (training): SUCCEEDED, step 300/300");
}

TEST(JobFormatTest, DetailsShowPerClassMetricsAndConfusion) {
  const std::string details = JobDetails(TrainingJob());
  EXPECT_THAT(details, StartsWith("id: j-7\nname: filetype\nkind: training\nstate: SUCCEEDED\n"
                                  "submitted_by: -\n"));
  Job owned = TrainingJob();
  owned.set_submitted_by("cert:CN=alice");
  EXPECT_THAT(JobDetails(owned), HasSubstr("\nsubmitted_by: cert:CN=alice\n"));
  EXPECT_THAT(JobJson(owned), HasSubstr(R"("submitted_by":"cert:CN=alice",)"));
  EXPECT_THAT(details, HasSubstr("step: 300/300 (epoch 4.8)\n"));
  EXPECT_THAT(details, HasSubstr("best_validation: acc 0.81 f1 0.8 loss 0.52 (step 200, 100 "
                                 "examples)\n"));
  EXPECT_THAT(details, HasSubstr("  neg       0.8000  0.8400  0.8200       50\n"));
  EXPECT_THAT(details, HasSubstr("  confusion (rows: label, columns: prediction)\n"
                                 "             neg      pos\n"
                                 "  neg         42        8\n"
                                 "  pos         11       39\n"));
  EXPECT_THAT(details, HasSubstr("checkpoint: last step 300: state/jobs/j-7/step-300.tsckpt\n"));
}

TEST(JobFormatTest, Table) {
  Job queued;
  queued.set_id("j-10");
  queued.set_kind(taylorshift::v1::JOB_KIND_EVALUATION);
  queued.set_name("e");
  queued.set_state(taylorshift::v1::JOB_STATE_QUEUED);
  queued.set_submitted_by("token:0123456789ab");
  EXPECT_EQ(JobTable({TrainingJob(), queued}),
            "ID    KIND        NAME      STATE      STEP     ACCURACY  CREATED               "
            "SUBMITTED BY\n"
            "j-7   training    filetype  SUCCEEDED  300/300  0.8100    2024-05-01T12:00:00Z  -\n"
            "j-10  evaluation  e         QUEUED     -        -         -                     "
            "token:0123456789ab\n");
}

// Issue 45: `tsctl jobs delete --json` printed "cancelled" where every other --json prints states
// upper case.
TEST(JobFormatTest, DeleteJsonStateIsUpperCaseLikeEveryOtherJson) {
  const auto response = FromText<taylorshift::v1::DeleteJobResponse>(
      R"pb(
        id: "j-7" state: JOB_STATE_CANCELLED files_removed: 3 bytes_freed: 1024
      )pb");
  EXPECT_EQ(DeleteJson(response),
            R"({"id":"j-7","state":"CANCELLED","files_removed":3,"bytes_freed":1024})");
  Job job;
  job.set_state(taylorshift::v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(JobJson(job), HasSubstr(R"("state":"CANCELLED")"));
}

TEST(JobFormatTest, Promotion) {
  const auto response = FromText<taylorshift::v1::PromoteCheckpointResponse>(R"pb(
    model {
      name: "imdb"
      version: "v4"
      labels: [ "neg", "pos" ]
    }
    previous_version: "v3"
    validation_accuracy: 0.91
    previous_validation_accuracy: 0.89
  )pb");
  EXPECT_EQ(PromoteText(response),
            "promoted imdb version v4 (previous v3); validation accuracy 0.91 (previous 0.89)");
  const std::string json = PromoteJson(response);
  EXPECT_THAT(json, StartsWith(R"({"model":{"name":"imdb","version":"v4",)"));
  EXPECT_THAT(json, HasSubstr(R"("previous_version":"v3","validation_accuracy":0.91,)"
                              R"("previous_validation_accuracy":0.89})"));
}

}  // namespace
}  // namespace ts::client
