#include "job_contract/job_spec.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "job_contract/job_spec_yaml.h"
#include "tests/testing/issue_example_spec.h"

namespace ts::job {
namespace {

using ::taylorshift::v1::EvaluationSpec;
using ::taylorshift::v1::TrainingSpec;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int kCores = 4;

using ::ts::testing::kIssueExample;
using ::ts::testing::kIssueSplitAlternative;

TrainingSpec ParseOrDie(const std::string& yaml) {
  absl::StatusOr<TrainingSpec> spec = ParseTrainingSpecYaml(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status() << "\n" << yaml;
  return spec.ok() ? *spec : TrainingSpec();
}

// The issue's example, normalisable as it is.
TrainingSpec IssueSpec() { return ParseOrDie(kIssueExample); }

// Expects INVALID_ARGUMENT whose message starts with "<key>: " and contains `fragment`.
void ExpectStatus(const absl::Status& status, const std::string& key, const std::string& fragment) {
  ASSERT_FALSE(status.ok()) << "accepted; expected " << key << ": " << fragment;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), StartsWith(key + ": "));
  EXPECT_THAT(std::string(status.message()), HasSubstr(fragment));
}

// Normalises the issue example after `edit` and expects the error.
void ExpectNormalizeError(const std::function<void(TrainingSpec&)>& edit, const std::string& key,
                          const std::string& fragment, const SpecRules& jobs = {}) {
  SCOPED_TRACE(key + ": " + fragment);
  TrainingSpec spec = IssueSpec();
  edit(spec);
  ExpectStatus(NormalizeTrainingSpec(&spec, jobs, kCores), key, fragment);
}

bool Equal(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

// ---------------------------------------------------------------------------------------------
// The issue's specs (their YAML form: tests/job_contract/job_spec_yaml_test.cc)

TEST(JobSpecNormalizeTest, IssueExampleNormalizes) {
  TrainingSpec spec = IssueSpec();
  EXPECT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
}

TEST(JobSpecNormalizeTest, IssueAlternativesNormalize) {
  TrainingSpec split = ParseOrDie(kIssueSplitAlternative);
  EXPECT_TRUE(NormalizeTrainingSpec(&split, SpecRules(), kCores).ok());
}

// ---------------------------------------------------------------------------------------------
// Normalisation: defaults

TEST(JobSpecNormalizeTest, FillsTheDocumentedDefaults) {
  TrainingSpec spec = ParseOrDie(R"yaml(
name: minimal
model: {embed_dim: 32, depth: 1, heads: 2, max_length: 128}
data: {train: {format: jsonl, path: t.jsonl}}
steps: 300
)yaml");
  SpecRules jobs;
  jobs.threads_per_job = 3;
  jobs.keep_checkpoints = 5;
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, jobs, kCores).ok());
  EXPECT_EQ(spec.model().mlp_ratio(), 4.0);
  EXPECT_EQ(spec.optimizer().name(), "adamw");
  EXPECT_EQ(spec.optimizer().lr(), 0.001);
  ASSERT_TRUE(spec.optimizer().has_weight_decay());
  EXPECT_EQ(spec.optimizer().weight_decay(), 0.01);
  EXPECT_EQ(spec.optimizer().warmup_steps(), 0u);
  EXPECT_EQ(spec.optimizer().schedule(), "cosine");
  ASSERT_TRUE(spec.optimizer().has_min_lr_ratio());
  EXPECT_EQ(spec.optimizer().min_lr_ratio(), 0.0);
  EXPECT_EQ(spec.optimizer().beta1(), 0.9);
  EXPECT_EQ(spec.optimizer().beta2(), 0.999);
  EXPECT_EQ(spec.optimizer().eps(), 1e-8);
  EXPECT_EQ(spec.batch_size(), 16u);
  ASSERT_TRUE(spec.has_seed());
  EXPECT_EQ(spec.seed(), 1u);
  ASSERT_TRUE(spec.has_grad_clip());
  EXPECT_EQ(spec.grad_clip(), 1.0);
  EXPECT_EQ(spec.log_interval(), 10u);
  EXPECT_EQ(spec.checkpoint_interval(), 30u);
  EXPECT_EQ(spec.eval_interval(), 30u);
  EXPECT_EQ(spec.path(), taylorshift::v1::ATTENTION_PATH_AUTO);
  EXPECT_EQ(spec.threads(), 3u);
  EXPECT_EQ(spec.keep_checkpoints(), 5u);
  EXPECT_EQ(spec.modality(), "bytes");
  EXPECT_FALSE(spec.data().has_validation());

  // A normalised spec normalises to itself.
  TrainingSpec again = spec;
  ASSERT_TRUE(NormalizeTrainingSpec(&again, jobs, kCores).ok());
  EXPECT_TRUE(Equal(again, spec)) << again.DebugString();
}

