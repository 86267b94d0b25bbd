// CheckpointPromoter: a job's best checkpoint copied under models/, served, recorded and
// served again after a restart; the accuracy guard; refusals before anything is served.
#include "server/jobs/job_promotion.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/file_io.h"
#include "model/checkpoints/checkpoint.h"
#include "model/networks/encoder.h"
#include "server/jobs/checkpoint_download.h"
#include "server/jobs/job_queue.h"
#include "server/serving/auth.h"
#include "server/serving/inference_core.h"
#include "server/serving/model_registry.h"
#include "server/serving/model_swap.h"
#include "tests/testing/encoder_testing.h"
#include "tests/testing/job_testing.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

void WriteCheckpoint(const std::string& path, std::uint64_t seed, const std::string& accuracy,
                     const std::vector<std::string>& labels = {"a", "b", "c"},
                     std::int64_t max_length = 64) {
  TaylorShiftEncoderOptions options(16, 1, 2, max_length, static_cast<std::int64_t>(labels.size()));
  options.mlp_hidden(32);
  TaylorShiftEncoder model(options);
  ts::testing::RandomizeParameters(model, seed);
  CheckpointMetadata metadata;
  metadata.modality = "bytes";
  metadata.labels = labels;
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
    options.promoted_model_defaults.batching.max_queue_delay = absl::ZeroDuration();
    options.configured_models = configured_;
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

  // Serves `name` from `checkpoint` as a configured model would be (as the server does before
  // RestorePromotions), and gives the promoters made from now on its configuration.
  std::string Configure(ModelRegistry* registry, const std::string& name,
                        const std::string& checkpoint) {
    ModelConfig config;
    config.name = name;
    config.checkpoint = checkpoint;
    config.device = "cpu";
    config.batching.max_queue_delay = absl::ZeroDuration();
    auto model = ServedModel::Load(config, &env_.metrics(), &env_.clock());
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return "";
    registry->Put(*model);
    configured_ = {config};
    return (*model)->version();
  }
  pb::PromoteCheckpointRequest FromCheckpoint(const std::string& model, const std::string& file) {
    pb::PromoteCheckpointRequest request;
    request.set_model(model);
    request.set_checkpoint(file);
    return request;
  }

  ts::testing::JobTestContext env_;
  std::vector<ModelConfig> configured_;
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

// Issue 45: a checkpoint of another task (labels, their order, max length) is refused naming each
// difference, unless forced; a new name has no guard.
TEST_F(CheckpointPromoterTest, TheTaskGuardNamesEachDifferenceAndForceOverridesIt) {
  WriteCheckpoint(env_.dir() + "/data/abc.tsckpt", 1, "0.8");
  WriteCheckpoint(env_.dir() + "/data/digits.tsckpt", 2, "0.9",
                  {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}, 32);
  WriteCheckpoint(env_.dir() + "/data/cba.tsckpt", 3, "0.9", {"c", "b", "a"});
  ASSERT_TRUE(promoter_->Promote(FromCheckpoint("news", "abc.tsckpt")).ok());
  const std::string served = registry_.Find("news")->version();

  auto refused = promoter_->Promote(FromCheckpoint("news", "digits.tsckpt"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("answers another task than the candidate: labels differ: served [a, b, "
                        "c], candidate [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]; max length differs: served "
                        "64, candidate 32; pass force to replace it"));
  auto reordered = promoter_->Promote(FromCheckpoint("news", "cba.tsckpt"));
  EXPECT_THAT(std::string(reordered.status().message()),
              HasSubstr("labels differ: served [a, b, c], candidate [c, b, a]; pass force"));
  EXPECT_EQ(registry_.Find("news")->version(), served);
  EXPECT_EQ(env_.promotions().PromotionHistory("news")->size(), 1u);

  // The input kind, the check serving replicas make too (promotion_follower.cc).
  CheckpointMetadata bytes;
  bytes.modality = "bytes";
  bytes.labels = {"a", "b"};
  CheckpointMetadata pixels = bytes;
  pixels.modality = "pixels";
  EXPECT_THAT(TaskDifferences(bytes, pixels),
              ::testing::ElementsAre("modality differs: served bytes, candidate pixels"));
  EXPECT_TRUE(TaskDifferences(bytes, bytes, 64, 64).empty());
  EXPECT_TRUE(TaskDifferences(bytes, bytes, 64, 0).empty());

  // A new name: nothing to compare with.
  EXPECT_TRUE(promoter_->Promote(FromCheckpoint("digits", "digits.tsckpt")).ok());

  auto forced_request = FromCheckpoint("news", "digits.tsckpt");
  forced_request.set_force(true);
  auto forced = promoter_->Promote(forced_request, "token:0123456789ab");
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_EQ(forced->previous_version, served);
  EXPECT_EQ(registry_.Find("news")->metadata().labels.size(), 10u);
  auto history = env_.promotions().PromotionHistory("news");
  ASSERT_EQ(history->size(), 2u);
  EXPECT_TRUE((*history)[1].forced);
  EXPECT_FALSE((*history)[0].forced);
  EXPECT_EQ((*history)[1].actor, "token:0123456789ab");
  EXPECT_EQ((*history)[0].actor, "anonymous");
}

// Issue 45: rollback serves the previous version, then the configuration's checkpoint; each
// rollback is recorded (who, what it serves again) and a restart serves what it left.
TEST_F(CheckpointPromoterTest, RollbackReturnsToThePreviousVersionThenTheConfiguredCheckpoint) {
  WriteCheckpoint(env_.dir() + "/data/config.tsckpt", 1, "");
  WriteCheckpoint(env_.dir() + "/v1.tsckpt", 2, "0.7");
  WriteCheckpoint(env_.dir() + "/data/v2.tsckpt", 3, "0.8");
  const std::string configured = Configure(&registry_, "news", env_.dir() + "/data/config.tsckpt");
  promoter_ = MakePromoter(&registry_);

  auto nothing = promoter_->Rollback("news");
  EXPECT_EQ(nothing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(nothing.status().message()),
              HasSubstr("model \"news\": nothing to roll back to (it was never promoted)"));

  pb::PromoteCheckpointRequest from_job;
  from_job.set_model("news");
  const std::string job = JobWithBest(env_.dir() + "/v1.tsckpt");
  from_job.set_job_id(job);
  auto v1 = promoter_->Promote(from_job, "cert:CN=alice");
  ASSERT_TRUE(v1.ok()) << v1.status();
  auto v2 = promoter_->Promote(FromCheckpoint("news", "v2.tsckpt"), "token:aaaaaaaaaaaa");
  ASSERT_TRUE(v2.ok()) << v2.status();

  auto back = promoter_->Rollback("news", "token:bbbbbbbbbbbb");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->model->version(), v1->model->version());
  EXPECT_EQ(back->previous_version, v2->model->version());
  EXPECT_EQ(back->validation_accuracy, 0.7);
  EXPECT_EQ(registry_.Find("news"), back->model);
  // The promotion follower downloads what the jobs server serves: the rolled-back file.
  EXPECT_EQ(promoter_->ServedCheckpointOf("news")->version, v1->model->version());
  EXPECT_EQ(promoter_->ServedCheckpointOf("news")->path, v1->model->config().checkpoint);
  {
    ModelRegistry restarted;
    Configure(&restarted, "news", env_.dir() + "/data/config.tsckpt");
    MakePromoter(&restarted)->RestorePromotions();
    EXPECT_EQ(restarted.Find("news")->version(), v1->model->version());
  }

  auto to_config = promoter_->Rollback("news");
  ASSERT_TRUE(to_config.ok()) << to_config.status();
  EXPECT_EQ(to_config->model->version(), configured);
  EXPECT_EQ(to_config->previous_version, v1->model->version());
  EXPECT_EQ(promoter_->ServedCheckpointOf("news")->path, env_.dir() + "/data/config.tsckpt");
  auto again = promoter_->Rollback("news");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()),
              HasSubstr("nothing to roll back to (it already serves its configured checkpoint"));
  EXPECT_EQ(registry_.Find("news")->version(), configured);

  auto history = promoter_->History("news");
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->size(), 4u);
  EXPECT_EQ((*history)[0].kind, "promote");
  EXPECT_EQ((*history)[0].job_id, job);
  EXPECT_EQ((*history)[0].actor, "cert:CN=alice");
  EXPECT_EQ((*history)[0].validation_accuracy, 0.7);
  EXPECT_EQ((*history)[1].actor, "token:aaaaaaaaaaaa");
  EXPECT_EQ((*history)[2].kind, "rollback");
  EXPECT_EQ((*history)[2].version, v1->model->version());
  EXPECT_EQ((*history)[2].source, "job:" + job + ":best");
  EXPECT_EQ((*history)[2].actor, "token:bbbbbbbbbbbb");
  EXPECT_EQ((*history)[3].kind, "rollback");
  EXPECT_EQ((*history)[3].version, configured);
  EXPECT_EQ((*history)[3].source, "config");
  EXPECT_EQ((*history)[3].checkpoint, "");
  EXPECT_EQ(promoter_->History("../x").status().code(), absl::StatusCode::kInvalidArgument);

  // A restart after rolling back to the configuration serves the configured checkpoint.
  ModelRegistry restarted;
  Configure(&restarted, "news", env_.dir() + "/data/config.tsckpt");
  MakePromoter(&restarted)->RestorePromotions();
  EXPECT_EQ(restarted.Find("news")->version(), configured);
  EXPECT_TRUE(env_.Logged("model 'news' serves its configured checkpoint"));

  // Promoting again after rollbacks: a rollback undoes the newest promotion in force.
  auto v3 = promoter_->Promote(FromCheckpoint("news", "v2.tsckpt"));
  ASSERT_TRUE(v3.ok()) << v3.status();
  auto undo = promoter_->Rollback("news");
  ASSERT_TRUE(undo.ok()) << undo.status();
  EXPECT_EQ(undo->model->version(), configured);
}

