// CheckpointRetention: the last K step checkpoints and one best are kept; older step checkpoints
// are removed oldest first; a new best replaces the old one's record without removing its file (it
// is the same best.tsckpt); a resumed job's records count.
#include "worker/checkpoint_retention.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ts::worker {
namespace {

namespace pb = taylorshift::v1;

pb::CheckpointInfo Checkpoint(const std::string& kind, std::uint64_t step) {
  pb::CheckpointInfo info;
  info.set_kind(kind);
  info.set_step(step);
  info.set_path(kind == "best" ? "jobs/job-1/best.tsckpt"
                               : "jobs/job-1/step-" + std::to_string(step) + ".tsckpt");
  return info;
}

// "kind@step" of each checkpoint, in order.
std::vector<std::string> Names(const std::vector<pb::CheckpointInfo>& checkpoints) {
  std::vector<std::string> names;
  names.reserve(checkpoints.size());
  for (const auto& c : checkpoints) names.push_back(c.kind() + "@" + std::to_string(c.step()));
  return names;
}

using Names_ = std::vector<std::string>;

TEST(CheckpointRetentionTest, KeepsTheLastKStepCheckpointsAndRemovesOlderOnesOldestFirst) {
  CheckpointRetention retention(2, {});
  EXPECT_TRUE(retention.Add(Checkpoint("last", 10)).empty());
  EXPECT_TRUE(retention.Add(Checkpoint("last", 20)).empty());
  const auto removed = retention.Add(Checkpoint("last", 30));
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].path(), "jobs/job-1/step-10.tsckpt");
  EXPECT_EQ(Names(retention.kept()), (Names_{"last@20", "last@30"}));
  EXPECT_EQ(Names(retention.Add(Checkpoint("last", 40))), (Names_{"last@20"}));
  EXPECT_EQ(Names(retention.kept()), (Names_{"last@30", "last@40"}));
}

TEST(CheckpointRetentionTest, KeepsOneBestBesideTheStepCheckpointsAndNeverRemovesItsFile) {
  CheckpointRetention retention(1, {});
  EXPECT_TRUE(retention.Add(Checkpoint("best", 10)).empty());
  EXPECT_TRUE(retention.Add(Checkpoint("last", 10)).empty());
  // A better validation later: the new best replaces the record; best.tsckpt was written again.
  EXPECT_TRUE(retention.Add(Checkpoint("best", 20)).empty());
  EXPECT_EQ(Names(retention.Add(Checkpoint("last", 20))), (Names_{"last@10"}));
  EXPECT_EQ(Names(retention.kept()), (Names_{"best@20", "last@20"}));
  // The best stays however many step checkpoints follow.
  EXPECT_EQ(Names(retention.Add(Checkpoint("last", 30))), (Names_{"last@20"}));
  EXPECT_EQ(Names(retention.kept()), (Names_{"best@20", "last@30"}));
}

TEST(CheckpointRetentionTest, ZeroKeepsOneStepCheckpoint) {
  CheckpointRetention retention(0, {});
  EXPECT_TRUE(retention.Add(Checkpoint("last", 5)).empty());
  EXPECT_EQ(Names(retention.Add(Checkpoint("last", 10))), (Names_{"last@5"}));
  EXPECT_EQ(Names(retention.kept()), (Names_{"last@10"}));
}

TEST(CheckpointRetentionTest, AResumedJobsRecordsCountAndALowerKTrimsThemAtTheNextSave) {
  // A job that ran with keep_checkpoints 3 resumes with its records; at its next save it keeps 2.
  CheckpointRetention retention(2, {Checkpoint("last", 10), Checkpoint("best", 10),
                                    Checkpoint("last", 20), Checkpoint("last", 30)});
  EXPECT_EQ(Names(retention.Add(Checkpoint("last", 40))), (Names_{"last@10", "last@20"}));
  EXPECT_EQ(Names(retention.kept()), (Names_{"best@10", "last@30", "last@40"}));
}

}  // namespace
}  // namespace ts::worker