TEST(JobSpecNormalizeTest, KeepsExplicitZerosWhereTheyMeanSomething) {
  TrainingSpec spec = ParseOrDie(R"yaml(
name: zeros
model: {embed_dim: 32, depth: 1, heads: 2, max_length: 128}
data: {train: {format: jsonl, path: t.jsonl}}
optimizer: {weight_decay: 0, min_lr_ratio: 0, beta1: 0, warmup_steps: 0}
steps: 5
seed: 0
grad_clip: 0
)yaml");
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  EXPECT_EQ(spec.optimizer().weight_decay(), 0.0);
  EXPECT_EQ(spec.optimizer().beta1(), 0.0);  // in [0, 1), so kept, not the default 0.9
  EXPECT_EQ(spec.seed(), 0u);
  EXPECT_EQ(spec.grad_clip(), 0.0);
  // Defaults larger than a short run are capped to its steps.
  EXPECT_EQ(spec.log_interval(), 5u);
  EXPECT_EQ(spec.checkpoint_interval(), 1u);
  EXPECT_EQ(spec.eval_interval(), 1u);
}

TEST(JobSpecNormalizeTest, ModalityFollowsTheTrainingFormat) {
  TrainingSpec spec = IssueSpec();
  spec.mutable_data()->mutable_train()->set_format("cifar10");
  spec.mutable_data()->mutable_train()->set_path("cifar/data_batch_1.bin");
  spec.mutable_data()->clear_validation();
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  EXPECT_EQ(spec.modality(), "pixels");

  TrainingSpec text = IssueSpec();
  ASSERT_TRUE(NormalizeTrainingSpec(&text, SpecRules(), kCores).ok());
  EXPECT_EQ(text.modality(), "bytes");
}

TEST(JobSpecNormalizeTest, ListOpsGeneratorDefaults) {
  TrainingSpec spec = IssueSpec();
  auto* train = spec.mutable_data()->mutable_train();
  train->set_format("listops");
  train->clear_path();
  train->mutable_generate()->set_count(1000);
  spec.mutable_data()->mutable_validation()->Clear();
  spec.mutable_data()->mutable_validation()->set_split(0.1);
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  EXPECT_EQ(spec.data().train().generate().count(), 1000u);
  EXPECT_EQ(spec.data().train().generate().min_length(), 500u);
  EXPECT_EQ(spec.data().train().generate().max_length(), 2000u);
  EXPECT_EQ(spec.data().train().generate().seed(), 1u);
  EXPECT_EQ(spec.data().validation().split(), 0.1);
}

TEST(JobSpecNormalizeTest, InitFromLeavesTheModelEmpty) {
  TrainingSpec spec = IssueSpec();
  spec.clear_model();
  spec.set_init_from("job:7f3a");
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  EXPECT_FALSE(spec.has_model());  // no mlp_ratio default: the checkpoint has the architecture

  spec.set_init_from("runs/base.tsckpt");
  EXPECT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
}

TEST(JobSpecNormalizeTest, ThreadsDefaultStaysWithinTheCap) {
  SpecRules jobs;
  jobs.threads_per_job = 8;
  TrainingSpec spec = IssueSpec();
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, jobs, kCores).ok());
  EXPECT_EQ(spec.threads(), static_cast<std::uint32_t>(kCores));  // max_threads 0 = the cores

  jobs.limits.max_threads = 2;
  spec = IssueSpec();
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, jobs, kCores).ok());
  EXPECT_EQ(spec.threads(), 2u);
}

// ---------------------------------------------------------------------------------------------
// Normalisation: checks (one per rule; each names its key)

TEST(JobSpecNormalizeTest, Name) {
  ExpectNormalizeError([](TrainingSpec& s) { s.clear_name(); }, "name", "required");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_name("my job"); }, "name",
                       "must match [A-Za-z0-9][A-Za-z0-9_-]{0,63}, got \"my job\"");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_name("a/b"); }, "name", "must match");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_name(std::string(65, 'a')); }, "name",
                       "must match");
  TrainingSpec longest = IssueSpec();
  longest.set_name(std::string(64, 'a'));
  EXPECT_TRUE(NormalizeTrainingSpec(&longest, SpecRules(), kCores).ok());
}

