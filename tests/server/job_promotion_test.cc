// CheckpointPromoter: a job's best checkpoint copied under models/, served, recorded and
// served again after a restart; the accuracy guard; refusals before anything is served.
#include "server/jobs/job_promotion.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "common/file_io.h"
#include "model/checkpoints/checkpoint.h"
#include "model/networks/encoder.h"
#include "server/jobs/checkpoint_download.h"
#include "server/jobs/job_queue.h"
#include "server/serving/model_registry.h"
#include "tests/testing/encoder_testing.h"
#include "tests/testing/job_testing.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

void WriteCheckpoint(const std::string& path, std::uint64_t seed, const std::string& accuracy) {
  TaylorShiftEncoderOptions options(16, 1, 2, 64, 3);
  options.mlp_hidden(32);
  TaylorShiftEncoder model(options);
  ts::testing::RandomizeParameters(model, seed);
  CheckpointMetadata metadata;
  metadata.modality = "bytes";
  metadata.labels = {"a", "b", "c"};
  if (!accuracy.empty()) metadata.provenance["validation_accuracy"] = accuracy;
  ASSERT_TRUE(SaveCheckpoint(path, options, metadata, model).ok());
}

class CheckpointPromoterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(env_.dir() + "/data");
    auto root = DataRoot::Create(env_.dir() + "/data");
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = std::make_unique<DataRoot>(*root);
    resolver_ = std::make_unique<CheckpointResolver>(root_.get(), &queue_);
    promoter_ = MakePromoter(&registry_);
  }
  std::unique_ptr<CheckpointPromoter> MakePromoter(ModelRegistry* registry) {
    CheckpointPromoterOptions options;
    options.models_dir = env_.dir() + "/models";
    options.promoted_model_defaults.device = "cpu";
    options.on_model_served = [this](const std::string& name) { served_.push_back(name); };
    return std::make_unique<CheckpointPromoter>(options, resolver_.get(), registry,
                                                &env_.promotions(), env_.context());
  }
  // A finished training job whose best checkpoint is `path`.
  std::string JobWithBest(const std::string& path) {
    pb::Job job;
    job.set_kind(pb::JOB_KIND_TRAINING);
    job.set_state(pb::JOB_STATE_SUCCEEDED);
    auto* best = job.add_checkpoints();
    best->set_kind("best");
    best->set_path(path);
    auto stored = env_.jobs().CreateJob(job);
    EXPECT_TRUE(stored.ok());
    return stored->id();
  }

  ts::testing::JobTestContext env_;
  JobQueue queue_{JobQueueOptions{10, 0}, &env_.jobs(), env_.context()};
  std::unique_ptr<DataRoot> root_;
  std::unique_ptr<CheckpointResolver> resolver_;
  ModelRegistry registry_;
  std::unique_ptr<CheckpointPromoter> promoter_;
  std::vector<std::string> served_;
};

TEST_F(CheckpointPromoterTest, AJobsBestCheckpointIsCopiedServedRecordedAndRestored) {
  const std::string best = env_.dir() + "/best.tsckpt";
  WriteCheckpoint(best, 1, "0.75");
  const std::string id = JobWithBest(best);
  pb::PromoteCheckpointRequest request;
  request.set_model("news");
  request.set_job_id(id);
  auto promotion = promoter_->Promote(request);
  ASSERT_TRUE(promotion.ok()) << promotion.status();
  ASSERT_NE(promotion->model, nullptr);
  EXPECT_TRUE(promotion->previous_version.empty());
  EXPECT_EQ(promotion->validation_accuracy, 0.75);
  const std::string version = promotion->model->version();
  const std::string copy = env_.dir() + "/models/news/" + version + ".tsckpt";
  EXPECT_TRUE(fs::exists(copy));
  EXPECT_EQ(registry_.Find("news"), promotion->model);
  EXPECT_EQ(served_, std::vector<std::string>{"news"});

  auto history = env_.promotions().PromotionHistory("news");
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 1u);
  EXPECT_EQ((*history)[0].version, version);
  EXPECT_EQ((*history)[0].checkpoint, copy);
  EXPECT_EQ((*history)[0].source, "job:" + id + ":best");
  EXPECT_EQ((*history)[0].time_ms, absl::ToUnixMillis(env_.clock().Now()));

  // After a restart: a fresh registry serves the promoted version again.
  ModelRegistry restarted;
  MakePromoter(&restarted)->RestorePromotions();
  ASSERT_NE(restarted.Find("news"), nullptr);
  EXPECT_EQ(restarted.Find("news")->version(), version);
  EXPECT_TRUE(env_.Logged("restored from promotion (job:" + id + ":best)"));
}

