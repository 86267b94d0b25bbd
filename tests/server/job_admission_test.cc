// JobAdmission: a submitted spec's data inside the data root, its checkpoint references, an
// evaluation's target, the memory estimate against jobs.memory_budget_bytes, and jobs disabled.
#include "server/jobs/job_admission.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "model/checkpoints/checkpoint.h"
#include "model/kernels/bf16_matmul_probe.h"
#include "model/networks/encoder.h"
#include "server/jobs/job_queue.h"
#include "server/serving/model_registry.h"
#include "tests/testing/job_testing.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
using ::testing::HasSubstr;
using ::testing::Not;

pb::TrainingSpec TinySpec() {
  pb::TrainingSpec spec;
  spec.set_name("tiny");
  auto* model = spec.mutable_model();
  model->set_embed_dim(32);
  model->set_depth(1);
  model->set_heads(4);
  model->set_mlp_ratio(2);
  model->set_max_length(64);
  spec.mutable_data()->mutable_train()->set_format("jsonl");
  spec.mutable_data()->mutable_train()->set_path("task/train.jsonl");
  spec.mutable_optimizer()->set_name("adamw");
  spec.mutable_optimizer()->set_lr(3e-3);
  spec.set_batch_size(16);
  spec.set_steps(20);
  spec.set_threads(1);
  return spec;
}

class JobAdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(env_.dir() + "/data/task");
    std::ofstream(env_.dir() + "/data/task/train.jsonl") << "{\"text\": \"a\", \"label\": \"x\"}\n";
    auto root = DataRoot::Create(env_.dir() + "/data");
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = std::make_unique<DataRoot>(*root);
    resolver_ = std::make_unique<CheckpointResolver>(root_.get(), &queue_);
    jobs_.threads_per_job = 1;
    jobs_.memory_budget_bytes = std::int64_t{1} << 40;
  }
  JobAdmission Admission() const {
    return JobAdmission(jobs_, 1, root_.get(), resolver_.get(), &registry_);
  }

  ts::testing::JobTestContext env_;
  JobQueue queue_{JobQueueOptions{10, 0}, &env_.jobs(), env_.context()};
  ModelRegistry registry_;
  std::unique_ptr<DataRoot> root_;
  std::unique_ptr<CheckpointResolver> resolver_;
  JobsConfig jobs_;
};

TEST_F(JobAdmissionTest, AGoodSpecBecomesATrainingJobWithItsMemoryEstimate) {
  auto job = Admission().Training(TinySpec());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->kind(), pb::JOB_KIND_TRAINING);
  EXPECT_EQ(job->name(), "tiny");
  EXPECT_EQ(static_cast<std::int64_t>(job->progress().memory_estimate_bytes()),
            Admission().EstimateMemory(job->training()));
  EXPECT_GT(job->progress().memory_estimate_bytes(), 0u);
}

// precision: bf16 on the CPU is admitted where LibTorch's bf16 products sum in float32 and refused
// at submission elsewhere (model/kernels/bf16_matmul_probe.h), naming fp32 as the alternative.
TEST_F(JobAdmissionTest, Bf16OnTheCpuFollowsTheMeasuredSums) {
  pb::TrainingSpec spec = TinySpec();
  spec.set_precision("bf16");
  auto job = Admission().Training(spec);
  SCOPED_TRACE(CpuBf16Matmul().Describe());
  if (CpuBf16Matmul().float32_sums()) {
    EXPECT_TRUE(job.ok()) << job.status();
  } else {
    EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition) << job.status();
    EXPECT_THAT(std::string(job.status().message()), HasSubstr("use precision: fp32"));
  }
}

TEST_F(JobAdmissionTest, AnEstimateOverTheBudgetIsRefusedWithBothNumbers) {
  const std::int64_t estimate = Admission().EstimateMemory(TinySpec());
  jobs_.memory_budget_bytes = estimate - 1;
  auto refused = Admission().Training(TinySpec());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("more than jobs.memory_budget_bytes " + std::to_string(estimate - 1)));
  // With admission off, the workers' own limit is what holds.
  jobs_.memory_admission = false;
  EXPECT_TRUE(Admission().Training(TinySpec()).ok());
}