// Issue 45: an explicit 0 is an error naming the field, the value and the range; only a key left
// out takes the default (the YAML the user wrote, as tsctl parses it; a gRPC client setting the
// optional field to 0 is the same message).
TEST(JobSpecNormalizeTest, ExplicitZeroIsOutOfRangeNotTheDefault) {
  const std::string base = R"yaml(
name: zeros
data: {train: {format: jsonl, path: t.jsonl}}
)yaml";
  const std::string model = "model: {embed_dim: 32, depth: 1, heads: 2, max_length: 128}\n";
  struct Case {
    std::string yaml;
    std::string key;
    std::string message;
  };
  for (const Case& c : {
           Case{model + "steps: 100\nbatch_size: 0\n", "batch_size",
                "batch_size: 0 is out of range [1, 1024]"},
           Case{model + "steps: 100\nlog_interval: 0\n", "log_interval",
                "log_interval: 0 is out of range [1, steps 100]"},
           Case{model + "steps: 100\ncheckpoint_interval: 0\n", "checkpoint_interval",
                "checkpoint_interval: 0 is out of range [1, steps 100]"},
           Case{model + "epochs: 2\neval_interval: 0\n", "eval_interval",
                "eval_interval: 0 is out of range [1, steps]"},
           Case{model + "steps: 0\n", "steps", "steps: 0 is out of range [1, 1000000]"},
           Case{model + "epochs: 0\n", "epochs", "epochs: must be > 0 and finite, got 0"},
           Case{"model: {embed_dim: 0, depth: 1, heads: 2, max_length: 128}\nsteps: 5\n",
                "model.embed_dim", "model.embed_dim: 0 is out of range [1, 1024]"},
           Case{"model: {embed_dim: 0, depth: 0, heads: 0, max_length: 0}\nsteps: 5\n",
                "model.embed_dim", "model.embed_dim: 0 is out of range [1, 1024]"},
           Case{model + "steps: 5\nthreads: 0\n", "threads", "threads: 0 is out of range [1, 4]"},
           Case{model + "steps: 5\nworkers: 0\n", "workers", "workers: 0 is out of range [1, 8]"},
           Case{model + "steps: 5\nkeep_checkpoints: 0\n", "keep_checkpoints",
                "keep_checkpoints: 0 is out of range [1, "},
           Case{model + "steps: 5\noptimizer: {lr: 0}\n", "optimizer.lr",
                "optimizer.lr: must be > 0 and finite, got 0"},
           Case{model + "steps: 5\noptimizer: {eps: 0}\n", "optimizer.eps",
                "optimizer.eps: must be > 0 and finite, got 0"},
           Case{"model: {embed_dim: 32, depth: 1, heads: 2, max_length: 128, mlp_ratio: 0}\n"
                "steps: 5\n",
                "model.mlp_ratio", "got 0"},
       }) {
    SCOPED_TRACE(c.yaml);
    TrainingSpec spec = ParseOrDie(base + c.yaml);
    ExpectStatus(NormalizeTrainingSpec(&spec, SpecRules(), kCores), c.key, c.message);
  }
  // The same keys left out take their defaults.
  TrainingSpec spec = ParseOrDie(base + model + "steps: 100\n");
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  EXPECT_EQ(spec.batch_size(), 16u);
  EXPECT_EQ(spec.log_interval(), 10u);
  EXPECT_EQ(spec.workers(), 1u);
}

TEST(JobSpecNormalizeTest, ModelOrInitFrom) {
  ExpectNormalizeError([](TrainingSpec& s) { s.clear_model(); }, "model",
                       "required (or init_from)");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_init_from("job:1"); }, "model",
                       "must be empty with init_from");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.clear_model();
        s.mutable_model()->set_drop_rate(0.1);
        s.set_init_from("job:1");
      },
      "model", "must be empty with init_from");
}

TEST(JobSpecNormalizeTest, ModelShape) {
  for (const char* key : {"embed_dim", "depth", "heads", "max_length"}) {
    ExpectNormalizeError(
        [key](TrainingSpec& s) {
          const auto* field = s.model().GetDescriptor()->FindFieldByName(key);
          s.mutable_model()->GetReflection()->SetUInt32(s.mutable_model(), field, 0);
        },
        absl::StrCat("model.", key), "0 is out of range [1, ");
    ExpectNormalizeError(
        [key](TrainingSpec& s) {
          const auto* field = s.model().GetDescriptor()->FindFieldByName(key);
          s.mutable_model()->GetReflection()->ClearField(s.mutable_model(), field);
        },
        absl::StrCat("model.", key), "required (> 0)");
  }
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_model()->set_heads(6); }, "model.heads",
                       "6 does not divide model.embed_dim 64");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.mutable_model()->set_embed_dim(63);
        s.mutable_model()->set_heads(1);
      },
      "model.embed_dim", "must be even");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.mutable_model()->set_embed_dim(66);
        s.mutable_model()->set_heads(2);
        s.mutable_model()->set_conv_embed(true);
      },
      "model.embed_dim", "divisible by 4 with model.conv_embed, got 66");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_model()->set_mlp_ratio(-1); },
                       "model.mlp_ratio", "must be > 0");
}

TEST(JobSpecNormalizeTest, DropRates) {
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_model()->set_drop_rate(1); },
                       "model.drop_rate", "must be in [0, 1), got 1");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_model()->set_drop_path(-0.1); },
                       "model.drop_path", "must be in [0, 1)");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_model()->set_attn_drop(1.5); },
                       "model.attn_drop", "must be in [0, 1)");
}