// DownloadCheckpoint's server side: the file a served version came from, read in chunks with
// the header the stream starts with.
TEST_F(CheckpointPromoterTest, AServedVersionsCheckpointIsReadInChunksWithItsHeader) {
  const std::string best = env_.dir() + "/best.tsckpt";
  WriteCheckpoint(best, 4, "");
  pb::PromoteCheckpointRequest request;
  request.set_model("news");
  request.set_job_id(JobWithBest(best));
  auto promotion = promoter_->Promote(request);
  ASSERT_TRUE(promotion.ok()) << promotion.status();

  auto served = promoter_->ServedCheckpointOf("news");
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->version, promotion->model->version());
  auto bytes = ReadFile(served->path);
  ASSERT_TRUE(bytes.ok());
  auto reader = CheckpointFileReader::Open(served->path, "checkpoint", "model:news", "news");
  ASSERT_TRUE(reader.ok()) << reader.status();
  const pb::CheckpointHeader& header = (*reader)->header();
  EXPECT_EQ(header.version(), CheckpointVersion(*bytes));
  EXPECT_EQ(header.version(), served->version);
  EXPECT_EQ(header.size_bytes(), bytes->size());
  EXPECT_EQ(header.crc32(), Crc32(bytes->data(), bytes->size()));
  EXPECT_EQ(header.source(), "model:news");
  EXPECT_EQ(header.file_name(), "news-" + served->version + ".tsckpt");
  std::string read;
  for (int i = 0; i < 100000; ++i) {
    auto chunk = (*reader)->Next(1000);
    ASSERT_TRUE(chunk.ok()) << chunk.status();
    if (chunk->empty()) break;
    EXPECT_LE(chunk->size(), 1000u);
    read += *chunk;
  }
  EXPECT_EQ(read, *bytes);

  auto unknown = promoter_->ServedCheckpointOf("sports");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("\"sports\" is not served (news)"));
  EXPECT_EQ(CheckpointFileReader::Open(env_.dir() + "/missing.tsckpt", "checkpoint", "x", "x")
                .status()
                .code(),
            absl::StatusCode::kNotFound);

  pb::DownloadCheckpointRequest download;
  EXPECT_THAT(ValidateDownloadRequest(download).message(),
              HasSubstr("source: give job_id or model"));
  download.set_model("news");
  EXPECT_TRUE(ValidateDownloadRequest(download).ok());
  download.set_chunk_bytes((1 << 20) + 1);
  EXPECT_THAT(ValidateDownloadRequest(download).message(), HasSubstr("chunk_bytes: at most"));
  download.set_chunk_bytes(0);
  for (int i = 0; i < 17; ++i) download.add_if_none_match("v");
  EXPECT_THAT(ValidateDownloadRequest(download).message(), HasSubstr("if_none_match: at most 16"));
}

