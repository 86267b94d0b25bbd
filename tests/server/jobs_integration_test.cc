// Jobs against a real `tsserver` process on loopback (each job in tsworker processes): a tiny model
// learns a generated task over gRPC and beats a held-out accuracy far above chance; an evaluation
// job reports on a test set; promotion under concurrent Classify load fails no request and switches
// versions; the promoted version survives a restart; kill -9 mid-training resumes from the
// checkpoint with the step count continuing; cancel works; bad specs and paths outside the data
// root are refused and the server keeps serving; job metrics are exported. Worker supervision: a
// worker killed with SIGKILL fails its job with the signal named (or is retried), a job past its
// memory limit fails "out of memory" while the server keeps its size, an oversized spec is refused
// at submission, 1/2/4 data-parallel ranks reach the same float64 weights, a 2-rank job dies with
// a killed server and resumes, an evaluation job cancels mid-pass, and client input in errors is
// capped. The heartbeat timeout, the stop grace and retries are unit-tested with fake workers on
// a fake clock (job_runner_test).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/sanitizers.h"
#include "model/checkpoints/checkpoint.h"
#include "model/networks/encoder.h"
#include "taylorshift/v1/classifier.grpc.pb.h"
#include "taylorshift/v1/jobs.grpc.pb.h"
#include "tests/testing/encoder_testing.h"
#include "tests/testing/metrics_text.h"
#include "tests/testing/server_process.h"

namespace ts {
namespace {

namespace pb = taylorshift::v1;
using ts::testing::ServerProcess;
using Clock = std::chrono::steady_clock;

// The generated task: three classes of short documents, each drawn mostly from its own
// alphabet (digits, upper case, lower case) with 30 % shared punctuation noise. Chance is 1/3.
void WriteTaskFile(const std::string& path, int count, std::uint32_t seed) {
  const std::vector<std::pair<std::string, std::string>> classes = {
      {"digits", "0123456789"},
      {"upper", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"},
      {"lower", "abcdefghijklmnopqrstuvwxyz"}};
  const std::string noise = " .,;:!?-+*/=";
  std::mt19937 rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < count; ++i) {
    const auto& [label, alphabet] = classes[static_cast<std::size_t>(i) % classes.size()];
    const int length = std::uniform_int_distribution<int>(12, 40)(rng);
    std::string text;
    for (int j = 0; j < length; ++j) {
      const bool noisy = std::uniform_real_distribution<double>(0, 1)(rng) < 0.3;
      const std::string& from = noisy ? noise : alphabet;
      text += from[std::uniform_int_distribution<std::size_t>(0, from.size() - 1)(rng)];
    }
    out << "{\"text\": \"" << text << "\", \"label\": \"" << label << "\"}\n";
  }
}

std::string WriteServedModel(const std::string& path) {
  TaylorShiftEncoderOptions options(16, 1, 2, 64, 3);
  options.mlp_hidden(32);
  TaylorShiftEncoder model(options);
  ts::testing::RandomizeParameters(model, 3);
  CheckpointMetadata metadata;
  metadata.modality = "bytes";
  metadata.labels = {"a", "b", "c"};
  EXPECT_TRUE(SaveCheckpoint(path, options, metadata, model).ok());
  return path;
}

pb::TrainingSpec TinySpec(const std::string& name, std::uint64_t steps) {
  pb::TrainingSpec spec;
  spec.set_name(name);
  auto* model = spec.mutable_model();
  model->set_embed_dim(32);
  model->set_depth(1);
  model->set_heads(4);
  model->set_mlp_ratio(2);
  model->set_max_length(64);
  spec.mutable_data()->mutable_train()->set_format("jsonl");
  spec.mutable_data()->mutable_train()->set_path("task/train.jsonl");
  spec.mutable_data()->mutable_validation()->set_format("jsonl");
  spec.mutable_data()->mutable_validation()->set_path("task/val.jsonl");
  spec.mutable_optimizer()->set_name("adamw");
  spec.mutable_optimizer()->set_lr(3e-3);
  spec.mutable_optimizer()->set_warmup_steps(10);
  spec.set_batch_size(16);
  spec.set_steps(steps);
  spec.set_seed(5);
  spec.set_threads(1);
  spec.set_log_interval(10);
  return spec;
}

using ts::testing::RunCommand;

class JobsIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ts::testing::MakeScratchDir();
    ASSERT_EQ(::mkdir((dir_ + "/data").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((dir_ + "/data/task").c_str(), 0755), 0);
    WriteTaskFile(dir_ + "/data/task/train.jsonl", 600, 1);
    WriteTaskFile(dir_ + "/data/task/val.jsonl", 150, 2);
    WriteTaskFile(dir_ + "/data/task/test.jsonl", 300, 3);
    WriteServedModel(dir_ + "/served.tsckpt");
    std::ofstream config(dir_ + "/config.yaml");
    config << "listen: 127.0.0.1:0\n"
              "metrics_listen: 127.0.0.1:0\n"
              "intra_op_threads: 1\n"
              "shutdown_grace_ms: 20000\n"
              "state_dir: state\n"
              "data_root: data\n"
              "jobs: {max_concurrent: 1, threads_per_job: 1}\n"
              "models:\n"
              "  - name: docs\n"
              "    checkpoint: served.tsckpt\n"
              "    device: cpu\n"
              "    batching: {max_batch_size: 8, max_queue_delay_us: 2000}\n";
  }

  void StartServer() {
    ASSERT_TRUE(server_.Start(TS_TSSERVER_BINARY, {"--config", dir_ + "/config.yaml"}, dir_));
    channel_ = grpc::CreateChannel(server_.grpc_address(), grpc::InsecureChannelCredentials());
    jobs_ = pb::Jobs::NewStub(channel_);
    classifier_ = pb::Classifier::NewStub(channel_);
  }

  static void SetDeadline(grpc::ClientContext& context, int seconds = 30) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  }

  grpc::Status Submit(const pb::TrainingSpec& spec, pb::Job* job) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::SubmitTrainingRequest request;
    *request.mutable_spec() = spec;
    return jobs_->SubmitTraining(&context, request, job);
  }

  pb::Job Get(const std::string& id) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::GetJobRequest request;
    request.set_id(id);
    pb::Job job;
    EXPECT_TRUE(jobs_->GetJob(&context, request, &job).ok());
    return job;
  }

  // Watches until the job is final (or `stop` says so, or the time is up); returns the events.
  std::vector<pb::JobEvent> Watch(const std::string& id, int seconds,
                                  const std::function<bool(const pb::JobEvent&)>& stop = {}) {
    grpc::ClientContext context;
    SetDeadline(context, seconds);
    pb::WatchJobRequest request;
    request.set_id(id);
    auto reader = jobs_->WatchJob(&context, request);
    std::vector<pb::JobEvent> events;
    pb::JobEvent event;
    while (reader->Read(&event)) {
      events.push_back(event);
      if (stop && stop(event)) {
        context.TryCancel();
        break;
      }
    }
    reader->Finish();
    return events;
  }

  // The steps of the job's loss curve, in the order GetJobHistory gives them (one page).
  std::vector<std::uint64_t> LossCurveSteps(const std::string& id) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::GetJobHistoryRequest request;
    request.set_id(id);
    pb::GetJobHistoryResponse response;
    const grpc::Status status = jobs_->GetJobHistory(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(response.next_page_token().empty());
    std::vector<std::uint64_t> steps;
    for (const auto& point : response.loss_curve()) steps.push_back(point.step());
    return steps;
  }
  // 10, 20, ..., `last`: a job's logged steps at log_interval 10.
  static std::vector<std::uint64_t> StepsUpTo(std::uint64_t last) {
    std::vector<std::uint64_t> steps;
    for (std::uint64_t step = 10; step <= last; step += 10) steps.push_back(step);
    return steps;
  }

  grpc::Status Classify(const std::string& text, pb::ClassifyResponse* response) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::ClassifyRequest request;
    request.set_model("docs");
    request.set_document(text);
    return classifier_->Classify(&context, request, response);
  }

  std::string dir_;
  ServerProcess server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Jobs::Stub> jobs_;
  std::unique_ptr<pb::Classifier::Stub> classifier_;
};