TEST(JobSpecNormalizeTest, ModelLimits) {
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_model()->set_embed_dim(2048); },
                       "model.embed_dim", "2048 exceeds jobs.limits.max_embed_dim 1024");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_model()->set_depth(49); }, "model.depth",
                       "49 exceeds jobs.limits.max_depth 48");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_model()->set_max_length(70000); },
                       "model.max_length", "70000 exceeds jobs.limits.max_length 65536");
  SpecRules small;
  small.limits.max_length = 1024;
  ExpectNormalizeError([](TrainingSpec&) {}, "model.max_length",
                       "2048 exceeds jobs.limits.max_length 1024", small);
}

TEST(JobSpecNormalizeTest, BatchSizeAndStepLimits) {
  ExpectNormalizeError([](TrainingSpec& s) { s.set_batch_size(5000); }, "batch_size",
                       "5000 exceeds jobs.limits.max_batch_size 1024");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_steps(2000000); }, "steps",
                       "2000000 exceeds jobs.limits.max_steps 1000000");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.clear_steps();
        s.set_epochs(20000);
      },
      "epochs", "exceeds jobs.limits.max_epochs 10000");
}

TEST(JobSpecNormalizeTest, StepsXorEpochs) {
  ExpectNormalizeError([](TrainingSpec& s) { s.set_epochs(2); }, "steps",
                       "give steps or epochs, not both");
  ExpectNormalizeError([](TrainingSpec& s) { s.clear_steps(); }, "steps", "required (or epochs)");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.clear_steps();
        s.set_epochs(-1);
      },
      "epochs", "must be > 0");
}

TEST(JobSpecNormalizeTest, Optimizer) {
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_optimizer()->set_name("sgd"); },
                       "optimizer.name", "must be adamw or lamb, got \"sgd\"");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_optimizer()->set_lr(-0.1); }, "optimizer.lr",
                       "must be > 0 and finite");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.mutable_optimizer()->set_lr(std::numeric_limits<double>::infinity());
      },
      "optimizer.lr", "must be > 0 and finite");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_optimizer()->set_weight_decay(-0.01); },
                       "optimizer.weight_decay", "must be >= 0");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_optimizer()->set_schedule("linear"); },
                       "optimizer.schedule", "must be cosine");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_optimizer()->set_min_lr_ratio(1.5); },
                       "optimizer.min_lr_ratio", "must be in [0, 1]");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_optimizer()->set_beta1(1); },
                       "optimizer.beta1", "must be in [0, 1)");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_optimizer()->set_beta2(-0.5); },
                       "optimizer.beta2", "must be in [0, 1)");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_optimizer()->set_eps(-1e-8); },
                       "optimizer.eps", "must be > 0");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_optimizer()->set_warmup_steps(301); },
                       "optimizer.warmup_steps", "301 exceeds steps 300");
  TrainingSpec lamb = IssueSpec();
  lamb.mutable_optimizer()->set_name("LAMB");
  ASSERT_TRUE(NormalizeTrainingSpec(&lamb, SpecRules(), kCores).ok());
  EXPECT_EQ(lamb.optimizer().name(), "lamb");
}

TEST(JobSpecNormalizeTest, GradClip) {
  ExpectNormalizeError([](TrainingSpec& s) { s.set_grad_clip(-1); }, "grad_clip", "must be >= 0");
}

TEST(JobSpecNormalizeTest, Intervals) {
  ExpectNormalizeError([](TrainingSpec& s) { s.set_eval_interval(301); }, "eval_interval",
                       "301 exceeds steps 300");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_checkpoint_interval(400); },
                       "checkpoint_interval", "400 exceeds steps 300");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_log_interval(1000); }, "log_interval",
                       "1000 exceeds steps 300");
}

TEST(JobSpecNormalizeTest, Threads) {
  ExpectNormalizeError([](TrainingSpec& s) { s.set_threads(5); }, "threads",
                       "5 exceeds the 4 cores (jobs.limits.max_threads 0");
  SpecRules jobs;
  jobs.limits.max_threads = 2;
  ExpectNormalizeError([](TrainingSpec& s) { s.set_threads(3); }, "threads",
                       "3 exceeds jobs.limits.max_threads 2", jobs);
}

TEST(JobSpecNormalizeTest, AttentionPathFromAClient) {
  ExpectNormalizeError(
      [](TrainingSpec& s) { s.set_path(static_cast<taylorshift::v1::AttentionPath>(9)); }, "path",
      "unknown attention path 9");
}

TEST(JobSpecNormalizeTest, TrainingDataRequired) {
  ExpectNormalizeError([](TrainingSpec& s) { s.clear_data(); }, "data.train", "required");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_data()->clear_train(); }, "data.train",
                       "required");
}

