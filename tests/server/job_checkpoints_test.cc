// Checkpoints of jobs: choosing best or last, the list kept after a worker's retention, the
// store's records, and resolving "job:<id>" and data-root references.
#include "server/jobs/job_checkpoints.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/jobs/job_queue.h"
#include "tests/testing/job_testing.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

pb::CheckpointInfo Info(const std::string& kind, std::uint64_t step, const std::string& path) {
  pb::CheckpointInfo info;
  info.set_kind(kind);
  info.set_step(step);
  info.set_path(path);
  return info;
}

pb::WorkerCheckpoint Message(const pb::CheckpointInfo& info,
                             const std::vector<std::string>& removed = {}) {
  pb::WorkerCheckpoint message;
  *message.mutable_checkpoint() = info;
  for (const auto& r : removed) message.add_removed_paths(r);
  return message;
}

std::vector<std::string> Paths(const google::protobuf::RepeatedPtrField<pb::CheckpointInfo>& list) {
  std::vector<std::string> paths;
  for (const auto& c : list) paths.push_back(c.path());
  return paths;
}

TEST(ChooseCheckpointTest, BestPrefersTheBestAndFallsBackToTheLastStep) {
  pb::Job job;
  job.set_id("job-3");
  job.set_kind(pb::JOB_KIND_TRAINING);
  job.set_state(pb::JOB_STATE_RUNNING);
  auto none = ChooseCheckpoint(job, pb::CHECKPOINT_CHOICE_BEST);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.status().message(), "job job-3 (running) has no best or last checkpoint yet");

  *job.add_checkpoints() = Info("last", 20, "step-20");
  *job.add_checkpoints() = Info("last", 10, "step-10");
  EXPECT_EQ(*ChooseCheckpoint(job, pb::CHECKPOINT_CHOICE_BEST), "step-20");
  EXPECT_EQ(*ChooseCheckpoint(job, pb::CHECKPOINT_CHOICE_LAST), "step-20");
  *job.add_checkpoints() = Info("best", 10, "best");
  EXPECT_EQ(*ChooseCheckpoint(job, pb::CHECKPOINT_CHOICE_BEST), "best");
  EXPECT_EQ(*ChooseCheckpoint(job, pb::CHECKPOINT_CHOICE_LAST), "step-20");

  job.set_kind(pb::JOB_KIND_EVALUATION);
  EXPECT_THAT(std::string(ChooseCheckpoint(job, pb::CHECKPOINT_CHOICE_BEST).status().message()),
              HasSubstr("is an evaluation job; it has no checkpoints"));
}

TEST(KeepCheckpointsTest, TheWorkersRemovedFilesGoAndANewBestReplacesTheOld) {
  google::protobuf::RepeatedPtrField<pb::CheckpointInfo> list;
  KeepCheckpoints(Message(Info("last", 10, "step-10")), &list);
  KeepCheckpoints(Message(Info("best", 10, "best")), &list);
  KeepCheckpoints(Message(Info("last", 20, "step-20")), &list);
  EXPECT_THAT(Paths(list), ElementsAre("step-10", "best", "step-20"));
  // keep_checkpoints 2: step 10 goes when step 30 comes.
  KeepCheckpoints(Message(Info("last", 30, "step-30"), {"step-10"}), &list);
  EXPECT_THAT(Paths(list), ElementsAre("best", "step-20", "step-30"));
  KeepCheckpoints(Message(Info("best", 30, "best")), &list);
  EXPECT_THAT(Paths(list), ElementsAre("step-20", "step-30", "best"));
  EXPECT_EQ(list.Get(2).step(), 30u);
  // A removed path the list never had changes nothing else.
  KeepCheckpoints(Message(Info("last", 40, "step-40"), {"step-20", "step-0"}), &list);
  EXPECT_THAT(Paths(list), ElementsAre("step-30", "best", "step-40"));
}

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pb::Job job;
    job.set_kind(pb::JOB_KIND_TRAINING);
    job.set_state(pb::JOB_STATE_SUCCEEDED);
    auto stored = env_.jobs().CreateJob(job);
    ASSERT_TRUE(stored.ok());
    id_ = stored->id();
  }
  std::vector<std::string> StoredPaths() {
    auto stored = env_.history().Checkpoints(id_);
    EXPECT_TRUE(stored.ok());
    std::vector<std::string> paths;
    for (const auto& c : *stored) paths.push_back(c.path());
    return paths;
  }
  ts::testing::JobTestContext env_;
  std::string id_;
};

