// The YAML form of job specs on its own: this test links ts_job_contract only (no server
// library, no LibTorch), as tsctl does.
#include "job_contract/job_spec_yaml.h"

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "tests/testing/issue_example_spec.h"

namespace ts {
namespace {

using ::taylorshift::v1::EvaluationSpec;
using ::taylorshift::v1::TrainingSpec;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using ::ts::testing::kIssueExample;
using ::ts::testing::kIssueSplitAlternative;

// Every field of TrainingSpec and of the messages under it, with non-default values.
constexpr char kFullTrainingYaml[] = R"yaml(
name: full-spec-1_a
model:
  embed_dim: 128
  depth: 3
  heads: 4
  mlp_ratio: 2.5
  max_length: 1024
  conv_embed: true
  drop_rate: 0.1
  drop_path: 0.2
  attn_drop: 0.05
init_from: job:abc123
data:
  train:
    format: listops
    path: lists/train.tsv
    generate: {count: 5000, min_length: 100, max_length: 900, seed: 7}
    split: 0.5
    skip_malformed: true
  validation: {format: lra_tsv, path: lists/val.tsv, split: 0.25, skip_malformed: true,
               generate: {count: 3, min_length: 20, max_length: 30, seed: 9}}
optimizer:
  name: lamb
  lr: 0.002
  weight_decay: 0
  warmup_steps: 40
  schedule: cosine
  min_lr_ratio: 0.1
  beta1: 0.8
  beta2: 0.99
  eps: 1.0e-6
batch_size: 32
steps: 400
epochs: 2.5
seed: 0
grad_clip: 0
checkpoint_interval: 50
eval_interval: 25
log_interval: 5
path: efficient
threads: 2
labels: [neg, pos, "3"]
keep_checkpoints: 3
modality: pixels
workers: 2
max_retries: 1
dtype: float64
device: cuda:0
precision: bf16
)yaml";

constexpr char kFullTrainingText[] = R"pb(
  name: "full-spec-1_a"
  model {
    embed_dim: 128
    depth: 3
    heads: 4
    mlp_ratio: 2.5
    max_length: 1024
    conv_embed: true
    drop_rate: 0.1
    drop_path: 0.2
    attn_drop: 0.05
  }
  init_from: "job:abc123"
  data {
    train {
      format: "listops"
      path: "lists/train.tsv"
      generate { count: 5000 min_length: 100 max_length: 900 seed: 7 }
      split: 0.5
      skip_malformed: true
    }
    validation {
      format: "lra_tsv"
      path: "lists/val.tsv"
      split: 0.25
      skip_malformed: true
      generate { count: 3 min_length: 20 max_length: 30 seed: 9 }
    }
  }
  optimizer {
    name: "lamb"
    lr: 0.002
    weight_decay: 0
    warmup_steps: 40
    schedule: "cosine"
    min_lr_ratio: 0.1
    beta1: 0.8
    beta2: 0.99
    eps: 1e-6
  }
  batch_size: 32
  steps: 400
  epochs: 2.5
  seed: 0
  grad_clip: 0
  checkpoint_interval: 50
  eval_interval: 25
  log_interval: 5
  path: ATTENTION_PATH_EFFICIENT
  threads: 2
  labels: [ "neg", "pos", "3" ]
  keep_checkpoints: 3
  modality: "pixels"
  workers: 2
  max_retries: 1
  dtype: "float64"
  device: "cuda:0"
  precision: "bf16"
)pb";

TrainingSpec ParseOrDie(const std::string& yaml) {
  absl::StatusOr<TrainingSpec> spec = ParseTrainingSpecYaml(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status() << "\n" << yaml;
  return spec.ok() ? *spec : TrainingSpec();
}

// Expects INVALID_ARGUMENT whose message starts with "<key>: " and contains `fragment`.
void ExpectStatus(const absl::Status& status, const std::string& key, const std::string& fragment) {
  ASSERT_FALSE(status.ok()) << "accepted; expected " << key << ": " << fragment;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), StartsWith(key + ": "));
  EXPECT_THAT(std::string(status.message()), HasSubstr(fragment));
}

void ExpectParseError(const std::string& yaml, const std::string& key,
                      const std::string& fragment) {
  SCOPED_TRACE(yaml);
  ExpectStatus(ParseTrainingSpecYaml(yaml).status(), key, fragment);
}