TEST(JobSpecNormalizeTest, DataFormats) {
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_data()->mutable_train()->clear_format(); },
                       "data.train.format",
                       "required (one of jsonl, folder, lra_tsv, cifar10, "
                       "listops)");
  ExpectNormalizeError(
      [](TrainingSpec& s) { s.mutable_data()->mutable_train()->set_format("csv"); },
      "data.train.format", "must be one of jsonl, folder, lra_tsv, cifar10, listops; got \"csv\"");
  ExpectNormalizeError(
      [](TrainingSpec& s) { s.mutable_data()->mutable_validation()->set_format("parquet"); },
      "data.validation.format", "got \"parquet\"");
  for (const char* format : {"jsonl", "folder", "lra_tsv", "cifar10"}) {
    TrainingSpec spec = IssueSpec();
    spec.mutable_data()->mutable_train()->set_format(format);
    EXPECT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok()) << format;
  }
}

TEST(JobSpecNormalizeTest, PathOrGenerateByFormat) {
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_data()->mutable_train()->clear_path(); },
                       "data.train.path", "required for format jsonl");
  ExpectNormalizeError(
      [](TrainingSpec& s) { s.mutable_data()->mutable_train()->mutable_generate()->set_count(10); },
      "data.train.generate", "only format listops takes generate");
  ExpectNormalizeError(
      [](TrainingSpec& s) { s.mutable_data()->mutable_train()->set_format("listops"); },
      "data.train.path", "format listops is generated and takes no path");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.mutable_data()->mutable_train()->set_format("listops");
        s.mutable_data()->mutable_train()->clear_path();
      },
      "data.train.generate.count", "required (> 0) for format listops");
}

TEST(JobSpecNormalizeTest, GeneratorRanges) {
  const auto listops = [](std::uint64_t count, std::uint64_t min_length, std::uint64_t max_length) {
    return [=](TrainingSpec& s) {
      auto* train = s.mutable_data()->mutable_train();
      train->set_format("listops");
      train->clear_path();
      // 0: left out (the default); an explicit 0 is its own case below.
      if (count != 0) train->mutable_generate()->set_count(count);
      if (min_length != 0) train->mutable_generate()->set_min_length(min_length);
      if (max_length != 0) train->mutable_generate()->set_max_length(max_length);
    };
  };
  ExpectNormalizeError(listops(100, 3000, 0), "data.train.generate.min_length",
                       "3000 exceeds data.train.generate.max_length 2000");
  ExpectNormalizeError(listops(20000000, 0, 0), "data.train.generate.count",
                       "20000000 exceeds jobs.limits.max_generate_count 10000000");
  ExpectNormalizeError(listops(10, 1, 5), "data.train.generate.max_length", "must be in 10..");
  ExpectNormalizeError(
      [&listops](TrainingSpec& s) {
        listops(10, 0, 0)(s);
        s.mutable_data()->mutable_train()->mutable_generate()->set_max_length(0);
      },
      "data.train.generate.max_length", "must be in 10..1000000, got 0");
  ExpectNormalizeError(
      [&listops](TrainingSpec& s) {
        listops(0, 0, 0)(s);
        s.mutable_data()->mutable_train()->mutable_generate()->set_count(0);
      },
      "data.train.generate.count", "0 is out of range [1, 10000000]");
  SpecRules jobs;
  jobs.limits.max_generate_count = 50;
  ExpectNormalizeError(listops(51, 0, 0), "data.train.generate.count",
                       "51 exceeds jobs.limits.max_generate_count 50", jobs);
}

TEST(JobSpecNormalizeTest, DataPathSyntax) {
  ExpectNormalizeError(
      [](TrainingSpec& s) { s.mutable_data()->mutable_train()->set_path("/etc/passwd"); },
      "data.train.path", "must be relative to the data root, got \"/etc/passwd\"");
  ExpectNormalizeError(
      [](TrainingSpec& s) { s.mutable_data()->mutable_train()->set_path("a/../../b"); },
      "data.train.path", "no \"..\" component");
  ExpectNormalizeError(
      [](TrainingSpec& s) { s.mutable_data()->mutable_validation()->set_path(".."); },
      "data.validation.path", "no \"..\" component");
  // ".." inside a name is not a component.
  TrainingSpec dots = IssueSpec();
  dots.mutable_data()->mutable_train()->set_path("runs/a..b/train.jsonl");
  EXPECT_TRUE(NormalizeTrainingSpec(&dots, SpecRules(), kCores).ok());
}

TEST(JobSpecNormalizeTest, ValidationSourceOrSplit) {
  ExpectNormalizeError(
      [](TrainingSpec& s) { s.mutable_data()->mutable_validation()->set_split(0.1); },
      "data.validation", "either a source (format, path) or split, not both");
  const auto split = [](double fraction) {
    return [fraction](TrainingSpec& s) {
      s.mutable_data()->mutable_validation()->Clear();
      s.mutable_data()->mutable_validation()->set_split(fraction);
    };
  };
  ExpectNormalizeError(split(1.0), "data.validation.split", "must be in (0, 1), got 1");
  ExpectNormalizeError(split(-0.2), "data.validation.split", "must be in (0, 1)");
  ExpectNormalizeError([](TrainingSpec& s) { s.mutable_data()->mutable_train()->set_split(0.1); },
                       "data.train.split", "only data.validation takes a split");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.mutable_data()->mutable_validation()->Clear();
        s.mutable_data()->mutable_validation()->set_skip_malformed(true);
      },
      "data.validation", "needs a source (format, path) or split");
  TrainingSpec empty = IssueSpec();
  empty.mutable_data()->mutable_validation()->Clear();
  ASSERT_TRUE(NormalizeTrainingSpec(&empty, SpecRules(), kCores).ok());
  EXPECT_FALSE(empty.data().has_validation());
}