TEST_F(CheckpointStoreTest, RecordCheckpointMirrorsKeepCheckpointsInTheStore) {
  RecordCheckpoint(&env_.history(), *env_.context(), id_, Message(Info("last", 10, "step-10")));
  RecordCheckpoint(&env_.history(), *env_.context(), id_, Message(Info("best", 10, "best")));
  RecordCheckpoint(&env_.history(), *env_.context(), id_,
                   Message(Info("last", 20, "step-20"), {"step-10"}));
  RecordCheckpoint(&env_.history(), *env_.context(), id_, Message(Info("best", 20, "best")));
  EXPECT_THAT(StoredPaths(), ElementsAre("step-20", "best"));
  EXPECT_EQ(env_.StoreErrors("remove_checkpoint"), 0);
  EXPECT_EQ(env_.StoreErrors("record_checkpoint"), 0);
}

TEST_F(CheckpointStoreTest, AFailedRecordIsLoggedAndCounted) {
  RecordCheckpoint(&env_.history(), *env_.context(), id_, Message(Info("last", 10, "step-10")));
  // A job the store does not know: the record fails (NOT_FOUND), is logged and counted.
  RecordCheckpoint(&env_.history(), *env_.context(), "job-404",
                   Message(Info("last", 20, "step-20")));
  EXPECT_EQ(env_.StoreErrors("record_checkpoint"), 1);
  EXPECT_TRUE(
      env_.Logged("job job-404: cannot write the last checkpoint of step 20 (step-20) to "
                  "the job store (record_checkpoint)"));
  EXPECT_THAT(StoredPaths(), ElementsAre("step-10"));
}

class CheckpointResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(env_.dir() + "/data/models");
    std::ofstream(env_.dir() + "/data/models/a.tsckpt") << "x";
    auto root = DataRoot::Create(env_.dir() + "/data");
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = std::make_unique<DataRoot>(*root);
    resolver_ = std::make_unique<CheckpointResolver>(root_.get(), &queue_);
  }
  ts::testing::JobTestContext env_;
  JobQueue queue_{JobQueueOptions{10, 0}, &env_.jobs(), env_.context()};
  std::unique_ptr<DataRoot> root_;
  std::unique_ptr<CheckpointResolver> resolver_;
};

TEST_F(CheckpointResolverTest, JobReferencesAndDataRootFiles) {
  pb::Job job;
  job.set_kind(pb::JOB_KIND_TRAINING);
  *job.add_checkpoints() = Info("best", 5, "/state/jobs/job-1/best.tsckpt");
  ASSERT_TRUE(env_.jobs().CreateJob(job).ok());
  EXPECT_EQ(*resolver_->Resolve("job:job-1", "init_from"), "/state/jobs/job-1/best.tsckpt");
  auto unknown = resolver_->Resolve("job:job-9", "init_from");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("init_from: "));

  auto file = resolver_->Resolve("models/a.tsckpt", "checkpoint");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file, root_->root() + "/models/a.tsckpt");
  auto missing = resolver_->Resolve("models/b.tsckpt", "checkpoint");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("checkpoint: \"models/b.tsckpt\" is not a file in the data root"));
  auto outside = resolver_->Resolve("../jobs.db", "checkpoint");
  EXPECT_FALSE(outside.ok());
  EXPECT_THAT(std::string(outside.status().message()), HasSubstr("checkpoint: "));
}

}  // namespace
}  // namespace ts::server