// A name only promotions served has no configured checkpoint to return to.
TEST_F(CheckpointPromoterTest, RollbackOfAPromotedOnlyNameStopsAtItsFirstPromotion) {
  WriteCheckpoint(env_.dir() + "/data/v1.tsckpt", 1, "0.7");
  WriteCheckpoint(env_.dir() + "/data/v2.tsckpt", 2, "0.8");
  auto v1 = promoter_->Promote(FromCheckpoint("fresh", "v1.tsckpt"));
  ASSERT_TRUE(v1.ok()) << v1.status();
  auto refused = promoter_->Rollback("fresh");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("is its first promotion and the configuration has no checkpoint for it"));
  ASSERT_TRUE(promoter_->Promote(FromCheckpoint("fresh", "v2.tsckpt")).ok());
  auto back = promoter_->Rollback("fresh");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(registry_.Find("fresh")->version(), v1->model->version());
  EXPECT_EQ(promoter_->Rollback("bad name").status().code(), absl::StatusCode::kInvalidArgument);
}

// Issue 45: promotions and rollbacks under concurrent Classify load fail no request; every
// answer comes from one of the versions.
TEST_F(CheckpointPromoterTest, RollbacksUnderClassifyLoadFailNoRequest) {
  WriteCheckpoint(env_.dir() + "/data/config.tsckpt", 1, "");
  WriteCheckpoint(env_.dir() + "/data/v2.tsckpt", 2, "0.8");
  const std::string configured = Configure(&registry_, "news", env_.dir() + "/data/config.tsckpt");
  promoter_ = MakePromoter(&registry_);
  auto authorizer = Authorizer::Create(AuthConfig{});
  ASSERT_TRUE(authorizer.ok());
  InferenceCore core(&registry_, authorizer->get(), nullptr, &env_.clock());

  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  absl::Mutex mu;
  std::set<std::string> versions;
  std::string first_error;
  std::vector<std::thread> clients;
  clients.reserve(3);
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; !stop || i < 50; ++i) {
        pb::ClassifyRequest request;
        request.set_model("news");
        request.set_document(std::string(static_cast<std::size_t>(1 + (i * 7 + t) % 40), 'x'));
        absl::Notification answered;
        core.Classify(CallContext{}, request,
                      [&](const absl::Status& status, const pb::ClassifyResponse& response) {
                        absl::MutexLock lock(&mu);
                        if (status.ok()) {
                          ++ok;
                          versions.insert(response.model_version());
                        } else {
                          if (failed++ == 0) first_error = status.ToString();
                        }
                        answered.Notify();
                      });
        answered.WaitForNotification();
        if (i > 2000) break;
      }
    });
  }
  // The swaps start once requests are flowing.
  while (ok + failed < 30) std::this_thread::yield();
  std::string promoted;
  for (int round = 0; round < 3; ++round) {
    auto up = promoter_->Promote(FromCheckpoint("news", "v2.tsckpt"));
    ASSERT_TRUE(up.ok()) << up.status();
    promoted = up->model->version();
    auto down = promoter_->Rollback("news");
    ASSERT_TRUE(down.ok()) << down.status();
  }
  stop = true;
  for (auto& client : clients) client.join();
  // A request's last hold on a version goes on its batch thread after `done` returned: the
  // batchers stop (as at a server's shutdown) before the registry goes, so none joins itself.
  registry_.DrainAll(env_.clock().Now());
  EXPECT_EQ(failed, 0) << first_error;
  EXPECT_GE(ok, 150);
  absl::MutexLock lock(&mu);
  for (const std::string& version : versions) {
    EXPECT_TRUE(version == configured || version == promoted) << version;
  }
  EXPECT_EQ(registry_.Find("news")->version(), configured);
}

}  // namespace
}  // namespace ts::server