TEST(JobSpecNormalizeTest, Labels) {
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.add_labels("neg");
        s.add_labels("");
      },
      "labels[1]", "must not be empty");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.add_labels("neg");
        s.add_labels("pos");
        s.add_labels("neg");
      },
      "labels[2]", "duplicate label \"neg\"");
}

TEST(JobSpecNormalizeTest, InitFrom) {
  const auto init_from = [](const std::string& value) {
    return [value](TrainingSpec& s) {
      s.clear_model();
      s.set_init_from(value);
    };
  };
  ExpectNormalizeError(init_from("job:"), "init_from", "must be \"job:<id>\" or a checkpoint path");
  ExpectNormalizeError(init_from("/models/base.tsckpt"), "init_from",
                       "must be relative to the data root, got \"/models/base.tsckpt\"");
  ExpectNormalizeError(init_from("../base.tsckpt"), "init_from", "no \"..\" component");
}

TEST(JobSpecNormalizeTest, Modality) {
  ExpectNormalizeError([](TrainingSpec& s) { s.set_modality("audio"); }, "modality",
                       "must be bytes or pixels, got \"audio\"");
}

// ---------------------------------------------------------------------------------------------
// Finalisation (once the data is loaded)

TEST(JobSpecFinalizeTest, EpochsBecomeSteps) {
  TrainingSpec spec = IssueSpec();
  spec.clear_steps();
  spec.set_epochs(3);
  spec.mutable_optimizer()->set_warmup_steps(0);
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  EXPECT_EQ(spec.steps(), 0u);  // not known yet
  ASSERT_TRUE(FinalizeTrainingSpec(&spec, 1000, SpecRules()).ok());
  EXPECT_EQ(spec.steps(), 188u);  // ceil(3 · 1000 / 16) = ceil(187.5)
  EXPECT_EQ(spec.epochs(), 3.0);
  EXPECT_EQ(spec.checkpoint_interval(), 18u);
  EXPECT_EQ(spec.eval_interval(), 18u);
  EXPECT_EQ(spec.log_interval(), 10u);

  // Idempotent.
  TrainingSpec again = spec;
  ASSERT_TRUE(FinalizeTrainingSpec(&again, 1000, SpecRules()).ok());
  EXPECT_TRUE(Equal(again, spec));
}

TEST(JobSpecFinalizeTest, FractionalEpochsRoundUpButNotForBinaryNoise) {
  TrainingSpec spec = IssueSpec();
  spec.clear_steps();
  spec.set_epochs(0.3);  // 0.3 · 10 = 3.0000000000000004 in binary
  spec.set_batch_size(1);
  spec.mutable_optimizer()->set_warmup_steps(0);
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  ASSERT_TRUE(FinalizeTrainingSpec(&spec, 10, SpecRules()).ok());
  EXPECT_EQ(spec.steps(), 3u);
  EXPECT_EQ(spec.checkpoint_interval(), 1u);
  EXPECT_EQ(spec.log_interval(), 3u);  // capped to steps

  TrainingSpec tiny = IssueSpec();
  tiny.clear_steps();
  tiny.set_epochs(0.01);
  tiny.mutable_optimizer()->set_warmup_steps(0);
  ASSERT_TRUE(NormalizeTrainingSpec(&tiny, SpecRules(), kCores).ok());
  ASSERT_TRUE(FinalizeTrainingSpec(&tiny, 5, SpecRules()).ok());
  EXPECT_EQ(tiny.steps(), 1u);
}

TEST(JobSpecFinalizeTest, ExplicitIntervalsAreKept) {
  TrainingSpec spec = IssueSpec();
  spec.clear_steps();
  spec.set_epochs(1);
  spec.set_checkpoint_interval(50);
  spec.set_eval_interval(500);  // longer than the run: capped
  spec.mutable_optimizer()->set_warmup_steps(0);
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  ASSERT_TRUE(FinalizeTrainingSpec(&spec, 1600, SpecRules()).ok());
  EXPECT_EQ(spec.steps(), 100u);
  EXPECT_EQ(spec.checkpoint_interval(), 50u);
  EXPECT_EQ(spec.eval_interval(), 100u);
}

TEST(JobSpecFinalizeTest, StepsFromEpochsAreLimited) {
  TrainingSpec spec = IssueSpec();
  spec.clear_steps();
  spec.set_epochs(100);
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  SpecRules jobs;
  jobs.limits.max_steps = 1000;
  ExpectStatus(FinalizeTrainingSpec(&spec, 1600, jobs), "epochs",
               "are 10000 steps, more than jobs.limits.max_steps 1000");
}