// docs/JOBS.md's first spec and models/source-lang-demo.yaml (embed_dim 64, depth 2, heads 8,
// max_length 2048, batch 16, path auto): the trainer's auto runs efficient above 122 tokens at
// d = 8. Admission once counted auto as direct at max_length (16.65 GiB) and refused the job on
// a 24 GB machine; it is estimated as the trainer runs it: as the efficient path at max_length
// (bench/memory_grid.py measured 0.99 GiB peak RSS over 12 steps for both).
TEST_F(JobAdmissionTest, TheDocumentedFirstJobIsEstimatedAsTheTrainerRunsIt) {
  pb::TrainingSpec spec = TinySpec();
  auto* model = spec.mutable_model();
  model->set_embed_dim(64);
  model->set_depth(2);
  model->set_heads(8);
  model->set_mlp_ratio(2);
  model->set_max_length(2048);
  spec.set_batch_size(16);
  jobs_.memory_budget_bytes = std::int64_t{4} << 30;
  auto job = Admission().Training(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  const auto estimate = static_cast<std::int64_t>(job->progress().memory_estimate_bytes());
  EXPECT_LT(estimate, std::int64_t{1} << 30);
  pb::TrainingSpec efficient = spec;
  efficient.set_path(pb::ATTENTION_PATH_EFFICIENT);
  EXPECT_EQ(estimate, Admission().EstimateMemory(efficient));

  // The direct path recomputes its scores in backward: at max_length it holds blocks of scores,
  // not N×N, and is admitted too. The softmax baseline does hold N×N scores: refused, saying what
  // to change.
  spec.set_path(pb::ATTENTION_PATH_DIRECT);
  auto direct = Admission().Training(spec);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_LT(direct->progress().memory_estimate_bytes(), std::int64_t{1} << 30);
  spec.set_path(pb::ATTENTION_PATH_SOFTMAX);
  auto refused = Admission().Training(spec);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr("path ATTENTION_PATH_SOFTMAX"));
  EXPECT_THAT(message, HasSubstr("largest first: "));
  EXPECT_THAT(message, HasSubstr("attention (softmax"));
  EXPECT_THAT(message, HasSubstr("set path: efficient"));
  spec.set_path(pb::ATTENTION_PATH_EFFICIENT);
  EXPECT_TRUE(Admission().Training(spec).ok());
}

TEST_F(JobAdmissionTest, DataAndCheckpointsMustBeInTheDataRoot) {
  pb::TrainingSpec missing = TinySpec();
  missing.mutable_data()->mutable_train()->set_path("task/nope.jsonl");
  auto not_found = Admission().Training(missing);
  EXPECT_EQ(not_found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(not_found.status().message()), HasSubstr("data.train.path: "));

  pb::TrainingSpec init = TinySpec();
  init.clear_model();  // the architecture comes from the checkpoint
  init.set_init_from("job:job-3");
  auto no_job = Admission().Training(init);
  EXPECT_EQ(no_job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(no_job.status().message()), HasSubstr("init_from: "));
}

// The 18.9 MB spec of 2,000,000 labels, and a data folder of many files: each limit
// refuses before anything is stored, naming the field and the limit.
TEST_F(JobAdmissionTest, ClientSizedInputsAreBounded) {
  pb::TrainingSpec huge = TinySpec();
  for (int i = 0; i < 200000; ++i) huge.add_labels(absl::StrCat("label-", i));
  auto too_big = Admission().Training(huge);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_big.status().message()),
              HasSubstr("spec: " + std::to_string(huge.ByteSizeLong()) +
                        " bytes exceeds jobs.limits.max_spec_bytes 1048576"));

  pb::TrainingSpec many = TinySpec();
  for (int i = 0; i < 10001; ++i) many.add_labels(absl::StrCat(i));
  auto too_many = Admission().Training(many);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_many.status().message()),
              HasSubstr("labels: 10001 exceeds jobs.limits.max_labels 10000"));

  pb::TrainingSpec long_label = TinySpec();
  long_label.add_labels("x");
  long_label.add_labels(std::string(300, 'y'));
  auto too_long = Admission().Training(long_label);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_long.status().message()),
              HasSubstr("labels[1]: 300 bytes exceeds jobs.limits.max_label_bytes 256"));
  EXPECT_LT(too_long.status().message().size(), 200u);

  std::filesystem::create_directories(env_.dir() + "/data/folder/a");
  for (int i = 0; i < 6; ++i) {
    std::ofstream(env_.dir() + "/data/folder/a/" + std::to_string(i) + ".txt") << "0123456789";
  }
  pb::TrainingSpec folder = TinySpec();
  folder.mutable_data()->mutable_train()->set_format("folder");
  folder.mutable_data()->mutable_train()->set_path("folder");
  jobs_.limits.max_data_files = 5;
  auto files = Admission().Training(folder);
  EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(files.status().message()),
              HasSubstr("data.train.path: \"folder\" holds more than "
                        "jobs.limits.max_data_files 5 files"));
  jobs_.limits.max_data_files = 6;
  jobs_.limits.max_data_bytes = 59;
  auto bytes = Admission().Training(folder);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bytes.status().message()),
              HasSubstr("holds more than 59 bytes (jobs.limits.max_data_bytes)"));
  jobs_.limits.max_data_bytes = 60;
  EXPECT_TRUE(Admission().Training(folder).ok());
}