TEST_F(CheckpointPromoterTest, TheAccuracyGuardKeepsABetterServedVersion) {
  const std::string good = env_.dir() + "/data/good.tsckpt";
  const std::string worse = env_.dir() + "/data/worse.tsckpt";
  WriteCheckpoint(good, 1, "0.8");
  WriteCheckpoint(worse, 2, "0.6");
  pb::PromoteCheckpointRequest request;
  request.set_model("news");
  request.set_checkpoint("good.tsckpt");
  auto first = promoter_->Promote(request);
  ASSERT_TRUE(first.ok()) << first.status();

  request.set_checkpoint("worse.tsckpt");
  request.set_require_at_least_current_accuracy(true);
  auto refused = promoter_->Promote(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the candidate's validation accuracy 0.6000 is below the served "
                        "version's 0.8000"));
  EXPECT_EQ(registry_.Find("news")->version(), first->model->version());

  request.set_require_at_least_current_accuracy(false);
  auto replaced = promoter_->Promote(request);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(replaced->previous_version, first->model->version());
  EXPECT_EQ(replaced->previous_validation_accuracy, 0.8);
  EXPECT_EQ(env_.promotions().PromotionHistory("news")->size(), 2u);
}

TEST_F(CheckpointPromoterTest, BadRequestsAreRefusedBeforeAnythingIsServed) {
  pb::PromoteCheckpointRequest request;
  request.set_model("no spaces allowed");
  request.set_checkpoint("x.tsckpt");
  EXPECT_EQ(promoter_->Promote(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_model("news");
  request.clear_checkpoint();
  EXPECT_EQ(promoter_->Promote(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_job_id("job-5");
  auto unknown = promoter_->Promote(request);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("job_id: "));
  EXPECT_EQ(registry_.Find("news"), nullptr);
  EXPECT_TRUE(served_.empty());
}

// Issue 41: ".." wrote the checkpoint to state/ outside state/models/, and a service's name was
// then answered by grpc.health.v1 as if it were the model.
TEST_F(CheckpointPromoterTest, PathAndServiceNamesAreRefusedAndNothingIsWritten) {
  const std::string good = env_.dir() + "/data/good.tsckpt";
  WriteCheckpoint(good, 1, "0.8");
  pb::PromoteCheckpointRequest request;
  request.set_checkpoint("good.tsckpt");
  for (const std::string& name : std::vector<std::string>{
           "", ".", "..", "../x", "a/b", ".hidden", "-flag", "taylorshift.v1.Jobs",
           "grpc.health.v1.Health", "v1.2", std::string(65, 'a')}) {
    request.set_model(name);
    const auto refused = promoter_->Promote(request);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr("model: must match [A-Za-z0-9][A-Za-z0-9_-]{0,63}"))
        << name;
  }
  EXPECT_FALSE(fs::exists(env_.dir() + "/models"));
  EXPECT_TRUE(registry_.List().empty());
  EXPECT_TRUE(served_.empty());
  for (const std::string& name :
       std::vector<std::string>{"a", "source-lang", "listops_small", "A-1", std::string(64, 'z')}) {
    request.set_model(name);
    const auto promoted = promoter_->Promote(request);
    EXPECT_TRUE(promoted.ok()) << name << ": " << promoted.status();
  }
}

// A promotion recorded under a name the rule now refuses is not served again after a restart.
TEST_F(CheckpointPromoterTest, RecordedPromotionsUnderRefusedNamesAreNotRestored) {
  const std::string path = env_.dir() + "/models/x.tsckpt";
  fs::create_directories(env_.dir() + "/models");
  WriteCheckpoint(path, 1, "0.5");
  for (const std::string name : {"..", "taylorshift.v1.Jobs", "ok"}) {
    PromotionRecord record;
    record.model = name;
    record.version = "v";
    record.checkpoint = path;
    record.source = "checkpoint:x.tsckpt";
    ASSERT_TRUE(env_.promotions().RecordPromotion(record).ok());
  }
  promoter_->RestorePromotions();
  EXPECT_EQ(registry_.Find(".."), nullptr);
  EXPECT_EQ(registry_.Find("taylorshift.v1.Jobs"), nullptr);
  EXPECT_NE(registry_.Find("ok"), nullptr);
  EXPECT_EQ(served_, std::vector<std::string>{"ok"});
  EXPECT_TRUE(env_.Logged("promoted model \"..\" version v not restored"));
}

}  // namespace
}  // namespace ts::server