TEST_F(JobsIntegrationTest, LearnsOverGrpcEvaluatesAndPromotesUnderLoadAcrossRestart) {
  StartServer();
  const auto start = Clock::now();
  pb::Job job;
  auto spec = TinySpec("letters", 150);
  spec.set_checkpoint_interval(50);
  ASSERT_TRUE(Submit(spec, &job).ok());
  EXPECT_EQ(job.id(), "job-1");
  EXPECT_EQ(job.state(), pb::JOB_STATE_QUEUED);

  const auto events = Watch(job.id(), 90);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_FALSE(events.empty());
  const pb::Job& done = events.back().job();
  ASSERT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason() << "\n" << server_.Log();
  EXPECT_LE(seconds, 60.0) << "training took " << seconds << " s";
  std::set<int> types;
  for (const auto& e : events) types.insert(e.type());
  EXPECT_TRUE(types.count(pb::JobEvent::SNAPSHOT) && types.count(pb::JobEvent::PROGRESS) &&
              types.count(pb::JobEvent::VALIDATION) && types.count(pb::JobEvent::CHECKPOINT));
  EXPECT_EQ(done.progress().step(), 150u);
  EXPECT_EQ(done.progress().total_steps(), 150u);
  // Chance is 1/3; the task is easy for a model that sees the characters.
  EXPECT_GE(done.best_validation().accuracy(), 0.85) << done.best_validation().DebugString();
  std::vector<std::string> labels(done.labels().begin(), done.labels().end());
  EXPECT_EQ(labels, (std::vector<std::string>{"digits", "lower", "upper"}));
  int last = 0, best = 0;
  for (const auto& c : done.checkpoints()) (c.kind() == "best" ? best : last) += 1;
  EXPECT_EQ(best, 1);
  EXPECT_EQ(last, 2);  // steps 100 and 150 (keep_checkpoints 2); 50 was removed

  // Held-out test set through an evaluation job on the job's best checkpoint.
  pb::SubmitEvaluationRequest eval;
  eval.mutable_spec()->set_name("letters-test");
  eval.mutable_spec()->set_job_id(job.id());
  eval.mutable_spec()->mutable_data()->set_format("jsonl");
  eval.mutable_spec()->mutable_data()->set_path("task/test.jsonl");
  pb::Job eval_job;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    ASSERT_TRUE(jobs_->SubmitEvaluation(&context, eval, &eval_job).ok());
  }
  const auto eval_events = Watch(eval_job.id(), 60);
  ASSERT_FALSE(eval_events.empty());
  const pb::Job& evaluated = eval_events.back().job();
  ASSERT_EQ(evaluated.state(), pb::JOB_STATE_SUCCEEDED) << evaluated.reason();
  EXPECT_EQ(evaluated.report().examples(), 300u);
  EXPECT_GE(evaluated.report().accuracy(), 0.85);
  EXPECT_EQ(evaluated.report().confusion_size(), 3);
  EXPECT_EQ(evaluated.report().classes_size(), 3);

  // The task guard: docs answers [a, b, c]; the job's checkpoint [digits, lower, upper].
  pb::ClassifyResponse before;
  ASSERT_TRUE(Classify("12345", &before).ok());
  const std::string old_version = before.model_version();
  {
    pb::PromoteCheckpointRequest unforced;
    unforced.set_model("docs");
    unforced.set_job_id(job.id());
    grpc::ClientContext context;
    SetDeadline(context);
    pb::PromoteCheckpointResponse refused;
    const auto status = jobs_->PromoteCheckpoint(&context, unforced, &refused);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(status.error_message().find("labels differ: served [a, b, c], candidate [digits, "
                                          "lower, upper]; pass force to replace it"),
              std::string::npos)
        << status.error_message();
  }

  // Promote (forced) under concurrent Classify load: no request fails, and the version switches.
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, ok{0};
  std::mutex versions_mu;
  std::set<std::string> versions;
  std::vector<std::thread> clients;
  clients.reserve(4);
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      auto stub = pb::Classifier::NewStub(channel_);
      std::mt19937 rng(static_cast<std::uint32_t>(t));
      while (!stop) {
        grpc::ClientContext context;
        SetDeadline(context);
        pb::ClassifyRequest request;
        request.set_model("docs");
        request.set_document(std::string(static_cast<std::size_t>(rng() % 40 + 1), 'x'));
        pb::ClassifyResponse response;
        if (stub->Classify(&context, request, &response).ok()) {
          ++ok;
          std::lock_guard<std::mutex> lock(versions_mu);
          versions.insert(response.model_version());
        } else {
          ++failures;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pb::PromoteCheckpointRequest promote;
  promote.set_model("docs");
  promote.set_job_id(job.id());
  promote.set_force(true);
  pb::PromoteCheckpointResponse promoted;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    const auto status = jobs_->PromoteCheckpoint(&context, promote, &promoted);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(ok.load(), 10);
  EXPECT_EQ(promoted.previous_version(), old_version);
  EXPECT_NE(promoted.model().version(), old_version);
  EXPECT_EQ(promoted.model().labels_size(), 3);
  EXPECT_GE(promoted.validation_accuracy(), 0.85);
  EXPECT_TRUE(versions.count(old_version) && versions.count(promoted.model().version()))
      << "versions seen: " << versions.size();
  pb::ClassifyResponse after;
  ASSERT_TRUE(Classify("0123456789", &after).ok());
  EXPECT_EQ(after.model_version(), promoted.model().version());
  EXPECT_EQ(after.label(), "digits");

  // The gate: promoting the same accuracy again passes; an untrained file is refused.
  promote.set_require_at_least_current_accuracy(true);
  {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::PromoteCheckpointResponse again;
    EXPECT_TRUE(jobs_->PromoteCheckpoint(&context, promote, &again).ok());
  }
  WriteServedModel(dir_ + "/data/untrained.tsckpt");
  {
    pb::PromoteCheckpointRequest gated;
    gated.set_model("docs");
    gated.set_checkpoint("untrained.tsckpt");
    gated.set_require_at_least_current_accuracy(true);
    grpc::ClientContext context;
    SetDeadline(context);
    pb::PromoteCheckpointResponse refused;
    const auto status = jobs_->PromoteCheckpoint(&context, gated, &refused);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(status.error_message().find("no recorded validation accuracy"), std::string::npos)
        << status.error_message();
  }

  // Job metrics.
  const std::string metrics = ts::testing::HttpGet(server_.metrics_address(), "/metrics");
  EXPECT_NE(metrics.find("taylorshift_job_state{job_id=\"job-1\",kind=\"training\",state="
                         "\"succeeded\"} 1"),
            std::string::npos)
      << metrics.substr(0, 2000);
  EXPECT_NE(metrics.find("taylorshift_job_validation_accuracy{job_id=\"job-1\"}"),
            std::string::npos);
  EXPECT_NE(metrics.find("taylorshift_jobs_total{kind=\"evaluation\",state=\"succeeded\"} 1"),
            std::string::npos);

  // A restart serves the promoted version again and keeps the jobs.
  const std::string probe = "QWERTY, UIOP; ASDF GHJKL!";
  pb::ClassifyResponse before_restart;
  ASSERT_TRUE(Classify(probe, &before_restart).ok());
  ASSERT_EQ(server_.Stop(SIGTERM), 0) << server_.Log();
  StartServer();
  pb::ClassifyResponse restarted;
  ASSERT_TRUE(Classify(probe, &restarted).ok());
  EXPECT_EQ(restarted.model_version(), promoted.model().version());
  EXPECT_EQ(restarted.label(), before_restart.label());
  ASSERT_EQ(restarted.probabilities_size(), 3);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(restarted.probabilities(c).probability(),
              before_restart.probabilities(c).probability());
  }
  EXPECT_EQ(Get(job.id()).state(), pb::JOB_STATE_SUCCEEDED);
  pb::ListJobsRequest list;
  list.set_kind(pb::JOB_KIND_TRAINING);
  pb::ListJobsResponse listed;
  grpc::ClientContext context;
  SetDeadline(context);
  ASSERT_TRUE(jobs_->ListJobs(&context, list, &listed).ok());
  ASSERT_EQ(listed.jobs_size(), 1);
  EXPECT_EQ(listed.jobs(0).id(), job.id());

  // Issue 45: rollbacks walk back through the promotions (the same version twice) to the
  // configured checkpoint, recorded; a restart serves the configured checkpoint again.
  const auto rollback = [&](pb::PromoteCheckpointResponse* response) {
    pb::RollbackPromotionRequest request;
    request.set_model("docs");
    grpc::ClientContext rollback_context;
    SetDeadline(rollback_context);
    return jobs_->RollbackPromotion(&rollback_context, request, response);
  };
  pb::PromoteCheckpointResponse first, second, third;
  ASSERT_TRUE(rollback(&first).ok());
  EXPECT_EQ(first.model().version(), promoted.model().version());
  ASSERT_TRUE(rollback(&second).ok());
  EXPECT_EQ(second.model().version(), old_version);
  EXPECT_EQ(second.previous_version(), promoted.model().version());
  pb::ClassifyResponse rolled_back;
  ASSERT_TRUE(Classify("0123456789", &rolled_back).ok());
  EXPECT_EQ(rolled_back.model_version(), old_version);
  const auto nothing = rollback(&third);
  EXPECT_EQ(nothing.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(nothing.error_message().find("nothing to roll back to"), std::string::npos)
      << nothing.error_message();
  pb::ListPromotionsRequest history_request;
  history_request.set_model("docs");
  pb::ListPromotionsResponse history;
  {
    grpc::ClientContext history_context;
    SetDeadline(history_context);
    ASSERT_TRUE(jobs_->ListPromotions(&history_context, history_request, &history).ok());
  }
  ASSERT_EQ(history.entries_size(), 4);
  EXPECT_EQ(history.entries(0).kind(), "promote");
  EXPECT_TRUE(history.entries(0).forced());
  EXPECT_EQ(history.entries(0).job_id(), job.id());
  EXPECT_EQ(history.entries(0).actor(), "anonymous");
  EXPECT_TRUE(history.entries(0).has_validation_accuracy());
  EXPECT_EQ(history.entries(3).kind(), "rollback");
  EXPECT_EQ(history.entries(3).version(), old_version);
  EXPECT_EQ(history.entries(3).source(), "config");
  ASSERT_EQ(server_.Stop(SIGTERM), 0) << server_.Log();
  StartServer();
  pb::ClassifyResponse after_rollback_restart;
  ASSERT_TRUE(Classify("0123456789", &after_rollback_restart).ok());
  EXPECT_EQ(after_rollback_restart.model_version(), old_version);
}

TEST_F(JobsIntegrationTest, KillNineMidTrainingResumesFromTheCheckpoint) {
  StartServer();
  auto spec = TinySpec("resumable", 400);
  spec.set_checkpoint_interval(40);
  spec.set_eval_interval(200);
  pb::Job job;
  ASSERT_TRUE(Submit(spec, &job).ok());
  std::uint64_t checkpoint_step = 0;
  std::uint64_t seen_step = 0;
  Watch(job.id(), 60, [&](const pb::JobEvent& e) {
    if (e.type() == pb::JobEvent::CHECKPOINT && e.checkpoint().kind() == "last") {
      checkpoint_step = e.checkpoint().step();
    }
    seen_step = e.job().progress().step();
    return checkpoint_step >= 80 && seen_step >= checkpoint_step + 10;
  });
  ASSERT_GE(checkpoint_step, 80u) << server_.Log();
  ASSERT_EQ(server_.Stop(SIGKILL), 128 + SIGKILL);

  StartServer();
  const pb::Job resumed = Get(job.id());
  EXPECT_EQ(resumed.progress().resumes(), 1u);
  EXPECT_TRUE(resumed.state() == pb::JOB_STATE_QUEUED || resumed.state() == pb::JOB_STATE_RUNNING);
  std::uint64_t first_step_after_restart = 0;
  const auto events = Watch(job.id(), 90, [&](const pb::JobEvent& e) {
    if (e.type() == pb::JobEvent::PROGRESS && first_step_after_restart == 0 &&
        e.job().state() == pb::JOB_STATE_RUNNING && e.job().progress().step() > 0) {
      first_step_after_restart = e.job().progress().step();
    }
    return false;
  });
  ASSERT_FALSE(events.empty());
  const pb::Job& done = events.back().job();
  ASSERT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason() << "\n" << server_.Log();
  EXPECT_EQ(done.progress().step(), 400u);
  // The step count continued from the last checkpoint (state saved with it), not from zero.
  EXPECT_GE(first_step_after_restart, checkpoint_step) << server_.Log();
  EXPECT_LE(first_step_after_restart, checkpoint_step + 10);
  EXPECT_NE(server_.Log().find("resumes at step " + std::to_string(checkpoint_step)),
            std::string::npos)
      << server_.Log();
}

TEST_F(JobsIntegrationTest, CancelAndBadSpecsAreHandledAndServingContinues) {
  StartServer();
  pb::Job long_job;
  ASSERT_TRUE(Submit(TinySpec("long", 100000), &long_job).ok());
  pb::Job queued_job;
  ASSERT_TRUE(Submit(TinySpec("waiting", 100), &queued_job).ok());
  Watch(long_job.id(), 30, [](const pb::JobEvent& e) {
    return e.job().state() == pb::JOB_STATE_RUNNING && e.job().progress().step() >= 10;
  });
  // The queued one is cancelled at once, the running one at its next step.
  for (const auto& id : {queued_job.id(), long_job.id()}) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::CancelJobRequest cancel;
    cancel.set_id(id);
    pb::Job response;
    ASSERT_TRUE(jobs_->CancelJob(&context, cancel, &response).ok());
  }
  const auto events = Watch(long_job.id(), 30);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().job().state(), pb::JOB_STATE_CANCELLED);
  EXPECT_NE(events.back().job().reason().find("cancelled"), std::string::npos);
  EXPECT_EQ(Get(queued_job.id()).state(), pb::JOB_STATE_CANCELLED);
  {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::CancelJobRequest cancel;
    cancel.set_id(long_job.id());
    pb::Job response;
    EXPECT_EQ(jobs_->CancelJob(&context, cancel, &response).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }

  // Refused at submit, naming the key; the server keeps serving.
  ASSERT_EQ(::symlink("/etc", (dir_ + "/data/escape").c_str()), 0);
  struct Case {
    std::function<void(pb::TrainingSpec&)> edit;
    grpc::StatusCode code;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {[](pb::TrainingSpec& s) { s.mutable_model()->set_heads(3); },
       grpc::StatusCode::INVALID_ARGUMENT, "model.heads"},
      {[](pb::TrainingSpec& s) { s.mutable_optimizer()->set_lr(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "optimizer.lr"},
      {[](pb::TrainingSpec& s) { s.mutable_data()->clear_train(); },
       grpc::StatusCode::INVALID_ARGUMENT, "data.train"},
      {[](pb::TrainingSpec& s) { s.mutable_data()->mutable_train()->set_path("../config.yaml"); },
       grpc::StatusCode::INVALID_ARGUMENT, "data.train.path"},
      {[](pb::TrainingSpec& s) { s.mutable_data()->mutable_train()->set_path("/etc/passwd"); },
       grpc::StatusCode::INVALID_ARGUMENT, "data.train.path"},
      {[](pb::TrainingSpec& s) { s.mutable_data()->mutable_train()->set_path("escape/passwd"); },
       grpc::StatusCode::PERMISSION_DENIED, "data.train.path"},
      {[](pb::TrainingSpec& s) { s.mutable_data()->mutable_train()->set_path("missing.jsonl"); },
       grpc::StatusCode::NOT_FOUND, "data.train.path"},
  };
  for (const auto& c : cases) {
    auto spec = TinySpec("bad", 10);
    c.edit(spec);
    pb::Job job;
    const auto status = Submit(spec, &job);
    EXPECT_EQ(status.error_code(), c.code) << c.mentions << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(c.mentions), std::string::npos) << status.error_message();
  }
  pb::ClassifyResponse response;
  EXPECT_TRUE(Classify("still serving", &response).ok());

  // A job whose data turns out malformed at run time fails with the file and line.
  {
    std::ofstream bad(dir_ + "/data/task/bad.jsonl");
    bad << "{\"text\": \"ok\", \"label\": \"a\"}\n{not json}\n";
  }
  auto spec = TinySpec("malformed", 10);
  spec.mutable_data()->mutable_train()->set_path("task/bad.jsonl");
  spec.mutable_data()->clear_validation();
  pb::Job job;
  ASSERT_TRUE(Submit(spec, &job).ok());
  const auto failed = Watch(job.id(), 30);
  ASSERT_FALSE(failed.empty());
  EXPECT_EQ(failed.back().job().state(), pb::JOB_STATE_FAILED);
  EXPECT_NE(failed.back().job().reason().find("bad.jsonl:2"), std::string::npos)
      << failed.back().job().reason();
  // Issue 41: the reason names the file as the spec did, relative to the data root, and never
  // the server's own directories.
  EXPECT_NE(failed.back().job().reason().find("task/bad.jsonl:2"), std::string::npos)
      << failed.back().job().reason();
  EXPECT_EQ(failed.back().job().reason().find(dir_), std::string::npos)
      << failed.back().job().reason();
  EXPECT_EQ(failed.back().job().reason().find(std::filesystem::canonical(dir_).string()),
            std::string::npos)
      << failed.back().job().reason();
  // So do the Jobs RPCs' errors: a promotion of a file the data root lacks names it as given.
  {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::PromoteCheckpointRequest promote;
    promote.set_model("missing");
    promote.set_checkpoint("task/missing.tsckpt");
    pb::PromoteCheckpointResponse promoted;
    const grpc::Status status = jobs_->PromoteCheckpoint(&context, promote, &promoted);
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.error_message().find("task/missing.tsckpt"), std::string::npos)
        << status.error_message();
    EXPECT_EQ(status.error_message().find(dir_), std::string::npos) << status.error_message();
    EXPECT_EQ(status.error_message().find(std::filesystem::canonical(dir_).string()),
              std::string::npos)
        << status.error_message();
  }

  // Labels are checked against the data's before the model is built: ListOps has ten, a spec
  // of twelve names two that no example has.
  auto labelled = TinySpec("twelve-labels", 10);
  labelled.mutable_data()->mutable_train()->set_format("listops");
  labelled.mutable_data()->mutable_train()->clear_path();
  labelled.mutable_data()->mutable_train()->mutable_generate()->set_count(200);
  labelled.mutable_data()->mutable_train()->mutable_generate()->set_min_length(10);
  labelled.mutable_data()->mutable_train()->mutable_generate()->set_max_length(60);
  labelled.mutable_data()->clear_validation();
  for (int i = 0; i < 12; ++i) labelled.add_labels(std::to_string(i));
  ASSERT_TRUE(Submit(labelled, &job).ok());
  const auto refused = Watch(job.id(), 30);
  ASSERT_FALSE(refused.empty());
  EXPECT_EQ(refused.back().job().state(), pb::JOB_STATE_FAILED);
  EXPECT_NE(refused.back().job().reason().find("labels[10]: \"10\" has no example in data.train"),
            std::string::npos)
      << refused.back().job().reason();
  EXPECT_TRUE(Classify("still serving", &response).ok());
}