// A CUDA job on a server that sees no GPU is FAILED_PRECONDITION at submission.
TEST_F(JobAdmissionTest, ACudaJobNeedsAGpuTheServerSees) {
  pb::TrainingSpec spec = TinySpec();
  spec.set_device("cuda");
  auto refused = Admission().Training(spec);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("sees no CUDA device"));
}

TEST_F(JobAdmissionTest, AnEvaluationNeedsAServedModelOrAJobWithACheckpoint) {
  pb::EvaluationSpec spec;
  spec.set_name("eval");
  spec.mutable_data()->set_format("jsonl");
  spec.mutable_data()->set_path("task/train.jsonl");
  spec.set_model("imdb");
  auto no_model = Admission().Evaluation(spec);
  EXPECT_EQ(no_model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(no_model.status().message()), HasSubstr("no served model named"));

  pb::Job running;
  running.set_kind(pb::JOB_KIND_TRAINING);
  ASSERT_TRUE(queue_.Enqueue(running).ok());
  spec.set_job_id("job-1");
  auto no_checkpoint = Admission().Evaluation(spec);
  EXPECT_EQ(no_checkpoint.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(no_checkpoint.status().message()),
              HasSubstr("job_id: job job-1 (queued) has no best or last checkpoint yet"));
}

// Issue 45: a model/data label mismatch failed only at run time. The labels and modality of the
// evaluated job (or served model) are checked against the data's at submission, where the data's
// are known without reading it.
TEST_F(JobAdmissionTest, AnEvaluationWhoseDataCannotMatchTheModelIsRefusedAtSubmission) {
  pb::Job trained;
  trained.set_kind(pb::JOB_KIND_TRAINING);
  trained.mutable_training()->set_modality("bytes");
  trained.add_labels("neg");
  trained.add_labels("pos");
  auto* best = trained.add_checkpoints();
  best->set_kind("best");
  best->set_path(env_.dir() + "/best.tsckpt");
  auto queued = queue_.Enqueue(trained);
  ASSERT_TRUE(queued.ok()) << queued.status();
  const std::string id = queued->id();

  pb::EvaluationSpec spec;
  spec.set_name("eval");
  spec.set_job_id(id);
  spec.mutable_data()->set_format("listops");
  spec.mutable_data()->mutable_generate()->set_count(10);
  auto listops = Admission().Evaluation(spec);
  EXPECT_EQ(listops.status().code(), absl::StatusCode::kFailedPrecondition) << listops.status();
  EXPECT_EQ(listops.status().message(),
            "data: format listops has the labels [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], but job " + id +
                " has the labels [neg, pos]");

  // A folder: its class folders, none of them the job's labels; named relative to the data root.
  std::filesystem::create_directories(env_.dir() + "/data/pets/cat");
  std::filesystem::create_directories(env_.dir() + "/data/pets/dog");
  std::ofstream(env_.dir() + "/data/pets/cat/a.txt") << "meow";
  spec.mutable_data()->Clear();
  spec.mutable_data()->set_format("folder");
  spec.mutable_data()->set_path("pets");
  auto folder = Admission().Evaluation(spec);
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kFailedPrecondition) << folder.status();
  EXPECT_THAT(std::string(folder.status().message()),
              HasSubstr("data: folder \"pets\" has the class folders [cat, dog], but job " + id +
                        " has the labels [neg, pos]"));
  EXPECT_THAT(std::string(folder.status().message()), Not(HasSubstr(env_.dir())));
  std::filesystem::create_directories(env_.dir() + "/data/pets/pos");
  EXPECT_TRUE(Admission().Evaluation(spec).ok());

  // CIFAR-10 is pixels; the job's model takes bytes.
  std::ofstream(env_.dir() + "/data/batch.bin") << std::string(3073, '\0');
  spec.mutable_data()->set_format("cifar10");
  spec.mutable_data()->set_path("batch.bin");
  auto pixels = Admission().Evaluation(spec);
  EXPECT_EQ(pixels.status().code(), absl::StatusCode::kFailedPrecondition) << pixels.status();
  EXPECT_EQ(pixels.status().message(), "data: format cifar10 is pixels, but job " + id +
                                           " takes bytes (the data and the model must agree)");

  // Issue 45: JSON Lines labels are read at submission too (the file's first 8 MiB): "x" is
  // not one of the job's. The message names both label sets and the file as the spec does.
  spec.mutable_data()->set_format("jsonl");
  spec.mutable_data()->set_path("task/train.jsonl");
  auto jsonl = Admission().Evaluation(spec);
  EXPECT_EQ(jsonl.status().code(), absl::StatusCode::kFailedPrecondition) << jsonl.status();
  EXPECT_EQ(jsonl.status().message(),
            "data: task/train.jsonl:1: label \"x\" is not one of the labels of job " + id +
                ": the file has the labels [x], job " + id + " has the labels [neg, pos]");

  // The job's labels, an integer one that indexes them; blank and malformed lines are the
  // reader's to judge (skip_malformed): admitted.
  std::ofstream(env_.dir() + "/data/task/good.jsonl")
      << "{\"text\": \"a\", \"label\": \"pos\"}\n\nnot json\n{\"text\": \"b\", \"label\": 1}\n";
  spec.mutable_data()->set_path("task/good.jsonl");
  EXPECT_TRUE(Admission().Evaluation(spec).ok());
  std::ofstream(env_.dir() + "/data/task/two.jsonl")
      << "{\"text\": \"a\", \"label\": \"pos\"}\n{\"text\": \"b\", \"label\": 2}\n";
  spec.mutable_data()->set_path("task/two.jsonl");
  EXPECT_THAT(std::string(Admission().Evaluation(spec).status().message()),
              HasSubstr("task/two.jsonl:2: label \"2\" is not one of the labels of job"));

  // Past the bound, the rest is checked when the job runs: a bad label after 8 MiB is admitted.
  {
    std::ofstream big(env_.dir() + "/data/task/big.jsonl");
    const std::string line = "{\"text\": \"" + std::string(1000, 'a') + "\", \"label\": \"neg\"}\n";
    for (std::int64_t written = 0; written <= (std::int64_t{8} << 20); written += line.size()) {
      big << line;
    }
    big << "{\"text\": \"a\", \"label\": \"x\"}\n";
  }
  spec.mutable_data()->set_path("task/big.jsonl");
  EXPECT_TRUE(Admission().Evaluation(spec).ok());
}