TEST(JobSpecFinalizeTest, WarmupMustFitTheStepsFromEpochs) {
  TrainingSpec spec = IssueSpec();  // warmup_steps: 20
  spec.clear_steps();
  spec.set_epochs(1);
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  ExpectStatus(FinalizeTrainingSpec(&spec, 160, SpecRules()), "optimizer.warmup_steps",
               "20 exceeds the 10 steps");
}

TEST(JobSpecFinalizeTest, NeedsTrainingExamples) {
  TrainingSpec spec = IssueSpec();
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  ExpectStatus(FinalizeTrainingSpec(&spec, 0, SpecRules()), "data.train", "no training examples");
}

// ---------------------------------------------------------------------------------------------
// Evaluation specs

EvaluationSpec EvalSpec() {
  absl::StatusOr<EvaluationSpec> spec =
      ParseEvaluationSpecYaml("name: e\nmodel: imdb\ndata: {format: jsonl, path: test.jsonl}\n");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : EvaluationSpec();
}

void ExpectEvalError(const std::function<void(EvaluationSpec&)>& edit, const std::string& key,
                     const std::string& fragment, const SpecRules& jobs = {}) {
  SCOPED_TRACE(key + ": " + fragment);
  EvaluationSpec spec = EvalSpec();
  edit(spec);
  ExpectStatus(NormalizeEvaluationSpec(&spec, jobs, kCores), key, fragment);
}

TEST(JobSpecNormalizeTest, Precision) {
  TrainingSpec spec = IssueSpec();
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  EXPECT_EQ(spec.precision(), "fp32");
  spec = IssueSpec();
  spec.set_precision("bf16");
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  ExpectNormalizeError([](TrainingSpec& s) { s.set_precision("fp16"); }, "precision",
                       "must be fp32 or bf16, got \"fp16\"");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.set_precision("bf16");
        s.set_dtype("float64");
      },
      "precision", "needs dtype float32, got float64");
}

// `device`: cpu by default, cuda normalised to cuda:0, an index only below the CUDA devices the
// server sees (FAILED_PRECONDITION, naming what it sees).
TEST(JobSpecNormalizeTest, Device) {
  TrainingSpec spec = IssueSpec();
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  EXPECT_EQ(spec.device(), "cpu");

  SpecRules one_gpu;
  one_gpu.cuda_devices = 1;
  spec = IssueSpec();
  spec.set_device("cuda");
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, one_gpu, kCores).ok());
  EXPECT_EQ(spec.device(), "cuda:0");

  for (const std::string device : {"cuda", "cuda:0"}) {
    spec = IssueSpec();
    spec.set_device(device);
    const absl::Status status = NormalizeTrainingSpec(&spec, SpecRules(), kCores);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("device: cuda:0 asked for, but this server sees no CUDA device"));
  }
  spec = IssueSpec();
  spec.set_device("cuda:1");
  const absl::Status second = NormalizeTrainingSpec(&spec, one_gpu, kCores);
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  EXPECT_THAT(std::string(second.message()), HasSubstr("sees 1 CUDA device(s)"));

  for (const std::string bad : {"gpu", "cuda:", "cuda:01", "cuda:-1", "cuda:64", "CPU"}) {
    ExpectNormalizeError([&bad](TrainingSpec& s) { s.set_device(bad); }, "device",
                         "must be cpu, cuda or cuda:N, got", one_gpu);
  }

  // Several CUDA ranks: one device each from the spec's own on, all-reduced over NCCL; a build
  // without NCCL, or too few devices, is FAILED_PRECONDITION naming what the server has.
  const auto ranks = [&](const std::string& device, SpecRules rules) {
    spec = IssueSpec();
    spec.set_device(device);
    spec.set_workers(2);
    return NormalizeTrainingSpec(&spec, rules, kCores);
  };
  const absl::Status no_nccl = ranks("cuda", one_gpu);
  EXPECT_EQ(no_nccl.code(), absl::StatusCode::kFailedPrecondition) << no_nccl;
  EXPECT_THAT(std::string(no_nccl.message()),
              HasSubstr("workers: 2 ranks from cuda:0: this server's build has no NCCL backend"));
  SpecRules two_gpus = one_gpu;
  two_gpus.cuda_data_parallel = true;
  const absl::Status too_few = ranks("cuda", two_gpus);
  EXPECT_EQ(too_few.code(), absl::StatusCode::kFailedPrecondition) << too_few;
  EXPECT_THAT(std::string(too_few.message()),
              HasSubstr("take one device each, up to cuda:1, but this server sees 1 CUDA"));
  two_gpus.cuda_devices = 2;
  EXPECT_TRUE(ranks("cuda", two_gpus).ok());
  EXPECT_EQ(ranks("cuda:1", two_gpus).code(), absl::StatusCode::kFailedPrecondition);
  two_gpus.cuda_devices = 3;
  EXPECT_TRUE(ranks("cuda:1", two_gpus).ok());
}