TEST_F(JobsIntegrationTest, JobsNeedTheAdminRole) {
  {
    std::ofstream config(dir_ + "/config.yaml", std::ios::app);
    config << "auth: {tokens: {reader: [classify], operator: [classify, admin]}}\n";
  }
  StartServer();
  const auto list = [&](const std::string& token) {
    grpc::ClientContext context;
    SetDeadline(context);
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    pb::ListJobsResponse response;
    return jobs_->ListJobs(&context, pb::ListJobsRequest(), &response).error_code();
  };
  EXPECT_EQ(list(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(list("reader"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(list("operator"), grpc::StatusCode::OK);
  grpc::ClientContext context;
  SetDeadline(context);
  context.AddMetadata("authorization", "Bearer reader");
  pb::WatchJobRequest request;
  request.set_id("job-1");
  auto reader = jobs_->WatchJob(&context, request);
  pb::JobEvent event;
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  const auto history = [&](const std::string& token) {
    grpc::ClientContext history_context;
    SetDeadline(history_context);
    history_context.AddMetadata("authorization", "Bearer " + token);
    pb::GetJobHistoryRequest history_request;
    history_request.set_id("job-1");
    pb::GetJobHistoryResponse response;
    return jobs_->GetJobHistory(&history_context, history_request, &response).error_code();
  };
  EXPECT_EQ(history("reader"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(history("operator"), grpc::StatusCode::NOT_FOUND);  // allowed; there is no job-1

  // Issue 45: promotion, rollback and the promotion history need the role too, and a promotion
  // records which token asked (a fingerprint, never the token).
  WriteServedModel(dir_ + "/data/same-task.tsckpt");
  const auto promote = [&](const std::string& token) {
    grpc::ClientContext promote_context;
    SetDeadline(promote_context);
    promote_context.AddMetadata("authorization", "Bearer " + token);
    pb::PromoteCheckpointRequest promote_request;
    promote_request.set_model("docs");
    promote_request.set_checkpoint("same-task.tsckpt");
    pb::PromoteCheckpointResponse response;
    return jobs_->PromoteCheckpoint(&promote_context, promote_request, &response).error_code();
  };
  const auto rollback = [&](const std::string& token) {
    grpc::ClientContext rollback_context;
    SetDeadline(rollback_context);
    rollback_context.AddMetadata("authorization", "Bearer " + token);
    pb::RollbackPromotionRequest rollback_request;
    rollback_request.set_model("docs");
    pb::PromoteCheckpointResponse response;
    return jobs_->RollbackPromotion(&rollback_context, rollback_request, &response).error_code();
  };
  const auto promotions = [&](const std::string& token, pb::ListPromotionsResponse* response) {
    grpc::ClientContext list_context;
    SetDeadline(list_context);
    list_context.AddMetadata("authorization", "Bearer " + token);
    pb::ListPromotionsRequest list_request;
    list_request.set_model("docs");
    return jobs_->ListPromotions(&list_context, list_request, response).error_code();
  };
  EXPECT_EQ(promote("reader"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(rollback("operator"), grpc::StatusCode::FAILED_PRECONDITION);  // never promoted
  EXPECT_EQ(promote("operator"), grpc::StatusCode::OK);  // the same task: no force needed
  EXPECT_EQ(rollback("reader"), grpc::StatusCode::PERMISSION_DENIED);
  pb::ListPromotionsResponse listed;
  EXPECT_EQ(promotions("reader", &listed), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_EQ(promotions("operator", &listed), grpc::StatusCode::OK);
  ASSERT_EQ(listed.entries_size(), 1);
  // The first 12 hex digits of SHA-256("operator").
  EXPECT_EQ(listed.entries(0).actor(), "token:06e55b633481");
  EXPECT_FALSE(listed.entries(0).forced());
  EXPECT_EQ(rollback("operator"), grpc::StatusCode::OK);
}

// Issue 45, ownership and quotas: with two admin tokens, bob cannot read, watch, cancel, delete,
// promote or download alice's job (PERMISSION_DENIED naming the job and the all_jobs role), his
// list leaves it out, and a token with all_jobs reaches both; each job shows its submitter; the
// per-identity limits refuse alice's submissions naming the key while bob's still go in.
TEST_F(JobsIntegrationTest, AnotherTokensJobsNeedTheAllJobsRoleAndQuotasArePerIdentity) {
  {
    std::ifstream in(dir_ + "/config.yaml");
    std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string jobs_line = "jobs: {max_concurrent: 1, threads_per_job: 1}\n";
    const std::size_t at = config.find(jobs_line);
    ASSERT_NE(at, std::string::npos);
    config.replace(at, jobs_line.size(),
                   "jobs: {max_concurrent: 1, threads_per_job: 1,\n"
                   "       per_identity: {max_queued: 2, max_total_steps: 150000}}\n"
                   "auth: {tokens: {alice: [admin], bob: [admin], auditor: [admin, all_jobs]}}\n");
    std::ofstream(dir_ + "/config.yaml") << config;
  }
  StartServer();
  const auto as = [&](grpc::ClientContext& context, const std::string& token) {
    SetDeadline(context);
    context.AddMetadata("authorization", "Bearer " + token);
  };
  const auto submit = [&](const std::string& token, std::uint64_t steps, pb::Job* job) {
    grpc::ClientContext context;
    as(context, token);
    pb::SubmitTrainingRequest request;
    *request.mutable_spec() = TinySpec("owned", steps);
    return jobs_->SubmitTraining(&context, request, job);
  };
  const auto get = [&](const std::string& token, const std::string& id, pb::Job* job) {
    grpc::ClientContext context;
    as(context, token);
    pb::GetJobRequest request;
    request.set_id(id);
    return jobs_->GetJob(&context, request, job);
  };
  const auto listed = [&](const std::string& token) {
    grpc::ClientContext context;
    as(context, token);
    pb::ListJobsResponse response;
    EXPECT_TRUE(jobs_->ListJobs(&context, pb::ListJobsRequest(), &response).ok());
    std::vector<std::string> ids;
    for (const pb::Job& job : response.jobs()) ids.push_back(job.id());
    return ids;
  };
  const auto denied_for_job = [](const grpc::Status& status, const std::string& id) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
    EXPECT_NE(status.error_message().find("job " + id +
                                          " was submitted by another identity (a "
                                          "token)"),
              std::string::npos)
        << status.error_message();
    EXPECT_NE(status.error_message().find("all_jobs role"), std::string::npos);
    EXPECT_EQ(status.error_message().find("alice"), std::string::npos);
  };

  // A long job of alice's (running through the test; cancelled at the end), then one of bob's.
  pb::Job a;
  ASSERT_TRUE(submit("alice", 100000, &a).ok());
  EXPECT_EQ(a.submitted_by().rfind("token:", 0), 0u) << a.submitted_by();
  EXPECT_EQ(a.submitted_by().size(), 6u + 12u);
  pb::Job b;
  ASSERT_TRUE(submit("bob", 20, &b).ok());
  EXPECT_NE(b.submitted_by(), a.submitted_by());

  pb::Job read;
  denied_for_job(get("bob", a.id(), &read), a.id());
  {
    grpc::ClientContext context;
    as(context, "bob");
    pb::CancelJobRequest request;
    request.set_id(a.id());
    denied_for_job(jobs_->CancelJob(&context, request, &read), a.id());
  }
  {
    grpc::ClientContext context;
    as(context, "bob");
    pb::DeleteJobRequest request;
    request.set_id(a.id());
    pb::DeleteJobResponse response;
    denied_for_job(jobs_->DeleteJob(&context, request, &response), a.id());
  }
  {
    grpc::ClientContext context;
    as(context, "bob");
    pb::GetJobHistoryRequest request;
    request.set_id(a.id());
    pb::GetJobHistoryResponse response;
    denied_for_job(jobs_->GetJobHistory(&context, request, &response), a.id());
  }
  {
    grpc::ClientContext context;
    as(context, "bob");
    pb::PromoteCheckpointRequest request;
    request.set_model("docs");
    request.set_job_id(a.id());
    pb::PromoteCheckpointResponse response;
    denied_for_job(jobs_->PromoteCheckpoint(&context, request, &response), a.id());
  }
  {
    grpc::ClientContext context;
    as(context, "bob");
    pb::WatchJobRequest request;
    request.set_id(a.id());
    auto reader = jobs_->WatchJob(&context, request);
    pb::JobEvent event;
    EXPECT_FALSE(reader->Read(&event));
    denied_for_job(reader->Finish(), a.id());
  }
  {
    grpc::ClientContext context;
    as(context, "bob");
    pb::DownloadCheckpointRequest request;
    request.set_job_id(a.id());
    auto reader = jobs_->DownloadCheckpoint(&context, request);
    pb::CheckpointChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    denied_for_job(reader->Finish(), a.id());
  }
  {
    // A new job of bob's that would read alice's checkpoint.
    grpc::ClientContext context;
    as(context, "bob");
    pb::SubmitEvaluationRequest request;
    request.mutable_spec()->set_name("peek");
    request.mutable_spec()->set_job_id(a.id());
    denied_for_job(jobs_->SubmitEvaluation(&context, request, &read), a.id());
  }
  {
    grpc::ClientContext context;
    as(context, "bob");
    pb::SubmitTrainingRequest request;
    *request.mutable_spec() = TinySpec("fork", 20);
    request.mutable_spec()->clear_model();
    request.mutable_spec()->set_init_from("job:" + a.id());
    denied_for_job(jobs_->SubmitTraining(&context, request, &read), a.id());
  }
  // Undoing alice's promotion needs all_jobs too.
  WriteServedModel(dir_ + "/data/same-task.tsckpt");
  const auto promote_or_rollback = [&](const std::string& token, bool rollback) {
    grpc::ClientContext context;
    as(context, token);
    pb::PromoteCheckpointResponse response;
    if (rollback) {
      pb::RollbackPromotionRequest request;
      request.set_model("docs");
      return jobs_->RollbackPromotion(&context, request, &response);
    }
    pb::PromoteCheckpointRequest request;
    request.set_model("docs");
    request.set_checkpoint("same-task.tsckpt");
    return jobs_->PromoteCheckpoint(&context, request, &response);
  };
  ASSERT_TRUE(promote_or_rollback("alice", false).ok());
  const grpc::Status undo = promote_or_rollback("bob", true);
  EXPECT_EQ(undo.error_code(), grpc::StatusCode::PERMISSION_DENIED) << undo.error_message();
  EXPECT_NE(undo.error_message().find("model docs was promoted by another identity (a token); "
                                      "undoing another identity's promotion needs the all_jobs "
                                      "role"),
            std::string::npos)
      << undo.error_message();
  EXPECT_TRUE(promote_or_rollback("auditor", true).ok());

  // Alice reaches her own job; the auditor reaches both; bob's and alice's lists keep to theirs.
  ASSERT_TRUE(get("alice", a.id(), &read).ok());
  EXPECT_EQ(read.submitted_by(), a.submitted_by());
  ASSERT_TRUE(get("auditor", a.id(), &read).ok());
  ASSERT_TRUE(get("auditor", b.id(), &read).ok());
  EXPECT_EQ(read.submitted_by(), b.submitted_by());
  EXPECT_EQ(listed("bob"), std::vector<std::string>{b.id()});
  EXPECT_EQ(listed("alice"), std::vector<std::string>{a.id()});
  EXPECT_EQ(listed("auditor"), (std::vector<std::string>{b.id(), a.id()}));

  // Quotas: alice's 100000 steps and 50001 more are over 150000; then at most 2 of hers queued.
  pb::Job refused;
  const grpc::Status steps = submit("alice", 50001, &refused);
  EXPECT_EQ(steps.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(steps.error_message().find("(jobs.per_identity.max_total_steps) of 150000"),
            std::string::npos)
      << steps.error_message();
  EXPECT_NE(steps.error_message().find(" has 100000 steps in unfinished jobs"), std::string::npos)
      << steps.error_message();
  grpc::Status queued;
  std::vector<std::string> alice_jobs = {a.id()};
  for (int i = 0; i < 3 && queued.ok(); ++i) {
    pb::Job small;
    queued = submit("alice", 20, &small);
    if (queued.ok()) alice_jobs.push_back(small.id());
  }
  EXPECT_EQ(queued.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(queued.error_message().find("jobs queued, the limit (jobs.per_identity.max_queued) "
                                        "is 2"),
            std::string::npos)
      << queued.error_message();
  pb::Job b2;
  EXPECT_TRUE(submit("bob", 20, &b2).ok());  // another identity is not held by alice's use

  // The auditor (all_jobs) cancels alice's jobs, and bob's, so that the server stops at once.
  alice_jobs.push_back(b.id());
  alice_jobs.push_back(b2.id());
  for (const std::string& id : alice_jobs) {
    grpc::ClientContext context;
    as(context, "auditor");
    pb::CancelJobRequest request;
    request.set_id(id);
    const grpc::Status cancelled = jobs_->CancelJob(&context, request, &read);
    EXPECT_TRUE(cancelled.ok() || cancelled.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
        << cancelled.error_message();
  }
}

// Issue 45: with mutual TLS and no tokens, a job's submitter is its client certificate's subject,
// and the per-identity limits hold for that identity.
TEST_F(JobsIntegrationTest, AClientCertificateIsTheSubmitterAndHasItsOwnQuota) {
  ASSERT_EQ(std::system(
                (ts::testing::SourcePath("tests/testing/make_test_certs.sh") + " " + dir_).c_str()),
            0);
  {
    std::ifstream in(dir_ + "/config.yaml");
    std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string jobs_line = "jobs: {max_concurrent: 1, threads_per_job: 1}\n";
    const std::size_t at = config.find(jobs_line);
    ASSERT_NE(at, std::string::npos);
    config.replace(at, jobs_line.size(),
                   "jobs: {max_concurrent: 1, threads_per_job: 1,\n"
                   "       per_identity: {max_total_steps: 100000}}\n"
                   "tls: {cert_file: server.crt, key_file: server.key, client_ca_file: ca.crt}\n");
    std::ofstream(dir_ + "/config.yaml") << config;
  }
  ASSERT_TRUE(server_.Start(TS_TSSERVER_BINARY, {"--config", dir_ + "/config.yaml"}, dir_));
  const auto read = [&](const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const grpc::SslCredentialsOptions tls{read("ca.crt"), read("client.key"), read("client.crt")};
  auto jobs =
      pb::Jobs::NewStub(grpc::CreateChannel(server_.grpc_address(), grpc::SslCredentials(tls)));
  const auto submit = [&](std::uint64_t steps, pb::Job* job) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::SubmitTrainingRequest request;
    *request.mutable_spec() = TinySpec("by-cert", steps);
    return jobs->SubmitTraining(&context, request, job);
  };
  pb::Job first;
  const grpc::Status submitted = submit(100000, &first);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  EXPECT_EQ(first.submitted_by().rfind("cert:", 0), 0u) << first.submitted_by();
  EXPECT_NE(first.submitted_by().find("ts-test-client"), std::string::npos) << first.submitted_by();
  pb::Job second;
  const grpc::Status refused = submit(20, &second);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find(first.submitted_by() + " has 100000 steps"),
            std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("jobs.per_identity.max_total_steps"), std::string::npos);
  grpc::ClientContext context;
  SetDeadline(context);
  pb::CancelJobRequest cancel;
  cancel.set_id(first.id());
  EXPECT_TRUE(jobs->CancelJob(&context, cancel, &second).ok());
}

// Counts the non-overlapping occurrences of `needle` in `text`.
std::size_t Count(const std::string& text, const std::string& needle) {
  std::size_t count = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

TEST_F(JobsIntegrationTest, LossCurveOverGrpcPagesAndThroughTsctl) {
  StartServer();
  auto spec = TinySpec("curve", 60);
  spec.set_log_interval(5);    // loss points at 5, 10, ..., 60
  spec.set_eval_interval(20);  // validation runs at 20, 40, 60
  spec.set_checkpoint_interval(20);
  pb::Job job;
  ASSERT_TRUE(Submit(spec, &job).ok());
  const auto events = Watch(job.id(), 90);
  ASSERT_FALSE(events.empty());
  const pb::Job done = events.back().job();
  ASSERT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason() << "\n" << server_.Log();

  // Pages of 4 entries: 12 points and 3 validation runs come back in 4 pages, each once.
  std::vector<std::uint64_t> point_steps, validation_steps;
  std::vector<pb::GetJobHistoryResponse> pages;
  pb::GetJobHistoryRequest request;
  request.set_id(job.id());
  request.set_page_size(4);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < 100 && Clock::now() < deadline; ++i) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::GetJobHistoryResponse page;
    const grpc::Status status = jobs_->GetJobHistory(&context, request, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LE(page.loss_curve_size() + page.validations_size(), 4);
    for (const auto& point : page.loss_curve()) point_steps.push_back(point.step());
    for (const auto& report : page.validations()) validation_steps.push_back(report.step());
    pages.push_back(page);
    if (page.next_page_token().empty()) break;
    request.set_page_token(page.next_page_token());
  }
  ASSERT_EQ(pages.size(), 4u);
  EXPECT_EQ(point_steps,
            (std::vector<std::uint64_t>{5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60}));
  EXPECT_EQ(validation_steps, (std::vector<std::uint64_t>{20, 40, 60}));
  // The curve is the job's: its last point is the final progress, its best run the best one.
  const pb::LossPoint& last_point = pages.back().loss_curve(pages.back().loss_curve_size() - 1);
  EXPECT_EQ(last_point.loss(), done.progress().loss());
  EXPECT_GT(last_point.time().seconds(), 0);
  double best_accuracy = 0;
  for (const auto& page : pages) {
    for (const auto& report : page.validations()) {
      best_accuracy = std::max(best_accuracy, report.accuracy());
      EXPECT_EQ(report.classes_size(), 0);  // only with include_class_reports
    }
  }
  EXPECT_EQ(best_accuracy, done.best_validation().accuracy());

  // Refusals name the problem (and cut a huge id).
  const auto refused = [&](const pb::GetJobHistoryRequest& bad) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::GetJobHistoryResponse response;
    return jobs_->GetJobHistory(&context, bad, &response);
  };
  pb::GetJobHistoryRequest bad;
  bad.set_id("job-77");
  grpc::Status status = refused(bad);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("job-77"), std::string::npos) << status.error_message();
  bad.set_id(std::string(300, 'x'));
  status = refused(bad);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LT(status.error_message().size(), 260u) << status.error_message();
  bad.set_id(job.id());
  bad.set_page_size(50000);
  status = refused(bad);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("10000"), std::string::npos) << status.error_message();
  bad.set_page_size(0);
  bad.set_page_token("garbage");
  status = refused(bad);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("page_token"), std::string::npos);

  // tsctl jobs get --curve: the job, then the charts.
  const std::string tsctl = std::string(TS_TSCTL_BINARY) + " ";
  const std::string server = " --server " + server_.grpc_address();
  const auto curve = RunCommand(tsctl + "jobs get " + job.id() + " --curve" + server);
  ASSERT_EQ(curve.exit_code, 0) << curve.text;
  EXPECT_NE(curve.text.find("state: SUCCEEDED"), std::string::npos) << curve.text;
  EXPECT_NE(curve.text.find("loss curve: 12 points, steps 5 to 60"), std::string::npos)
      << curve.text;
  EXPECT_NE(curve.text.find("validation accuracy: 3 runs"), std::string::npos) << curve.text;
  EXPECT_EQ(Count(curve.text, " +" + std::string(60, '-')), 2u) << curve.text;  // two charts

  const auto json = RunCommand(tsctl + "jobs get " + job.id() + " --curve --json" + server);
  ASSERT_EQ(json.exit_code, 0) << json.text;
  ASSERT_EQ(json.lines.size(), 1u) << json.text;
  const auto object = nlohmann::json::parse(json.lines[0], nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(object.is_object()) << json.text;
  EXPECT_TRUE(object.contains("history") && object["history"].is_object()) << json.text;
  const std::string history = json.lines[0].substr(json.lines[0].find("\"history\":"));
  EXPECT_EQ(Count(history, "\"learning_rate\":"), 12u) << history;
  EXPECT_EQ(Count(history, "\"accuracy\":"), 3u) << history;

  // tsctl jobs plot: an SVG with 12 loss vertices and 3 accuracy points, a CSV with a row per
  // step; only .svg and .csv.
  const std::string svg_path = dir_ + "/curve.svg";
  const auto plot = RunCommand(tsctl + "jobs plot " + job.id() + " --out " + svg_path + server);
  ASSERT_EQ(plot.exit_code, 0) << plot.text;
  EXPECT_NE(plot.text.find("12 loss points, 3 validation runs"), std::string::npos) << plot.text;
  std::ifstream file(svg_path);
  const std::string svg((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << svg.substr(0, 200);
  EXPECT_NE(svg.find("<title>job-1 curve: training loss and validation accuracy</title>"),
            std::string::npos);
  const std::size_t loss_line = svg.find("<polyline class=\"loss\"");
  ASSERT_NE(loss_line, std::string::npos);
  const std::size_t points = svg.find("points=\"", loss_line) + 8;
  EXPECT_EQ(Count(svg.substr(points, svg.find('"', points) - points), ","), 12u);
  EXPECT_EQ(Count(svg, "<circle "), 3u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  const std::string csv_path = dir_ + "/curve.csv";
  const auto csv = RunCommand(tsctl + "jobs plot " + job.id() + " --out " + csv_path + server);
  ASSERT_EQ(csv.exit_code, 0) << csv.text;
  std::ifstream csv_file(csv_path);
  std::string header;
  std::getline(csv_file, header);
  EXPECT_EQ(header,
            "step,loss,learning_rate,examples_per_second,validation_loss,validation_accuracy,"
            "validation_macro_f1");
  int rows = 0;
  for (std::string line; std::getline(csv_file, line);) ++rows;
  EXPECT_GE(rows, 12);  // the 12 loss points' steps, and any validation step between them
  const auto png =
      RunCommand(tsctl + "jobs plot " + job.id() + " --out " + dir_ + "/c.png" + server);
  EXPECT_EQ(png.exit_code, 2) << png.text;
  EXPECT_NE(png.text.find("jobs plot writes CSV or SVG"), std::string::npos) << png.text;
  EXPECT_NE(png.text.find("'.png'"), std::string::npos) << png.text;
}

TEST_F(JobsIntegrationTest, TsctlTrainsWaitsListsAndPromotes) {
  StartServer();
  {
    std::ofstream spec(dir_ + "/spec.yaml");
    spec << "name: letters-cli\n"
            "model: {embed_dim: 32, depth: 1, heads: 4, mlp_ratio: 2, max_length: 64}\n"
            "data:\n"
            "  train: {format: jsonl, path: task/train.jsonl}\n"
            "  validation: {split: 0.2}\n"
            "optimizer: {name: lamb, lr: 0.01, warmup_steps: 10}\n"
            "batch_size: 16\n"
            "steps: 120\n"
            "threads: 1\n";
  }
  const std::string tsctl = std::string(TS_TSCTL_BINARY) + " ";
  const std::string server = " --server " + server_.grpc_address();
  const auto train =
      RunCommand(tsctl + "train" + server + " --spec " + dir_ + "/spec.yaml --wait --json");
  ASSERT_EQ(train.exit_code, 0) << train.text << server_.Log();
  ASSERT_GE(train.lines.size(), 3u) << train.text;  // events, then the job
  const auto last = nlohmann::json::parse(train.lines.back(), nullptr, false);
  ASSERT_TRUE(last.is_object()) << train.text;
  EXPECT_EQ(last.value("state", ""), "SUCCEEDED") << train.lines.back();
  const std::string id = last.value("id", "");
  EXPECT_EQ(id, "job-1");
  EXPECT_TRUE(last.contains("metrics") && last["metrics"].is_object()) << train.lines.back();
  EXPECT_NE(train.lines.back().find("\"accuracy\""), std::string::npos);

  const auto list = RunCommand(tsctl + "jobs list" + server + " --json");
  ASSERT_EQ(list.exit_code, 0) << list.text;
  ASSERT_EQ(list.lines.size(), 1u) << list.text;
  EXPECT_NE(list.lines[0].find("\"id\":\"job-1\""), std::string::npos) << list.text;

  const auto get = RunCommand(tsctl + "jobs get " + id + server);
  EXPECT_EQ(get.exit_code, 0) << get.text;
  EXPECT_NE(get.text.find("SUCCEEDED"), std::string::npos) << get.text;

  const auto promote = RunCommand(tsctl + "promote" + server + " --job " + id + " --model letters");
  ASSERT_EQ(promote.exit_code, 0) << promote.text << server_.Log();
  pb::ClassifyResponse response;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::ClassifyRequest request;
    request.set_model("letters");
    request.set_document("9876543210 12");
    ASSERT_TRUE(classifier_->Classify(&context, request, &response).ok());
  }
  EXPECT_EQ(response.label(), "digits");

  // A spec with an invalid value is refused before anything runs; the message names the key.
  {
    std::ofstream spec(dir_ + "/bad.yaml");
    spec << "name: bad\n"
            "model: {embed_dim: 30, depth: 1, heads: 4, max_length: 64}\n"
            "data: {train: {format: jsonl, path: task/train.jsonl}}\n"
            "steps: 10\n";
  }
  const auto bad = RunCommand(tsctl + "train" + server + " --spec " + dir_ + "/bad.yaml");
  EXPECT_EQ(bad.exit_code, 1) << bad.text;
  EXPECT_NE(bad.text.find("INVALID_ARGUMENT"), std::string::npos) << bad.text;
  EXPECT_NE(bad.text.find("model.heads"), std::string::npos) << bad.text;
}

// ---------------------------------------------------------------------------------------------
// Worker processes: every job runs in tsworker processes that tsserver supervises.

// The tsworker processes whose parent is `parent`.
std::vector<pid_t> WorkerPids(pid_t parent) {
  std::vector<pid_t> pids;
  const auto listing = RunCommand("ls /proc");
  for (const auto& entry : listing.lines) {
    if (entry.empty() || !std::all_of(entry.begin(), entry.end(), ::isdigit)) continue;
    std::ifstream stat("/proc/" + entry + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');
    if (close == std::string::npos || text.find("(tsworker)") == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) pids.push_back(static_cast<pid_t>(std::stol(entry)));
  }
  return pids;
}

// tsworker processes still alive whose command line names a file under `dir`.
int WorkersUnder(const std::string& dir) {
  // "[-]" keeps pgrep from matching the shell that runs it.
  const auto out = RunCommand("pgrep -f -c -- '[-]-task=" + dir + "'");
  return out.exit_code == 0 ? std::stoi(out.lines.at(0)) : 0;
}

long ResidentKb(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  long value = 0;
  while (status >> key) {
    if (key == "VmRSS:") {
      status >> value;
      return value;
    }
    status.ignore(1 << 12, '\n');
  }
  return -1;
}

class WorkerSupervisionTest : public JobsIntegrationTest {
 protected:
  // Replaces the jobs section of the configuration.
  void SetJobsConfig(const std::string& jobs) {
    std::ifstream in(dir_ + "/config.yaml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = text.find("jobs: {max_concurrent: 1, threads_per_job: 1}");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, std::string("jobs: {max_concurrent: 1, threads_per_job: 1}").size(),
                 "jobs: {max_concurrent: 1, threads_per_job: 1, " + jobs + "}");
    std::ofstream(dir_ + "/config.yaml") << text;
  }

  // Waits until the job has reported `step` steps; returns its worker pids.
  std::vector<pid_t> WaitForStep(const std::string& id, std::uint64_t step) {
    Watch(id, 90, [&](const pb::JobEvent& e) { return e.job().progress().step() >= step; });
    return WorkerPids(server_.pid());
  }

  // Classify requests in a loop on another thread until Finish(); counts failures.
  struct Load {
    std::atomic<bool> stop{false};
    std::atomic<int> ok{0}, failed{0};
    std::string first_error;
    std::thread thread;
  };
  void StartLoad(Load* load) {
    load->thread = std::thread([this, load] {
      const auto deadline = Clock::now() + std::chrono::seconds(240);
      while (!load->stop && Clock::now() < deadline) {
        pb::ClassifyResponse response;
        const grpc::Status status = Classify("ABC def 123", &response);
        if (status.ok()) {
          ++load->ok;
        } else if (load->failed++ == 0) {
          load->first_error = status.error_message();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  static void FinishLoad(Load* load) {
    load->stop = true;
    load->thread.join();
  }
};

TEST_F(WorkerSupervisionTest, AWorkerKilledMidStepFailsItsJobWithTheSignalWhileServingGoesOn) {
  StartServer();
  Load load;
  StartLoad(&load);
  pb::Job job;
  ASSERT_TRUE(Submit(TinySpec("killed", 100000), &job).ok());
  const auto pids = WaitForStep(job.id(), 20);
  ASSERT_EQ(pids.size(), 1u) << server_.Log();
  ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
  const auto events = Watch(job.id(), 60);
  FinishLoad(&load);
  ASSERT_FALSE(events.empty());
  const pb::Job& done = events.back().job();
  EXPECT_EQ(done.state(), pb::JOB_STATE_FAILED) << server_.Log();
  EXPECT_NE(done.reason().find("SIGKILL"), std::string::npos) << done.reason();
  EXPECT_EQ(load.failed, 0) << load.first_error;
  EXPECT_GT(load.ok, 0);
  EXPECT_TRUE(WorkerPids(server_.pid()).empty());
  pb::ClassifyResponse response;
  EXPECT_TRUE(Classify("still serving", &response).ok());
}

TEST_F(WorkerSupervisionTest, WithMaxRetriesAKilledWorkerResumesFromItsStateAndSucceeds) {
  StartServer();
  auto spec = TinySpec("retried", 120);
  spec.set_checkpoint_interval(20);
  spec.set_eval_interval(120);
  spec.set_max_retries(1);
  pb::Job job;
  ASSERT_TRUE(Submit(spec, &job).ok());
  const auto pids = WaitForStep(job.id(), 50);
  ASSERT_EQ(pids.size(), 1u) << server_.Log();
  ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
  const auto events = Watch(job.id(), 120);
  ASSERT_FALSE(events.empty());
  const pb::Job& done = events.back().job();
  ASSERT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason() << "\n" << server_.Log();
  EXPECT_EQ(done.progress().retries(), 1u);
  EXPECT_EQ(done.progress().step(), 120u);
  EXPECT_NE(server_.Log().find("retrying from its last saved state"), std::string::npos);
  EXPECT_NE(server_.Log().find("resumes at step 40"), std::string::npos) << server_.Log();
  // Steps 50 (and 60, if logged before the kill) were trained twice: logged once.
  EXPECT_EQ(LossCurveSteps(job.id()), StepsUpTo(120)) << server_.Log();
}

// Soak finding: a worker SIGKILLed before its first saved state (checkpoints every 100 steps,
// killed after step 30) and retried starts again at step 0; the history held steps 10..30 twice.
// Each step is in it once, as the run the model continues from logged it.
TEST_F(WorkerSupervisionTest, AJobRetriedWithNoSavedStateLogsEachStepOnce) {
  StartServer();
  auto spec = TinySpec("retried-early", 120);
  spec.set_checkpoint_interval(100);
  spec.set_eval_interval(120);
  spec.set_max_retries(1);
  pb::Job job;
  ASSERT_TRUE(Submit(spec, &job).ok());
  const auto pids = WaitForStep(job.id(), 30);
  ASSERT_EQ(pids.size(), 1u) << server_.Log();
  ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
  const auto events = Watch(job.id(), 120);
  ASSERT_FALSE(events.empty());
  const pb::Job& done = events.back().job();
  ASSERT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason() << "\n" << server_.Log();
  EXPECT_EQ(done.progress().retries(), 1u);
  EXPECT_NE(server_.Log().find("starts again at step 0 (no saved state"), std::string::npos)
      << server_.Log();
  EXPECT_EQ(LossCurveSteps(job.id()), StepsUpTo(120)) << server_.Log();
}

// A spec far beyond the budget: 64 sequences of 4,096 tokens on the softmax path, whose backward
// keeps the N×N probabilities of every head (16 GB; the Taylor paths recompute their scores).
pb::TrainingSpec HugeSpec() {
  pb::TrainingSpec spec;
  spec.set_name("huge");
  auto* model = spec.mutable_model();
  model->set_embed_dim(64);
  model->set_depth(1);
  model->set_heads(4);
  model->set_max_length(4096);
  auto* train = spec.mutable_data()->mutable_train();
  train->set_format("listops");
  train->mutable_generate()->set_count(64);
  train->mutable_generate()->set_min_length(3900);
  train->mutable_generate()->set_max_length(4000);
  spec.set_batch_size(64);
  spec.set_steps(10);
  spec.set_threads(1);
  spec.set_path(pb::ATTENTION_PATH_SOFTMAX);
  return spec;
}

TEST_F(WorkerSupervisionTest, AnOversizedSpecIsRefusedAtSubmissionWithItsEstimate) {
  SetJobsConfig("memory_budget_bytes: 1073741824");
  StartServer();
  pb::Job job;
  const grpc::Status status = Submit(HugeSpec(), &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("estimated peak memory"), std::string::npos)
      << status.error_message();
  EXPECT_NE(status.error_message().find("jobs.memory_budget_bytes 1073741824"), std::string::npos)
      << status.error_message();
  // A small job fits the same budget.
  EXPECT_TRUE(Submit(TinySpec("small", 10), &job).ok());
}

TEST_F(WorkerSupervisionTest, AJobPastItsMemoryLimitFailsOutOfMemoryAndTheServerKeepsItsSize) {
  if (kAddressSanitizer || kThreadSanitizer) {
    GTEST_SKIP() << "a sanitizer build sets no address-space limit on workers (its shadow memory "
                    "needs terabytes of address space) and its allocator keeps freed memory, so "
                    "neither the limit nor the server's resident size can be checked";
  }
  // Admission off: the estimate lets everything through, the workers' limit must hold.
  SetJobsConfig(
      "memory_budget_bytes: 536870912, memory_admission: false, "
      "worker_address_space_overhead_bytes: 1610612736");
  StartServer();
  pb::ClassifyResponse response;
  ASSERT_TRUE(Classify("warm up", &response).ok());
  const long before_kb = ResidentKb(server_.pid());
  pb::Job job;
  ASSERT_TRUE(Submit(HugeSpec(), &job).ok());
  const auto events = Watch(job.id(), 120);
  ASSERT_FALSE(events.empty());
  const pb::Job& done = events.back().job();
  EXPECT_EQ(done.state(), pb::JOB_STATE_FAILED);
  EXPECT_NE(done.reason().find("out of memory"), std::string::npos) << done.reason();
  ASSERT_TRUE(Classify("still serving", &response).ok());
  const long after_kb = ResidentKb(server_.pid());
  EXPECT_LT(std::abs(after_kb - before_kb), 50 * 1024)
      << "server RSS " << before_kb << " kB before, " << after_kb << " kB after";
}

TEST_F(WorkerSupervisionTest, DataParallelRanksReachTheWeightsOfOneRankWithTheSameGlobalBatch) {
  StartServer();
  std::map<int, std::string> checkpoints;
  for (const int workers : {1, 2, 4}) {
    auto spec = TinySpec("ranks-" + std::to_string(workers), 20);
    spec.set_dtype("float64");
    spec.set_workers(static_cast<std::uint32_t>(workers));
    spec.set_checkpoint_interval(20);
    spec.set_eval_interval(20);
    pb::Job job;
    ASSERT_TRUE(Submit(spec, &job).ok());
    const auto events = Watch(job.id(), 180);
    ASSERT_FALSE(events.empty());
    const pb::Job& done = events.back().job();
    ASSERT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason() << "\n" << server_.Log();
    for (const auto& c : done.checkpoints()) {
      if (c.kind() == "last" && c.step() == 20) checkpoints[workers] = c.path();
    }
    ASSERT_EQ(checkpoints.count(workers), 1u);
  }
  auto one = LoadCheckpoint(checkpoints[1]);
  ASSERT_TRUE(one.ok()) << one.status();
  const auto reference = StateDict(one->model);
  for (const int workers : {2, 4}) {
    auto other = LoadCheckpoint(checkpoints[workers]);
    ASSERT_TRUE(other.ok()) << other.status();
    for (const auto& [name, tensor] : StateDict(other->model)) {
      ASSERT_EQ(tensor.scalar_type(), torch::kFloat64) << name;
      const torch::Tensor& expected = reference.at(name);
      const double error = (tensor - expected).abs().max().item<double>();
      const double scale = std::max(expected.abs().max().item<double>(), 1e-3);
      EXPECT_LT(error / scale, 1e-10) << workers << " ranks, " << name;
    }
  }
}

TEST_F(WorkerSupervisionTest, ATwoRankJobDiesWithTheServerAndResumesAfterKillNine) {
  StartServer();
  auto spec = TinySpec("two-ranks", 200);
  spec.set_workers(2);
  spec.set_checkpoint_interval(20);
  spec.set_eval_interval(200);
  pb::Job job;
  ASSERT_TRUE(Submit(spec, &job).ok());
  std::uint64_t checkpoint_step = 0;
  Watch(job.id(), 90, [&](const pb::JobEvent& e) {
    if (e.type() == pb::JobEvent::CHECKPOINT && e.checkpoint().kind() == "last") {
      checkpoint_step = e.checkpoint().step();
    }
    return checkpoint_step >= 40;
  });
  ASSERT_GE(checkpoint_step, 40u) << server_.Log();
  ASSERT_EQ(WorkerPids(server_.pid()).size(), 2u);
  ASSERT_EQ(server_.Stop(SIGKILL), 128 + SIGKILL);
  // No orphans: both ranks die with the server.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (WorkersUnder(dir_) > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(WorkersUnder(dir_), 0);

  StartServer();
  const auto events = Watch(job.id(), 180);
  ASSERT_FALSE(events.empty());
  const pb::Job& done = events.back().job();
  ASSERT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason() << "\n" << server_.Log();
  EXPECT_EQ(done.progress().resumes(), 1u);
  EXPECT_EQ(done.progress().step(), 200u);
  EXPECT_NE(server_.Log().find("resumes at step"), std::string::npos) << server_.Log();
}

TEST_F(WorkerSupervisionTest, AnEvaluationJobIsCancelledMidPass) {
  StartServer();
  pb::EvaluationSpec spec;
  spec.set_name("long-eval");
  spec.set_model("docs");
  {
    // The served model's classes, many times over: a pass of minutes at batch size 1.
    std::ofstream out(dir_ + "/data/task/many.jsonl");
    for (int i = 0; i < 200000; ++i) {
      out << "{\"text\": \"document number " << i << " of many\", \"label\": \""
          << "abc"[i % 3] << "\"}\n";
    }
  }
  spec.mutable_data()->set_format("jsonl");
  spec.mutable_data()->set_path("task/many.jsonl");
  spec.set_batch_size(1);
  spec.set_threads(1);
  pb::Job job;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::SubmitEvaluationRequest request;
    *request.mutable_spec() = spec;
    ASSERT_TRUE(jobs_->SubmitEvaluation(&context, request, &job).ok());
  }
  // Issue 45: the pass reports its position: examples evaluated of the total, and an ETA from
  // their rate once a second report has come (about 1 s after the first batch).
  const auto counted = Watch(job.id(), 60, [](const pb::JobEvent& e) {
    return e.job().state() == pb::JOB_STATE_RUNNING && e.job().progress().has_eta_seconds();
  });
  ASSERT_FALSE(counted.empty());
  const pb::TrainingProgress& position = counted.back().job().progress();
  ASSERT_TRUE(position.has_eta_seconds()) << server_.Log();
  EXPECT_EQ(counted.back().type(), pb::JobEvent::PROGRESS);
  EXPECT_EQ(position.validation_examples(), 200000u);
  EXPECT_GT(position.evaluated_examples(), 0u);
  EXPECT_LT(position.evaluated_examples(), 200000u);
  EXPECT_GT(position.eta_seconds(), 0);
  {
    const std::string tsctl = std::string(TS_TSCTL_BINARY) + " ";
    const std::string server = " --server " + server_.grpc_address();
    const auto get = RunCommand(tsctl + "jobs get " + job.id() + server);
    ASSERT_EQ(get.exit_code, 0) << get.text;
    EXPECT_NE(get.text.find("/200000 examples evaluated\neta: "), std::string::npos) << get.text;
    const auto json = RunCommand(tsctl + "jobs get " + job.id() + " --json" + server);
    ASSERT_EQ(json.exit_code, 0) << json.text;
    EXPECT_NE(json.text.find("\"evaluated_examples\":"), std::string::npos) << json.text;
    EXPECT_NE(json.text.find("\"eta_seconds\":"), std::string::npos) << json.text;
  }
  const auto start = Clock::now();
  {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::CancelJobRequest request;
    request.set_id(job.id());
    pb::Job cancelled;
    const grpc::Status status = jobs_->CancelJob(&context, request, &cancelled);
    ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << server_.Log();
  }
  const auto events = Watch(job.id(), 60);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().job().state(), pb::JOB_STATE_CANCELLED)
      << events.back().job().reason() << "\n"
      << server_.Log();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE(events.back().job().has_report());
}

TEST_F(WorkerSupervisionTest, ErrorsQuoteClientInputCapped) {
  StartServer();
  grpc::ClientContext context;
  SetDeadline(context);
  pb::ClassifyRequest request;
  request.set_model(std::string(10000, 'm'));
  request.set_document("text");
  pb::ClassifyResponse response;
  const grpc::Status status = classifier_->Classify(&context, request, &response);
  // Longer than any model name may be: refused as a name, not looked up.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_LT(status.error_message().size(), 400u);
  EXPECT_NE(status.error_message().find("(10000 bytes)"), std::string::npos);

  auto spec = TinySpec("far-away", 10);
  spec.mutable_data()->mutable_train()->set_path(std::string(10000, 'p'));
  pb::Job job;
  const grpc::Status refused = Submit(spec, &job);
  EXPECT_FALSE(refused.ok());
  EXPECT_LT(refused.error_message().size(), 400u) << refused.error_message().substr(0, 400);
}

// ---------------------------------------------------------------------------------------------
// Job lifecycle: DeleteJob and retention

class JobLifecycleTest : public WorkerSupervisionTest {
 protected:
  grpc::Status Delete(const std::string& id, pb::DeleteJobResponse* response) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::DeleteJobRequest request;
    request.set_id(id);
    return jobs_->DeleteJob(&context, request, response);
  }
  grpc::Status Cancel(const std::string& id) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::CancelJobRequest request;
    request.set_id(id);
    pb::Job job;
    return jobs_->CancelJob(&context, request, &job);
  }
  grpc::StatusCode GetCode(const std::string& id) {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::GetJobRequest request;
    request.set_id(id);
    pb::Job job;
    return jobs_->GetJob(&context, request, &job).error_code();
  }
  std::string JobDirectory(const std::string& id) const { return dir_ + "/state/jobs/" + id; }
  static int CountFiles(const std::string& dir) {
    int files = 0;
    std::error_code error;
    for (std::filesystem::recursive_directory_iterator it(dir, error), end; !error && it != end;
         it.increment(error)) {
      if (it->is_regular_file(error)) ++files;
    }
    return files;
  }
};

TEST_F(JobLifecycleTest, DeleteJobRemovesAFinishedJobAndItsFilesAndItsPromotedModelStaysServed) {
  StartServer();
  auto spec = TinySpec("to-delete", 30);
  spec.set_checkpoint_interval(10);
  pb::Job done;
  ASSERT_TRUE(Submit(spec, &done).ok());
  ASSERT_EQ(Watch(done.id(), 120).back().job().state(), pb::JOB_STATE_SUCCEEDED) << server_.Log();
  const int files = CountFiles(JobDirectory(done.id()));
  ASSERT_GE(files, 2) << "a best and a last checkpoint at least";

  // A running job cannot be deleted.
  pb::Job running;
  ASSERT_TRUE(Submit(TinySpec("running", 100000), &running).ok());
  WaitForStep(running.id(), 5);
  pb::DeleteJobResponse deleted;
  grpc::Status status = Delete(running.id(), &deleted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_NE(status.error_message().find("cancel it first"), std::string::npos)
      << status.error_message();

  // Nor one whose checkpoint a queued job will read.
  pb::EvaluationSpec eval;
  eval.set_name("reads-it");
  eval.set_job_id(done.id());
  eval.mutable_data()->set_format("jsonl");
  eval.mutable_data()->set_path("task/test.jsonl");
  eval.set_threads(1);
  pb::Job queued;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::SubmitEvaluationRequest request;
    *request.mutable_spec() = eval;
    ASSERT_TRUE(jobs_->SubmitEvaluation(&context, request, &queued).ok());
  }
  status = Delete(done.id(), &deleted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_NE(status.error_message().find(queued.id()), std::string::npos) << status.error_message();
  EXPECT_NE(status.error_message().find("job_id"), std::string::npos) << status.error_message();
  EXPECT_EQ(CountFiles(JobDirectory(done.id())), files);
  ASSERT_TRUE(Cancel(queued.id()).ok());
  ASSERT_TRUE(Cancel(running.id()).ok());
  ASSERT_EQ(Watch(running.id(), 120).back().job().state(), pb::JOB_STATE_CANCELLED);

  // Its checkpoint promoted to serving: a copy, which the deletion leaves served.
  {
    grpc::ClientContext context;
    SetDeadline(context);
    pb::PromoteCheckpointRequest promote;
    promote.set_model("from-deleted");
    promote.set_job_id(done.id());
    pb::PromoteCheckpointResponse promoted;
    const grpc::Status promoted_status = jobs_->PromoteCheckpoint(&context, promote, &promoted);
    ASSERT_TRUE(promoted_status.ok()) << promoted_status.error_message();
  }

  status = Delete(done.id(), &deleted);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << server_.Log();
  EXPECT_EQ(deleted.id(), done.id());
  EXPECT_EQ(deleted.state(), pb::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(deleted.files_removed(), static_cast<std::uint64_t>(files));
  EXPECT_GT(deleted.bytes_freed(), 0u);
  EXPECT_FALSE(std::filesystem::exists(JobDirectory(done.id())));
  EXPECT_EQ(GetCode(done.id()), grpc::StatusCode::NOT_FOUND);
  status = Delete(done.id(), &deleted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_EQ(Delete("job-999", &deleted).error_code(), grpc::StatusCode::NOT_FOUND);

  // tsctl deletes the cancelled ones.
  const std::string tsctl = std::string(TS_TSCTL_BINARY) + " jobs delete ";
  const std::string server = " --server " + server_.grpc_address();
  const auto by_cli = RunCommand(tsctl + running.id() + server + " --json");
  ASSERT_EQ(by_cli.exit_code, 0) << by_cli.text;
  EXPECT_NE(by_cli.text.find("\"state\":\"CANCELLED\""), std::string::npos) << by_cli.text;
  EXPECT_NE(by_cli.text.find("\"files_removed\""), std::string::npos) << by_cli.text;
  const auto text = RunCommand(tsctl + queued.id() + server);
  ASSERT_EQ(text.exit_code, 0) << text.text;
  EXPECT_NE(text.text.find(queued.id() + " (CANCELLED) deleted"), std::string::npos) << text.text;
  const auto missing = RunCommand(tsctl + queued.id() + server);
  EXPECT_EQ(missing.exit_code, 1) << missing.text;
  EXPECT_NE(missing.text.find("NOT_FOUND"), std::string::npos) << missing.text;

  const std::string metrics = ts::testing::HttpGet(server_.metrics_address(), "/metrics");
  EXPECT_NE(metrics.find("taylorshift_jobs_deleted_total{reason=\"request\"} 3"), std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find("job_id=\"" + done.id() + "\""), std::string::npos) << metrics;

  // After a restart the deleted jobs stay gone and the promoted model is served again.
  ASSERT_EQ(server_.Stop(), 0) << server_.Log();
  StartServer();
  EXPECT_EQ(GetCode(done.id()), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext context;
  SetDeadline(context);
  pb::ClassifyRequest request;
  request.set_model("from-deleted");
  request.set_document("ABC def 123");
  pb::ClassifyResponse response;
  const grpc::Status served = classifier_->Classify(&context, request, &response);
  EXPECT_TRUE(served.ok()) << served.error_message() << "\n" << server_.Log();
  pb::Job next;
  const grpc::Status submitted = Submit(TinySpec("after", 20), &next);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  EXPECT_EQ(next.id(), "job-4") << "deleted ids are not reused";
}

TEST_F(JobLifecycleTest, RetentionDeletesFinishedJobsOlderThanItsLimit) {
  SetJobsConfig("retention_s: 2, retention_sweep_interval_s: 1");
  StartServer();
  pb::Job job;
  ASSERT_TRUE(Submit(TinySpec("short-lived", 10), &job).ok());
  ASSERT_EQ(Watch(job.id(), 120).back().job().state(), pb::JOB_STATE_SUCCEEDED) << server_.Log();
  // Still there right after it finished (younger than 2 s)...
  EXPECT_EQ(GetCode(job.id()), grpc::StatusCode::OK);
  // ...and gone within a few sweeps after.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline && GetCode(job.id()) != grpc::StatusCode::NOT_FOUND) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(GetCode(job.id()), grpc::StatusCode::NOT_FOUND) << server_.Log();
  EXPECT_FALSE(std::filesystem::exists(JobDirectory(job.id())));
  EXPECT_NE(server_.Log().find("deleted by retention"), std::string::npos) << server_.Log();
  const std::string metrics = ts::testing::HttpGet(server_.metrics_address(), "/metrics");
  EXPECT_NE(metrics.find("taylorshift_jobs_deleted_total{reason=\"retention\"} 1"),
            std::string::npos)
      << metrics;
}

// A finished job's series leave /metrics metrics_finished_job_series_s after it ended, while the
// job itself stays (jobs.retention_s 0); until then its progress reads done.
TEST_F(JobLifecycleTest, FinishedJobSeriesLeaveMetricsAfterTheirTime) {
  {
    std::ofstream config(dir_ + "/config.yaml", std::ios::app);
    config << "metrics_finished_job_series_s: 3\n";
  }
  StartServer();
  pb::Job job;
  ASSERT_TRUE(Submit(TinySpec("expiring", 20), &job).ok());
  ASSERT_EQ(Watch(job.id(), 120).back().job().state(), pb::JOB_STATE_SUCCEEDED) << server_.Log();
  const std::string series = "{job_id=\"" + job.id() + "\"}";
  std::string metrics = ts::testing::HttpGet(server_.metrics_address(), "/metrics");
  EXPECT_EQ(ts::testing::MetricSample(metrics, "taylorshift_job_total_steps" + series), 20)
      << metrics;
  EXPECT_EQ(ts::testing::MetricSample(metrics, "taylorshift_job_progress_ratio" + series), 1)
      << metrics;
  EXPECT_EQ(ts::testing::MetricSample(metrics, "taylorshift_job_eta_seconds" + series), 0)
      << metrics;
  // Gone within a bounded wait (3 s after the end, read at the next scrape).
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline &&
         metrics.find("job_id=\"" + job.id() + "\"") != std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    metrics = ts::testing::HttpGet(server_.metrics_address(), "/metrics");
  }
  EXPECT_EQ(metrics.find("job_id=\"" + job.id() + "\""), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("taylorshift_jobs_total{kind=\"training\",state=\"succeeded\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_EQ(GetCode(job.id()), grpc::StatusCode::OK);  // the job is kept; only its series went
}

}  // namespace
}  // namespace ts