bool Equal(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

TEST(JobSpecYamlTest, IssueExampleParses) {
  absl::StatusOr<TrainingSpec> spec = ParseTrainingSpecYaml(kIssueExample);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "filetype");
  EXPECT_EQ(spec->model().embed_dim(), 64u);
  EXPECT_EQ(spec->model().depth(), 2u);
  EXPECT_EQ(spec->model().heads(), 8u);
  EXPECT_EQ(spec->model().mlp_ratio(), 2.0);
  EXPECT_EQ(spec->model().max_length(), 2048u);
  EXPECT_EQ(spec->data().train().format(), "jsonl");
  EXPECT_EQ(spec->data().train().path(), "train.jsonl");
  EXPECT_EQ(spec->data().validation().format(), "jsonl");
  EXPECT_EQ(spec->data().validation().path(), "val.jsonl");
  EXPECT_EQ(spec->optimizer().name(), "adamw");
  EXPECT_EQ(spec->optimizer().lr(), 0.001);
  ASSERT_TRUE(spec->optimizer().has_weight_decay());
  EXPECT_EQ(spec->optimizer().weight_decay(), 0.001);
  EXPECT_EQ(spec->optimizer().warmup_steps(), 20u);
  EXPECT_EQ(spec->batch_size(), 16u);
  EXPECT_EQ(spec->steps(), 300u);
  EXPECT_EQ(spec->epochs(), 0.0);
  ASSERT_TRUE(spec->has_seed());
  EXPECT_EQ(spec->seed(), 1u);
}

TEST(JobSpecYamlTest, IssueAlternativesParse) {
  TrainingSpec split = ParseOrDie(kIssueSplitAlternative);
  EXPECT_EQ(split.data().validation().split(), 0.1);
  EXPECT_EQ(split.epochs(), 3.0);
  EXPECT_EQ(split.steps(), 0u);
}

TEST(JobSpecYamlTest, FullSpecRoundTrip) {
  TrainingSpec expected;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kFullTrainingText, &expected));
  const TrainingSpec parsed = ParseOrDie(kFullTrainingYaml);
  EXPECT_TRUE(Equal(parsed, expected)) << "parsed:\n"
                                       << parsed.DebugString() << "expected:\n"
                                       << expected.DebugString();
  // Zero given explicitly is kept where the proto tracks presence.
  EXPECT_TRUE(parsed.has_seed());
  EXPECT_TRUE(parsed.has_grad_clip());
  EXPECT_TRUE(parsed.optimizer().has_weight_decay());
  // The example covers every field, so a field added to the proto shows up here.
  std::function<void(const google::protobuf::Message&, const std::string&)> all_set =
      [&](const google::protobuf::Message& message, const std::string& path) {
        const google::protobuf::Descriptor& descriptor = *message.GetDescriptor();
        const google::protobuf::Reflection& reflection = *message.GetReflection();
        for (int i = 0; i < descriptor.field_count(); ++i) {
          const google::protobuf::FieldDescriptor* field = descriptor.field(i);
          const std::string at = path + field->name();
          const bool set = field->is_repeated() ? reflection.FieldSize(message, field) > 0
                                                : reflection.HasField(message, field);
          EXPECT_TRUE(set) << at << " is not in kFullTrainingYaml";
          if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE &&
              !field->is_repeated()) {
            all_set(reflection.GetMessage(message, field), at + ".");
          }
        }
      };
  all_set(parsed, "");
}

TEST(JobSpecYamlTest, EmptyValueMeansUnset) {
  const TrainingSpec spec = ParseOrDie("name: a\nmodel:\nsteps:\noptimizer: {lr: }\n");
  EXPECT_FALSE(spec.has_model());
  EXPECT_EQ(spec.steps(), 0u);
  EXPECT_EQ(spec.optimizer().lr(), 0.0);
  EXPECT_TRUE(ParseTrainingSpecYaml("").ok());
}

TEST(JobSpecYamlTest, AttentionPathNames) {
  EXPECT_EQ(ParseOrDie("path: auto\n").path(), taylorshift::v1::ATTENTION_PATH_AUTO);
  EXPECT_EQ(ParseOrDie("path: direct\n").path(), taylorshift::v1::ATTENTION_PATH_DIRECT);
  EXPECT_EQ(ParseOrDie("path: Efficient\n").path(), taylorshift::v1::ATTENTION_PATH_EFFICIENT);
  EXPECT_EQ(ParseOrDie("path: ATTENTION_PATH_SOFTMAX\n").path(),
            taylorshift::v1::ATTENTION_PATH_SOFTMAX);
  ExpectParseError("path: fast\n", "path",
                   "must be one of auto, direct, efficient, softmax; got \"fast\"");
}