TEST(JobSpecTest, RankDevice) {
  EXPECT_EQ(RankDevice("cpu", 3), "cpu");
  EXPECT_EQ(RankDevice("cuda:0", 0), "cuda:0");
  EXPECT_EQ(RankDevice("cuda:0", 1), "cuda:1");
  EXPECT_EQ(RankDevice("cuda:2", 3), "cuda:5");
}

TEST(EvaluationSpecNormalizeTest, Defaults) {
  EvaluationSpec spec = EvalSpec();
  SpecRules jobs;
  jobs.threads_per_job = 2;
  ASSERT_TRUE(NormalizeEvaluationSpec(&spec, jobs, kCores).ok());
  EXPECT_EQ(spec.batch_size(), 16u);
  EXPECT_EQ(spec.threads(), 2u);
  EXPECT_EQ(spec.path(), taylorshift::v1::ATTENTION_PATH_AUTO);
  EXPECT_EQ(spec.device(), "cpu");
  jobs.cuda_devices = 1;
  spec.set_device("cuda");
  ASSERT_TRUE(NormalizeEvaluationSpec(&spec, jobs, kCores).ok());
  EXPECT_EQ(spec.device(), "cuda:0");
  jobs.cuda_devices = 0;
  spec.set_device("cuda:0");
  EXPECT_EQ(NormalizeEvaluationSpec(&spec, jobs, kCores).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(EvaluationSpecNormalizeTest, Checks) {
  ExpectEvalError([](EvaluationSpec& s) { s.clear_name(); }, "name", "required");
  ExpectEvalError([](EvaluationSpec& s) { s.clear_model(); }, "model",
                  "required: give one of model, job_id, checkpoint");
  ExpectEvalError([](EvaluationSpec& s) { s.set_model("a b"); }, "model",
                  "must be a served model's name");
  ExpectEvalError([](EvaluationSpec& s) { s.set_job_id(""); }, "job_id", "must not be empty");
  ExpectEvalError([](EvaluationSpec& s) { s.set_checkpoint("/x.tsckpt"); }, "checkpoint",
                  "must be relative to the data root");
  ExpectEvalError([](EvaluationSpec& s) { s.clear_data(); }, "data", "required");
  ExpectEvalError([](EvaluationSpec& s) { s.mutable_data()->set_split(0.2); }, "data.split",
                  "evaluation data must be a source");
  ExpectEvalError([](EvaluationSpec& s) { s.mutable_data()->set_path("../secret.jsonl"); },
                  "data.path", "no \"..\" component");
  ExpectEvalError([](EvaluationSpec& s) { s.mutable_data()->set_format("xml"); }, "data.format",
                  "must be one of");
  ExpectEvalError([](EvaluationSpec& s) { s.set_batch_size(2000); }, "batch_size",
                  "2000 exceeds jobs.limits.max_batch_size 1024");
  ExpectEvalError([](EvaluationSpec& s) { s.set_threads(64); }, "threads",
                  "64 exceeds the 4 cores");
  ExpectEvalError([](EvaluationSpec& s) { s.set_batch_size(0); }, "batch_size",
                  "0 is out of range [1, 1024]");
  ExpectEvalError([](EvaluationSpec& s) { s.set_threads(0); }, "threads",
                  "0 is out of range [1, 4]");
  ExpectEvalError(
      [](EvaluationSpec& s) { s.set_path(static_cast<taylorshift::v1::AttentionPath>(-1)); },
      "path", "unknown attention path");
}

}  // namespace
}  // namespace ts::job

namespace ts::job {
namespace {

TEST(JobSpecWorkersTest, WorkersRetriesAndDtypeAreDefaultedAndChecked) {
  TrainingSpec spec = IssueSpec();
  ASSERT_TRUE(NormalizeTrainingSpec(&spec, SpecRules(), kCores).ok());
  EXPECT_EQ(spec.workers(), 1u);
  EXPECT_EQ(spec.max_retries(), 0u);
  EXPECT_EQ(spec.dtype(), "float32");
  ExpectNormalizeError(
      [](TrainingSpec& s) {
        s.set_batch_size(10);
        s.set_workers(4);
      },
      "batch_size", "not divisible by workers 4");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_workers(9); }, "workers",
                       "exceeds jobs.limits.max_workers 8");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_max_retries(11); }, "max_retries",
                       "exceeds jobs.limits.max_retries 10");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_dtype("bfloat16"); }, "dtype",
                       "must be float32 or float64, got \"bfloat16\"");
  ExpectNormalizeError([](TrainingSpec& s) { s.set_name(std::string(5000, '!')); }, "name",
                       "(5000 bytes)");
}

}  // namespace
}  // namespace ts::job