// Issue 45: a `checkpoint:` target's labels and modality were known only when the job ran. The
// file (up to 64 MiB) is loaded at submission: its labels and modality are checked as a served
// model's, and a file that is no checkpoint is refused naming it as the spec does.
TEST_F(JobAdmissionTest, ACheckpointTargetsLabelsAreCheckedAtSubmission) {
  TaylorShiftEncoderOptions options(16, 1, 2, 64, 3);
  options.mlp_hidden(32);
  TaylorShiftEncoder model(options);
  CheckpointMetadata metadata;
  metadata.modality = "bytes";
  metadata.labels = {"a", "b", "c"};
  ASSERT_TRUE(SaveCheckpoint(env_.dir() + "/data/m.tsckpt", options, metadata, model).ok());

  pb::EvaluationSpec spec;
  spec.set_name("eval");
  spec.set_checkpoint("m.tsckpt");
  spec.mutable_data()->set_format("listops");
  spec.mutable_data()->mutable_generate()->set_count(10);
  auto listops = Admission().Evaluation(spec);
  EXPECT_EQ(listops.status().code(), absl::StatusCode::kFailedPrecondition) << listops.status();
  EXPECT_EQ(listops.status().message(),
            "data: format listops has the labels [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], but checkpoint "
            "\"m.tsckpt\" has the labels [a, b, c]");

  spec.mutable_data()->Clear();
  spec.mutable_data()->set_format("jsonl");
  spec.mutable_data()->set_path("task/train.jsonl");
  auto jsonl = Admission().Evaluation(spec);
  EXPECT_EQ(jsonl.status().code(), absl::StatusCode::kFailedPrecondition) << jsonl.status();
  EXPECT_EQ(jsonl.status().message(),
            "data: task/train.jsonl:1: label \"x\" is not one of the labels of checkpoint "
            "\"m.tsckpt\": the file has the labels [x], checkpoint \"m.tsckpt\" has the labels "
            "[a, b, c]");
  std::ofstream(env_.dir() + "/data/task/abc.jsonl") << "{\"text\": \"t\", \"label\": \"b\"}\n";
  spec.mutable_data()->set_path("task/abc.jsonl");
  EXPECT_TRUE(Admission().Evaluation(spec).ok());

  std::ofstream(env_.dir() + "/data/bad.tsckpt") << "not a checkpoint";
  spec.set_checkpoint("bad.tsckpt");
  auto bad = Admission().Evaluation(spec);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  EXPECT_EQ(bad.status().message(),
            "checkpoint: \"bad.tsckpt\" is not a TaylorShift checkpoint (bad magic)");
}

TEST_F(JobAdmissionTest, NothingIsAdmittedWhenJobsAreDisabled) {
  jobs_.enabled = false;
  EXPECT_EQ(Admission().Training(TinySpec()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Admission().Evaluation(pb::EvaluationSpec()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ts::server