TEST(JobSpecYamlTest, RejectsUnknownKeysWithTheirPath) {
  ExpectParseError("optimizer: {foo: 1}\n", "optimizer.foo", "unknown key (expected one of name,");
  ExpectParseError("nmae: x\n", "nmae", "unknown key");
  ExpectParseError("model: {embed: 64}\n", "model.embed", "unknown key");
  ExpectParseError("data: {train: {generate: {cnt: 5}}}\n", "data.train.generate.cnt",
                   "unknown key");
  ExpectParseError("data: {test: {format: jsonl}}\n", "data.test", "unknown key");
  ExpectParseError("steps: 1\nsteps: 2\n", "steps", "duplicate key");
}

TEST(JobSpecYamlTest, RejectsWrongTypes) {
  ExpectParseError("model: {heads: x}\n", "model.heads",
                   "expected a non-negative integer, got \"x\"");
  ExpectParseError("batch_size: -1\n", "batch_size", "expected a non-negative integer, got \"-1\"");
  ExpectParseError("steps: 1.5\n", "steps", "expected a non-negative integer, got \"1.5\"");
  ExpectParseError("steps: [1]\n", "steps", "expected a non-negative integer, got a sequence");
  ExpectParseError("model: {depth: 4294967296}\n", "model.depth",
                   "must be at most 4294967295, got 4294967296");
  ExpectParseError("optimizer: {lr: fast}\n", "optimizer.lr", "expected a number, got \"fast\"");
  ExpectParseError("optimizer: {lr: inf}\n", "optimizer.lr", "expected a finite number");
  ExpectParseError("epochs: nan\n", "epochs", "expected a finite number");
  ExpectParseError("model: {conv_embed: maybe}\n", "model.conv_embed", "expected true or false");
  ExpectParseError("name: {a: 1}\n", "name", "expected a string, got a mapping");
  ExpectParseError("labels: neg\n", "labels", "expected a list of strings, got \"neg\"");
  ExpectParseError("labels: [a, [b]]\n", "labels[1]", "expected a string, got a sequence");
  ExpectParseError("model: 64\n", "model", "expected a mapping, got \"64\"");
  ExpectParseError("- a\n", "(top level)", "expected a mapping");
}

TEST(JobSpecYamlTest, RejectsMalformedYaml) {
  const absl::Status status = ParseTrainingSpecYaml("model: {embed_dim: 64\n").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), StartsWith("invalid YAML: "));
}

TEST(JobSpecYamlTest, EvaluationSpecParses) {
  absl::StatusOr<EvaluationSpec> spec = ParseEvaluationSpecYaml(R"yaml(
name: eval-1
model: imdb
data: {format: folder, path: aclImdb/test, skip_malformed: true}
batch_size: 8
path: direct
threads: 2
)yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "eval-1");
  EXPECT_EQ(spec->target_case(), EvaluationSpec::kModel);
  EXPECT_EQ(spec->model(), "imdb");
  EXPECT_EQ(spec->data().format(), "folder");
  EXPECT_EQ(spec->data().path(), "aclImdb/test");
  EXPECT_TRUE(spec->data().skip_malformed());
  EXPECT_EQ(spec->batch_size(), 8u);
  EXPECT_EQ(spec->path(), taylorshift::v1::ATTENTION_PATH_DIRECT);
  EXPECT_EQ(spec->threads(), 2u);

  absl::StatusOr<EvaluationSpec> by_job = ParseEvaluationSpecYaml(
      "name: e\njob_id: j42\ndata: {format: listops, generate: {count: 10}}\n");
  ASSERT_TRUE(by_job.ok()) << by_job.status();
  EXPECT_EQ(by_job->job_id(), "j42");
  EXPECT_EQ(by_job->data().generate().count(), 10u);
  absl::StatusOr<EvaluationSpec> by_checkpoint =
      ParseEvaluationSpecYaml("name: e\ncheckpoint: ckpt/best.tsckpt\n");
  ASSERT_TRUE(by_checkpoint.ok()) << by_checkpoint.status();
  EXPECT_EQ(by_checkpoint->checkpoint(), "ckpt/best.tsckpt");

  ExpectStatus(ParseEvaluationSpecYaml("model: a\njob_id: b\n").status(), "job_id",
               "conflicts with model (give only one of model, job_id, checkpoint)");
  ExpectStatus(ParseEvaluationSpecYaml("data: {train: {format: jsonl}}\n").status(), "data.train",
               "unknown key");
  ExpectStatus(ParseEvaluationSpecYaml("batch_size: x\n").status(), "batch_size",
               "expected a non-negative integer");
}

}  // namespace
}  // namespace ts
