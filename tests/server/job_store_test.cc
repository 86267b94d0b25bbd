#include "server/jobs/job_store.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/jobs/final_state_journal.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/file_writes_fail.h"
#include "tests/testing/job_stores.h"

namespace ts::server {
namespace {

using ::taylorshift::v1::CheckpointInfo;
using ::taylorshift::v1::EvaluationReport;
using ::taylorshift::v1::Job;
using ::taylorshift::v1::JobKind;
using ::taylorshift::v1::JobState;
using ::taylorshift::v1::ListJobsRequest;
using ::taylorshift::v1::ListJobsResponse;
using ::testing::ElementsAre;
using ::testing::FieldsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;
using ::ts::testing::JobStores;

constexpr JobKind kTraining = taylorshift::v1::JOB_KIND_TRAINING;
constexpr JobKind kEvaluation = taylorshift::v1::JOB_KIND_EVALUATION;
constexpr JobState kQueued = taylorshift::v1::JOB_STATE_QUEUED;
constexpr JobState kRunning = taylorshift::v1::JOB_STATE_RUNNING;
constexpr JobState kSucceeded = taylorshift::v1::JOB_STATE_SUCCEEDED;
constexpr JobState kFailed = taylorshift::v1::JOB_STATE_FAILED;
constexpr JobState kCancelled = taylorshift::v1::JOB_STATE_CANCELLED;

MATCHER_P(EqualsProto, expected, "") {
  if (google::protobuf::util::MessageDifferencer::Equals(arg, expected)) return true;
  *result_listener << "\n" << arg.DebugString() << "differs from\n" << expected.DebugString();
  return false;
}

MATCHER_P(StatusIs, code, "") { return arg.code() == code; }

Job MakeTrainingJob(const std::string& name, JobState state = kQueued) {
  Job job;
  job.set_kind(kTraining);
  job.set_name(name);
  job.set_state(state);
  taylorshift::v1::TrainingSpec& spec = *job.mutable_training();
  spec.set_name(name);
  spec.mutable_model()->set_embed_dim(64);
  spec.mutable_model()->set_depth(2);
  spec.mutable_model()->set_heads(4);
  spec.mutable_model()->set_max_length(512);
  spec.mutable_data()->mutable_train()->set_format("listops");
  spec.mutable_data()->mutable_train()->mutable_generate()->set_count(1000);
  spec.mutable_data()->mutable_validation()->set_split(0.1);
  spec.mutable_optimizer()->set_name("lamb");
  spec.mutable_optimizer()->set_lr(0.002);
  spec.mutable_optimizer()->set_weight_decay(0);  // explicit zero: presence must survive
  spec.set_steps(300);
  spec.set_seed(0);
  spec.add_labels("0");
  spec.add_labels("1");
  job.mutable_create_time()->set_seconds(1700000000);
  job.mutable_create_time()->set_nanos(123456789);
  return job;
}

Job MakeEvaluationJob(const std::string& name, JobState state = kQueued) {
  Job job;
  job.set_kind(kEvaluation);
  job.set_name(name);
  job.set_state(state);
  job.mutable_evaluation()->set_name(name);
  job.mutable_evaluation()->set_job_id("job-1");
  job.mutable_evaluation()->mutable_data()->set_format("jsonl");
  job.mutable_evaluation()->mutable_data()->set_path("imdb/test.jsonl");
  return job;
}

EvaluationReport MakeReport(std::uint64_t step, double accuracy) {
  EvaluationReport report;
  report.set_step(step);
  report.set_examples(200);
  report.set_loss(0.4);
  report.set_accuracy(accuracy);
  report.set_macro_f1(accuracy - 0.01);
  report.set_examples_per_second(1234.5);
  for (const char* label : {"neg", "pos"}) {
    taylorshift::v1::ClassReport& c = *report.add_classes();
    c.set_label(label);
    c.set_precision(0.8);
    c.set_recall(0.75);
    c.set_f1(0.77);
    c.set_support(100);
  }
  report.add_confusion()->add_counts(75);
  report.mutable_confusion(0)->add_counts(25);
  report.add_confusion()->add_counts(20);
  report.mutable_confusion(1)->add_counts(80);
  return report;
}

std::vector<std::string> Ids(const ListJobsResponse& response) {
  std::vector<std::string> ids;
  for (const Job& job : response.jobs()) ids.push_back(job.id());
  return ids;
}

// Raw SQLite access to the file, bypassing JobStore (to inspect or tamper with it).
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    EXPECT_EQ(
        sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr),
        SQLITE_OK);
  }
  ~RawDb() { sqlite3_close_v2(db_); }
  void Exec(const char* sql) {
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db_, sql, nullptr, nullptr, &error), SQLITE_OK)
        << sql << ": " << (error != nullptr ? error : "");
    sqlite3_free(error);
  }
  // The first column of the first row, as text ("" when there is none).
  std::string QueryText(const char* sql) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr), SQLITE_OK) << sql;
    std::string result;
    if (sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      if (text != nullptr) result = reinterpret_cast<const char*>(text);
    }
    sqlite3_finalize(stmt);
    return result;
  }

 private:
  sqlite3* db_ = nullptr;
};

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "job_store_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    // A directory that does not exist yet: Open() creates it.
    path_ = dir_ + "/state/jobs.db";
  }
  void TearDown() override {
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }

  std::unique_ptr<JobStores> OpenStore() {
    absl::StatusOr<std::unique_ptr<JobStores>> store = JobStores::Open(path_, &clock_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  Job Create(JobStores& store, Job job) {
    absl::StatusOr<Job> created = store.jobs.CreateJob(std::move(job));
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? *created : Job();
  }

  std::string dir_;
  std::string path_;
  testing::FakeClock clock_;  // stamps the jobs' last writes
};

TEST_F(JobStoreTest, CreateGetUpdateRoundTripFullJob) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);

  Job job = MakeTrainingJob("listops-small");
  job.set_id("ignored");
  absl::StatusOr<Job> created = store->jobs.CreateJob(job);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->id(), "job-1");
  job.set_id("job-1");
  EXPECT_THAT(*created, EqualsProto(job));
  absl::StatusOr<Job> fetched = store->jobs.GetJob("job-1");
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_THAT(*fetched, EqualsProto(job));

  // Everything a finished training job carries.
  job.set_state(kFailed);
  job.set_reason("loss is NaN at step 120");
  job.mutable_start_time()->set_seconds(1700000100);
  job.mutable_end_time()->set_seconds(1700000200);
  job.mutable_progress()->set_step(120);
  job.mutable_progress()->set_total_steps(300);
  job.mutable_progress()->set_loss(0.25);
  job.mutable_progress()->set_resumes(1);
  *job.mutable_validation() = MakeReport(100, 0.81);
  *job.mutable_best_validation() = MakeReport(100, 0.81);
  CheckpointInfo& checkpoint = *job.add_checkpoints();
  checkpoint.set_kind("best");
  checkpoint.set_step(100);
  checkpoint.set_path("state/jobs/job-1/best.tsckpt");
  checkpoint.set_validation_accuracy(0.81);
  checkpoint.set_has_validation_accuracy(true);
  job.add_labels("0");
  job.add_labels("1");
  ASSERT_TRUE(store->jobs.UpdateJob(job).ok());
  fetched = store->jobs.GetJob("job-1");
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_THAT(*fetched, EqualsProto(job));

  // The filter columns follow the snapshot.
  ListJobsRequest failed;
  failed.set_state(kFailed);
  absl::StatusOr<ListJobsResponse> listed = store->jobs.ListJobs(failed);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(Ids(*listed), ElementsAre("job-1"));
}

TEST_F(JobStoreTest, IdsAreUniqueIncreasingAndNeverReused) {
  {
    std::unique_ptr<JobStores> store = OpenStore();
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(Create(*store, MakeTrainingJob("a")).id(), "job-1");
    EXPECT_EQ(Create(*store, MakeEvaluationJob("b")).id(), "job-2");
    EXPECT_EQ(Create(*store, MakeTrainingJob("c")).id(), "job-3");
  }
  // Deleting the newest row (as a future retention sweep would) must not free its id.
  RawDb(path_).Exec("DELETE FROM jobs WHERE id = 'job-3'");
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Create(*store, MakeTrainingJob("d")).id(), "job-4");
  EXPECT_THAT(store->jobs.GetJob("job-3").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(JobStoreTest, DeleteJobTakesItsHistoryAndCheckpointRecordsAndKeepsPromotions) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a", kSucceeded));  // job-1
  Create(*store, MakeTrainingJob("b", kSucceeded));  // job-2
  for (const char* id : {"job-1", "job-2"}) {
    ASSERT_TRUE(store->history.AppendMetric(id, JobMetricRow{10, 1.5, 1e-4, 100, 1000}).ok());
    ASSERT_TRUE(store->history.AppendEvaluation(id, MakeReport(10, 0.5)).ok());
    CheckpointInfo checkpoint;
    checkpoint.set_kind("best");
    checkpoint.set_step(10);
    checkpoint.set_path(absl::StrCat("state/jobs/", id, "/best.tsckpt"));
    ASSERT_TRUE(store->history.RecordCheckpoint(id, checkpoint).ok());
  }
  PromotionRecord promotion;
  promotion.model = "served";
  promotion.version = "v1";
  promotion.checkpoint = "state/models/served/v1.tsckpt";
  promotion.source = "job:job-1";
  ASSERT_TRUE(store->promotions.RecordPromotion(promotion).ok());

  ASSERT_TRUE(store->jobs.DeleteJob("job-1").ok());
  EXPECT_THAT(store->jobs.GetJob("job-1").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store->history.Metrics("job-1").status(), StatusIs(absl::StatusCode::kNotFound));
  for (const char* table : {"job_metrics", "job_evaluations", "checkpoints"}) {
    EXPECT_EQ(RawDb(path_).QueryText(
                  absl::StrCat("SELECT COUNT(*) FROM ", table, " WHERE job_id = 'job-1'").c_str()),
              "0")
        << table;
    EXPECT_EQ(RawDb(path_).QueryText(
                  absl::StrCat("SELECT COUNT(*) FROM ", table, " WHERE job_id = 'job-2'").c_str()),
              "1")
        << table;
  }
  // The promoted copy is not the job's: it stays served after a restart.
  absl::StatusOr<std::vector<PromotionRecord>> current = store->promotions.CurrentPromotions();
  ASSERT_TRUE(current.ok()) << current.status();
  ASSERT_EQ(current->size(), 1u);
  EXPECT_EQ((*current)[0].source, "job:job-1");

  absl::Status again = store->jobs.DeleteJob("job-1");
  EXPECT_THAT(again, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(again.message(), HasSubstr("job-1"));
  // Deleted ids are not reused.
  EXPECT_EQ(Create(*store, MakeTrainingJob("c")).id(), "job-3");
}

// A deleted job's space comes back: a 3 MB spec grew the database and its WAL; after the delete
// both are back near an empty store's size (VACUUM, then the WAL truncated).
TEST_F(JobStoreTest, DeletingAJobGivesItsSpaceBack) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("small", kSucceeded));  // job-1
  Job big = MakeTrainingJob("big", kSucceeded);
  for (int i = 0; i < 100000; ++i) big.mutable_training()->add_labels(absl::StrCat("label-", i));
  Create(*store, big);  // job-2
  const auto bytes = [this] {
    std::error_code error;
    std::uintmax_t total = std::filesystem::file_size(path_, error);
    const auto wal = std::filesystem::file_size(path_ + "-wal", error);
    if (!error) total += wal;
    return total;
  };
  const std::uintmax_t grown = bytes();
  ASSERT_GT(grown, 1000000u);
  ASSERT_TRUE(store->jobs.DeleteJob("job-2").ok());
  EXPECT_LT(bytes(), 200000u) << "grown to " << grown;
  ASSERT_TRUE(store->jobs.GetJob("job-1").ok());
  // A small delete leaves the file alone (a quarter of it must be free).
  Create(*store, MakeTrainingJob("another", kSucceeded));  // job-3
  ASSERT_TRUE(store->jobs.DeleteJob("job-3").ok());
  EXPECT_TRUE(store->jobs.GetJob("job-1").ok());
}

TEST_F(JobStoreTest, FinishedJobsBeforeListsOnlyFinalStatesOlderThanTheCutoff) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a", kSucceeded));  // job-1
  Create(*store, MakeTrainingJob("b", kRunning));    // job-2
  Create(*store, MakeEvaluationJob("c", kFailed));   // job-3
  Create(*store, MakeTrainingJob("d", kQueued));     // job-4
  Create(*store, MakeTrainingJob("e", kCancelled));  // job-5
  const absl::Time written = clock_.Now();
  const absl::Time after = written + absl::Milliseconds(1);
  auto listed = store->jobs.FinishedJobsBefore(after, 100);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, ElementsAre("job-1", "job-3", "job-5"));
  listed = store->jobs.FinishedJobsBefore(after, 2);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, ElementsAre("job-1", "job-3"));
  // Strictly before: a job written at the cutoff is not listed.
  listed = store->jobs.FinishedJobsBefore(written, 100);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, IsEmpty());
  // The time is the last write's, on the store's clock: an old row written again is young again.
  RawDb(path_).Exec("UPDATE jobs SET update_ms = 1000");
  clock_.Advance(absl::Hours(2));
  Job rewritten = *store->jobs.GetJob("job-3");
  ASSERT_TRUE(store->jobs.UpdateJob(rewritten).ok());
  listed = store->jobs.FinishedJobsBefore(clock_.Now() - absl::Hours(1), 100);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, ElementsAre("job-1", "job-5"));
}

TEST_F(JobStoreTest, UnknownJobsAreNotFound) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a"));

  absl::Status status = store->jobs.GetJob("job-42").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("job-42"));

  Job unknown = MakeTrainingJob("x");
  unknown.set_id("job-42");
  status = store->jobs.UpdateJob(unknown);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("job-42"));

  status = store->history.AppendMetric("job-42", JobMetricRow{1, 0.5, 0.001, 100, 1});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("job-42"));
  EXPECT_THAT(store->history.Metrics("job-42").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store->history.AppendEvaluation("job-42", MakeReport(1, 0.5)),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store->history.Evaluations("job-42").status(), StatusIs(absl::StatusCode::kNotFound));
  CheckpointInfo checkpoint;
  checkpoint.set_kind("last");
  checkpoint.set_path("x.tsckpt");
  EXPECT_THAT(store->history.RecordCheckpoint("job-42", checkpoint),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store->history.Checkpoints("job-42").status(), StatusIs(absl::StatusCode::kNotFound));
  status = store->history.RemoveCheckpoint("job-1", "never-recorded.tsckpt");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("never-recorded.tsckpt"));

  // A known job with no history yet is an empty list, not NOT_FOUND.
  absl::StatusOr<std::vector<JobMetricRow>> metrics = store->history.Metrics("job-1");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics, IsEmpty());
  absl::StatusOr<std::vector<CheckpointInfo>> checkpoints = store->history.Checkpoints("job-1");
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  EXPECT_THAT(*checkpoints, IsEmpty());
}

TEST_F(JobStoreTest, ListJobsNewestFirstWithFilters) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("t1", kSucceeded));    // job-1
  Create(*store, MakeEvaluationJob("e1", kSucceeded));  // job-2
  Create(*store, MakeTrainingJob("t2", kRunning));      // job-3
  Create(*store, MakeEvaluationJob("e2", kQueued));     // job-4
  Create(*store, MakeTrainingJob("t3", kQueued));       // job-5

  const auto list = [&](JobState state, JobKind kind) {
    ListJobsRequest request;
    request.set_state(state);
    request.set_kind(kind);
    absl::StatusOr<ListJobsResponse> response = store->jobs.ListJobs(request);
    EXPECT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->next_page_token(), "");
    return Ids(*response);
  };
  EXPECT_THAT(list(taylorshift::v1::JOB_STATE_UNSPECIFIED, taylorshift::v1::JOB_KIND_UNSPECIFIED),
              ElementsAre("job-5", "job-4", "job-3", "job-2", "job-1"));
  EXPECT_THAT(list(kQueued, taylorshift::v1::JOB_KIND_UNSPECIFIED), ElementsAre("job-5", "job-4"));
  EXPECT_THAT(list(taylorshift::v1::JOB_STATE_UNSPECIFIED, kTraining),
              ElementsAre("job-5", "job-3", "job-1"));
  EXPECT_THAT(list(kSucceeded, kEvaluation), ElementsAre("job-2"));
  EXPECT_THAT(list(kCancelled, taylorshift::v1::JOB_KIND_UNSPECIFIED), IsEmpty());
}

TEST_F(JobStoreTest, ListJobsPagesThrough120Jobs) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 120; ++i) Create(*store, MakeTrainingJob(absl::StrCat("t", i)));

  ListJobsRequest request;  // page_size 0: the default, 50
  std::vector<std::string> seen;
  std::vector<int> page_sizes;
  std::vector<bool> has_token;
  while (true) {
    absl::StatusOr<ListJobsResponse> page = store->jobs.ListJobs(request);
    ASSERT_TRUE(page.ok()) << page.status();
    page_sizes.push_back(page->jobs_size());
    has_token.push_back(!page->next_page_token().empty());
    for (const std::string& id : Ids(*page)) seen.push_back(id);
    if (page->next_page_token().empty()) break;
    ASSERT_LT(page_sizes.size(), 4u) << "paging does not end";
    request.set_page_token(page->next_page_token());
  }
  EXPECT_THAT(page_sizes, ElementsAre(50, 50, 20));
  EXPECT_THAT(has_token, ElementsAre(true, true, false));
  ASSERT_EQ(seen.size(), 120u);
  for (int i = 0; i < 120; ++i) EXPECT_EQ(seen[i], absl::StrCat("job-", 120 - i));

  // Exactly a page full: no token pointing at an empty page.
  request.Clear();
  request.set_page_size(120);
  absl::StatusOr<ListJobsResponse> all = store->jobs.ListJobs(request);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->jobs_size(), 120);
  EXPECT_EQ(all->next_page_token(), "");
}

TEST_F(JobStoreTest, ListJobsPagesWithinAFilter) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 30; ++i) {
    Create(*store, i % 3 == 0 ? MakeEvaluationJob(absl::StrCat("e", i))
                              : MakeTrainingJob(absl::StrCat("t", i)));
  }
  ListJobsRequest request;
  request.set_kind(kEvaluation);
  request.set_page_size(4);
  absl::StatusOr<ListJobsResponse> first = store->jobs.ListJobs(request);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(Ids(*first), ElementsAre("job-28", "job-25", "job-22", "job-19"));
  request.set_page_token(first->next_page_token());
  absl::StatusOr<ListJobsResponse> second = store->jobs.ListJobs(request);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(Ids(*second), ElementsAre("job-16", "job-13", "job-10", "job-7"));
  request.set_page_token(second->next_page_token());
  absl::StatusOr<ListJobsResponse> last = store->jobs.ListJobs(request);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_THAT(Ids(*last), ElementsAre("job-4", "job-1"));
  EXPECT_EQ(last->next_page_token(), "");

  // A token continues only the listing it came from.
  request.set_kind(kTraining);
  request.set_page_token(first->next_page_token());
  absl::Status status = store->jobs.ListJobs(request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("page_token"));
}

TEST_F(JobStoreTest, ListJobsRejectsBadPageTokenAndPageSize) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a"));

  for (const std::string& token :
       {std::string("not a token!"), std::string("abc"), absl::WebSafeBase64Escape("x.0.0"),
        absl::WebSafeBase64Escape("-5.0.0"), absl::WebSafeBase64Escape("7.0")}) {
    ListJobsRequest request;
    request.set_page_token(token);
    absl::Status status = store->jobs.ListJobs(request).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << token;
    EXPECT_THAT(status.message(), HasSubstr("page_token")) << token;
  }

  ListJobsRequest request;
  request.set_page_size(1001);
  absl::Status status = store->jobs.ListJobs(request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("page_size"));
  EXPECT_THAT(status.message(), HasSubstr("1000"));
  request.set_page_size(1000);
  EXPECT_TRUE(store->jobs.ListJobs(request).ok());
}

TEST_F(JobStoreTest, UnfinishedJobsAndDataSurviveReopen) {
  {
    std::unique_ptr<JobStores> store = OpenStore();
    ASSERT_NE(store, nullptr);
    Create(*store, MakeTrainingJob("a", kSucceeded));       // job-1
    Create(*store, MakeTrainingJob("b", kRunning));         // job-2
    Create(*store, MakeEvaluationJob("c", kQueued));        // job-3
    Create(*store, MakeTrainingJob("d", kFailed));          // job-4
    Create(*store, MakeTrainingJob("e", kCancelled));       // job-5
    Job f = Create(*store, MakeTrainingJob("f", kQueued));  // job-6, then started
    f.set_state(kRunning);
    ASSERT_TRUE(store->jobs.UpdateJob(f).ok());
    ASSERT_TRUE(store->history.AppendMetric("job-2", JobMetricRow{10, 1.5, 0.001, 50, 1000}).ok());
  }
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<Job>> unfinished = store->jobs.UnfinishedJobs();
  ASSERT_TRUE(unfinished.ok()) << unfinished.status();
  std::vector<std::string> ids;
  for (const Job& job : *unfinished) ids.push_back(job.id());
  EXPECT_THAT(ids, ElementsAre("job-2", "job-3", "job-6"));
  EXPECT_EQ((*unfinished)[2].state(), kRunning);
  Job expected = MakeEvaluationJob("c", kQueued);
  expected.set_id("job-3");
  EXPECT_THAT((*unfinished)[1], EqualsProto(expected));

  absl::StatusOr<std::vector<JobMetricRow>> metrics = store->history.Metrics("job-2");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics, ElementsAre(FieldsAre(10, 1.5, 0.001, 50, 1000)));
  EXPECT_EQ(Create(*store, MakeTrainingJob("g")).id(), "job-7");
}

TEST_F(JobStoreTest, UsesWriteAheadLogAndSchemaVersion3) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  RawDb raw(path_);
  EXPECT_EQ(raw.QueryText("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.QueryText("PRAGMA user_version"), "3");
  EXPECT_EQ(StoreDatabase::kSchemaVersion, 3);
  EXPECT_EQ(raw.QueryText("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                          "('jobs', 'job_metrics', 'job_evaluations', 'checkpoints', "
                          "'promotions')"),
            "5");
}

TEST_F(JobStoreTest, NewerSchemaVersionIsFailedPrecondition) {
  ASSERT_NE(OpenStore(), nullptr);
  RawDb(path_).Exec("PRAGMA user_version = 99");
  absl::Status status = JobStores::Open(path_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(path_));
  EXPECT_THAT(status.message(), HasSubstr("schema version 99"));
  EXPECT_THAT(status.message(), HasSubstr("up to 3"));
}

TEST_F(JobStoreTest, NonDatabaseFileIsAClearError) {
  std::filesystem::create_directories(dir_ + "/state");
  std::ofstream(path_) << "listen: 127.0.0.1:50051\nmodels: []\n" << std::string(4096, '#') << "\n";
  absl::Status status = JobStores::Open(path_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(path_));
  EXPECT_THAT(status.message(), HasSubstr("not a database"));
}

TEST_F(JobStoreTest, AnotherApplicationsDatabaseIsRejected) {
  std::filesystem::create_directories(dir_ + "/state");
  RawDb(path_).Exec("CREATE TABLE users(name TEXT)");
  absl::Status status = JobStores::Open(path_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(path_));
  EXPECT_THAT(status.message(), HasSubstr("not a job store"));
  // Left as it was.
  EXPECT_EQ(RawDb(path_).QueryText("SELECT count(*) FROM sqlite_master"), "1");
}

// The schema as version 1 shipped (the first binaries' CREATE statements, verbatim): the
// migrations in store_database.cc must keep opening it, and a shipped step is never edited.
constexpr char kShippedSchemaV1[] = R"sql(
CREATE TABLE jobs(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT UNIQUE NOT NULL,
  kind INTEGER NOT NULL,
  state INTEGER NOT NULL,
  name TEXT NOT NULL,
  create_ms INTEGER NOT NULL,
  update_ms INTEGER NOT NULL,
  job BLOB NOT NULL
);
CREATE INDEX jobs_by_state ON jobs(state);
CREATE INDEX jobs_by_kind ON jobs(kind);

CREATE TABLE job_metrics(
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  loss REAL NOT NULL,
  learning_rate REAL NOT NULL,
  examples_per_second REAL NOT NULL,
  time_ms INTEGER NOT NULL
);
CREATE INDEX job_metrics_by_job ON job_metrics(job_id);

CREATE TABLE job_evaluations(
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  accuracy REAL NOT NULL,
  macro_f1 REAL NOT NULL,
  loss REAL NOT NULL,
  report BLOB NOT NULL
);
CREATE INDEX job_evaluations_by_job ON job_evaluations(job_id);

CREATE TABLE checkpoints(
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  kind TEXT NOT NULL,
  step INTEGER NOT NULL,
  path TEXT NOT NULL,
  validation_accuracy REAL,
  time_ms INTEGER NOT NULL,
  UNIQUE(job_id, kind, path)
);

CREATE TABLE promotions(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  model TEXT NOT NULL,
  version TEXT NOT NULL,
  checkpoint TEXT NOT NULL,
  source TEXT NOT NULL,
  validation_accuracy REAL,
  time_ms INTEGER NOT NULL
);
CREATE INDEX promotions_by_model ON promotions(model);
)sql";

// Version 2's step as it shipped (issue 45: who promoted, rollbacks).
constexpr char kShippedMigrationV2[] = R"sql(
ALTER TABLE promotions ADD COLUMN job_id TEXT NOT NULL DEFAULT '';
ALTER TABLE promotions ADD COLUMN actor TEXT NOT NULL DEFAULT '';
ALTER TABLE promotions ADD COLUMN kind TEXT NOT NULL DEFAULT 'promote';
ALTER TABLE promotions ADD COLUMN forced INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 3's step as it shipped (issue 45: who submitted each job).
constexpr char kShippedMigrationV3[] = R"sql(
ALTER TABLE jobs ADD COLUMN submitted_by TEXT NOT NULL DEFAULT '';
CREATE INDEX jobs_by_submitter ON jobs(submitted_by);
)sql";

// Every table and index of a database file, with its SQL, one per line.
std::string SchemaOf(const std::string& path) {
  return RawDb(path).QueryText(
      "SELECT group_concat(type || ' ' || name || ': ' || ifnull(sql, ''), char(10)) "
      "FROM (SELECT * FROM sqlite_master ORDER BY name)");
}

TEST_F(JobStoreTest, ANewDatabaseHasTheSchemaVersions1To3Shipped) {
  ASSERT_NE(OpenStore(), nullptr);
  const std::string shipped = dir_ + "/shipped.db";
  RawDb(shipped).Exec(kShippedSchemaV1);
  RawDb(shipped).Exec(kShippedMigrationV2);
  RawDb(shipped).Exec(kShippedMigrationV3);
  EXPECT_THAT(SchemaOf(path_), HasSubstr("table promotions"));
  EXPECT_EQ(SchemaOf(path_), SchemaOf(shipped));
}

TEST_F(JobStoreTest, ADatabaseWrittenWithSchemaVersion1OpensWithItsRecordsAndTakesWrites) {
  // A jobs.db as the previous binaries left it: their schema and rows, written without the
  // stores.
  std::filesystem::create_directories(dir_ + "/state");
  Job job = MakeTrainingJob("old", kSucceeded);
  job.set_id("job-7");
  const EvaluationReport report = MakeReport(100, 0.75);
  {
    RawDb raw(path_);
    raw.Exec("PRAGMA journal_mode=WAL");
    raw.Exec(kShippedSchemaV1);
    raw.Exec(absl::StrCat("INSERT INTO jobs(seq, id, kind, state, name, create_ms, update_ms, job) "
                          "VALUES(7, 'job-7', ",
                          kTraining, ", ", kSucceeded, ", 'old', 1700000000123, 1700000500000, x'",
                          absl::BytesToHexString(job.SerializeAsString()), "')")
                 .c_str());
    raw.Exec("INSERT INTO job_metrics VALUES('job-7', 100, 0.5, 0.001, 250, 1700000400000)");
    raw.Exec(absl::StrCat("INSERT INTO job_evaluations VALUES('job-7', 100, 0.75, 0.74, 0.4, x'",
                          absl::BytesToHexString(report.SerializeAsString()), "')")
                 .c_str());
    raw.Exec(
        "INSERT INTO checkpoints VALUES('job-7', 'best', 100, 'jobs/job-7/best.tsckpt', 0.75, "
        "1700000400500)");
    raw.Exec(
        "INSERT INTO promotions(model, version, checkpoint, source, validation_accuracy, time_ms) "
        "VALUES('news', '1', 'models/news/1.tsckpt', 'job:job-7', 0.75, 1700000600000)");
    raw.Exec("PRAGMA user_version = 1");
  }

  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<Job> stored = store->jobs.GetJob("job-7");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_THAT(*stored, EqualsProto(job));
  EXPECT_THAT(*store->history.Metrics("job-7"),
              ElementsAre(FieldsAre(100, 0.5, 0.001, 250, 1700000400000)));
  EXPECT_THAT(*store->history.Evaluations("job-7"), ElementsAre(EqualsProto(report)));
  absl::StatusOr<std::vector<CheckpointInfo>> checkpoints = store->history.Checkpoints("job-7");
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  ASSERT_EQ(checkpoints->size(), 1u);
  EXPECT_EQ((*checkpoints)[0].path(), "jobs/job-7/best.tsckpt");
  EXPECT_EQ((*checkpoints)[0].time().nanos(), 500000000);
  absl::StatusOr<std::vector<PromotionRecord>> promotions = store->promotions.CurrentPromotions();
  ASSERT_TRUE(promotions.ok()) << promotions.status();
  ASSERT_EQ(promotions->size(), 1u);
  const PromotionRecord& old = (*promotions)[0];
  EXPECT_EQ(old.model, "news");
  EXPECT_EQ(old.version, "1");
  EXPECT_EQ(old.checkpoint, "models/news/1.tsckpt");
  EXPECT_EQ(old.source, "job:job-7");
  EXPECT_THAT(old.validation_accuracy, Optional(0.75));
  EXPECT_EQ(old.time_ms, 1700000600000);
  // Migrated to version 2: the columns it adds read as "not recorded".
  EXPECT_EQ(old.actor, "");
  EXPECT_EQ(old.job_id, "");
  EXPECT_EQ(old.kind, "promote");
  EXPECT_FALSE(old.forced);

  // Writes go on from where the old file left off; a delete still takes the job's rows.
  EXPECT_EQ(Create(*store, MakeTrainingJob("new")).id(), "job-8");
  ASSERT_TRUE(store->history.AppendMetric("job-8", JobMetricRow{1, 2.0, 0.1, 10, 1}).ok());
  ASSERT_TRUE(store->jobs.DeleteJob("job-7").ok());
  EXPECT_EQ(RawDb(path_).QueryText("SELECT count(*) FROM job_metrics WHERE job_id = 'job-7'"), "0");
  EXPECT_EQ(RawDb(path_).QueryText("PRAGMA user_version"), "3");
  EXPECT_EQ(store->promotions.PromotionHistory("news")->size(), 1u);
  PromotionRecord rollback;
  rollback.model = "news";
  rollback.version = "0";
  rollback.source = "config";
  rollback.actor = "token:0123456789ab";
  rollback.kind = "rollback";
  rollback.time_ms = 1700000700000;
  ASSERT_TRUE(store->promotions.RecordPromotion(rollback).ok());
  absl::StatusOr<std::vector<PromotionRecord>> current = store->promotions.CurrentPromotions();
  ASSERT_TRUE(current.ok()) << current.status();
  ASSERT_EQ(current->size(), 1u);
  EXPECT_EQ((*current)[0].kind, "rollback");
  EXPECT_EQ((*current)[0].actor, "token:0123456789ab");
  EXPECT_EQ((*current)[0].checkpoint, "");
}

// Issue 45: a jobs.db of schema version 2 (the previous binaries') migrates in place to version
// 3: its jobs have no submitter (no owner: every owner's listing shows them), new jobs record
// theirs, and a listing for one owner leaves out another's jobs, also among pending snapshots.
TEST_F(JobStoreTest, ADatabaseWrittenWithSchemaVersion2MigratesAndListsJobsByOwner) {
  std::filesystem::create_directories(dir_ + "/state");
  Job old = MakeTrainingJob("old", kSucceeded);
  old.set_id("job-3");
  {
    RawDb raw(path_);
    raw.Exec("PRAGMA journal_mode=WAL");
    raw.Exec(kShippedSchemaV1);
    raw.Exec(kShippedMigrationV2);
    raw.Exec(absl::StrCat("INSERT INTO jobs(seq, id, kind, state, name, create_ms, update_ms, job) "
                          "VALUES(3, 'job-3', ",
                          kTraining, ", ", kSucceeded, ", 'old', 1700000000123, 1700000500000, x'",
                          absl::BytesToHexString(old.SerializeAsString()), "')")
                 .c_str());
    raw.Exec("PRAGMA user_version = 2");
  }
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawDb(path_).QueryText("PRAGMA user_version"), "3");
  EXPECT_EQ(RawDb(path_).QueryText("SELECT submitted_by FROM jobs WHERE id = 'job-3'"), "");
  absl::StatusOr<Job> stored = store->jobs.GetJob("job-3");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_THAT(*stored, EqualsProto(old));
  EXPECT_FALSE(HasOwner(stored->submitted_by()));

  Job a = MakeTrainingJob("a");
  a.set_submitted_by("token:aaaaaaaaaaaa");
  Job b = MakeTrainingJob("b");
  b.set_submitted_by("token:bbbbbbbbbbbb");
  Job anonymous = MakeTrainingJob("anon");
  anonymous.set_submitted_by("anonymous");
  EXPECT_EQ(Create(*store, a).id(), "job-4");
  EXPECT_EQ(Create(*store, b).id(), "job-5");
  EXPECT_EQ(Create(*store, anonymous).id(), "job-6");
  EXPECT_EQ(RawDb(path_).QueryText("SELECT submitted_by FROM jobs WHERE id = 'job-5'"),
            "token:bbbbbbbbbbbb");
  EXPECT_EQ(store->jobs.GetJob("job-4")->submitted_by(), "token:aaaaaaaaaaaa");

  const auto ids = [&](const std::string& owner, const std::map<std::string, Job>& pending = {}) {
    std::vector<std::string> listed;
    ListJobsRequest request;
    request.set_page_size(2);  // pages too
    while (true) {
      absl::StatusOr<ListJobsResponse> page = store->jobs.ListJobs(request, pending, owner);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      for (const Job& job : page->jobs()) listed.push_back(job.id());
      if (page->next_page_token().empty()) break;
      request.set_page_token(page->next_page_token());
    }
    return listed;
  };
  EXPECT_THAT(ids(""), ElementsAre("job-6", "job-5", "job-4", "job-3"));
  EXPECT_THAT(ids("token:aaaaaaaaaaaa"), ElementsAre("job-6", "job-4", "job-3"));
  EXPECT_THAT(ids("token:bbbbbbbbbbbb"), ElementsAre("job-6", "job-5", "job-3"));
  // A pending snapshot is filtered by its owner as well.
  Job running_b = *store->jobs.GetJob("job-5");
  running_b.set_state(kRunning);
  EXPECT_THAT(ids("token:aaaaaaaaaaaa", {{"job-5", running_b}}),
              ElementsAre("job-6", "job-4", "job-3"));
  EXPECT_THAT(ids("token:bbbbbbbbbbbb", {{"job-5", running_b}}),
              ElementsAre("job-6", "job-5", "job-3"));

  // An update keeps the column in step with the record.
  Job moved = *store->jobs.GetJob("job-4");
  moved.set_submitted_by("cert:CN=alice");
  ASSERT_TRUE(store->jobs.UpdateJob(moved).ok());
  EXPECT_EQ(RawDb(path_).QueryText("SELECT submitted_by FROM jobs WHERE id = 'job-4'"),
            "cert:CN=alice");
  EXPECT_THAT(ids("token:aaaaaaaaaaaa"), ElementsAre("job-6", "job-3"));
}

// A full disk at start (every write fails, RLIMIT_FSIZE 0, after a clean stop removed the WAL
// and its shared-memory file): the store opens read-only, answers reads, refuses writes with
// UNAVAILABLE naming the cause, and takes writes again once ReopenWritable succeeds.
TEST_F(JobStoreTest, AStoreThatCannotBeWrittenOpensReadOnlyAndReopensWritable) {
  {
    std::unique_ptr<JobStores> store = OpenStore();
    ASSERT_NE(store, nullptr);
    Job job;
    job.set_kind(kTraining);
    job.set_state(kRunning);
    job.set_name("a");
    Create(*store, job);
  }
  ASSERT_FALSE(std::filesystem::exists(path_ + "-shm"));
  std::unique_ptr<StoreDatabase> database;
  {
    const testing::FileWritesFail full;
    EXPECT_FALSE(StoreDatabase::Open(path_).ok());  // what stopped the server's start
    auto opened = StoreDatabase::OpenOrReadOnly(path_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    database = *std::move(opened);
    EXPECT_FALSE(database->WriteError().ok());
    JobStore jobs(database.get(), &clock_);
    auto read = jobs.GetJob("job-1");
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->state(), kRunning);
    EXPECT_EQ(jobs.ListJobs(ListJobsRequest())->jobs_size(), 1);
    read->set_state(kFailed);
    const absl::Status refused = jobs.UpdateJob(*read);
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
    EXPECT_THAT(refused.message(), HasSubstr("cannot be written (since the server started: "));
    EXPECT_EQ(jobs.CheckWritable().code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(database->ReopenWritable().ok());  // still full: read-only again
    EXPECT_EQ(jobs.GetJob("job-1")->state(), kRunning);
  }
  ASSERT_TRUE(database->ReopenWritable().ok());
  JobStore jobs(database.get(), &clock_);
  Job failed = *jobs.GetJob("job-1");
  failed.set_state(kFailed);
  ASSERT_TRUE(jobs.UpdateJob(failed).ok());
  database.reset();
  EXPECT_EQ(OpenStore()->jobs.GetJob("job-1")->state(), kFailed);
}

// Read-only is for want of writing only: content the read-write opening refuses is still refused,
// and a file with no schema yet (a new state dir on a full disk) answers every call UNAVAILABLE.
TEST_F(JobStoreTest, OpeningReadOnlyStillRefusesANewerSchemaAndServesNothingWithoutASchema) {
  ASSERT_NE(OpenStore(), nullptr);
  RawDb(path_).Exec("PRAGMA user_version = 99");
  {
    const testing::FileWritesFail full;
    const absl::Status newer = StoreDatabase::OpenOrReadOnly(path_).status();
    EXPECT_EQ(newer.code(), absl::StatusCode::kFailedPrecondition) << newer;
    EXPECT_THAT(newer.message(), HasSubstr("schema version 99"));
    const std::string fresh = dir_ + "/fresh/jobs.db";
    auto empty = StoreDatabase::OpenOrReadOnly(fresh);
    ASSERT_TRUE(empty.ok()) << empty.status();
    JobStore jobs(empty->get(), &clock_);
    EXPECT_EQ(jobs.GetJob("job-1").status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(jobs.ListJobs(ListJobsRequest()).status().message(),
                HasSubstr("cannot be read or written"));
  }
}

Job FinishedJob(const std::string& id, JobState state, const std::string& reason) {
  Job job;
  job.set_id(id);
  job.set_kind(kTraining);
  job.set_name("n");
  job.set_state(state);
  job.set_reason(reason);
  job.mutable_end_time()->set_seconds(1700000000);
  job.mutable_progress()->set_step(40);
  job.mutable_training()->set_name("the spec is not kept");
  return job;
}

// The journal keeps final states across a reopen, in slots allocated in advance (a full disk does
// not refuse them), frees a slot on Forget, cuts what does not fit and reads a torn slot as free.
TEST_F(JobStoreTest, TheFinalStateJournalKeepsStatesInPreallocatedSlotsAcrossAReopen) {
  std::filesystem::create_directories(dir_ + "/state");
  const std::string path = dir_ + "/state/final_states";
  {
    auto journal = FinalStateJournal::Open(path, 2);
    ASSERT_TRUE(journal.ok()) << journal.status();
    EXPECT_EQ(std::filesystem::file_size(path), 2 * FinalStateJournal::kSlotBytes);
    const testing::FileWritesFail full;  // write(2) fails; the mapped slots do not
    ASSERT_TRUE((*journal)->Keep(FinishedJob("job-1", kFailed, "no space")).ok());
    ASSERT_TRUE((*journal)->Keep(FinishedJob("job-2", kSucceeded, "")).ok());
    const absl::Status full_slots = (*journal)->Keep(FinishedJob("job-3", kCancelled, ""));
    EXPECT_EQ(full_slots.code(), absl::StatusCode::kResourceExhausted) << full_slots;
    ASSERT_TRUE((*journal)->Keep(FinishedJob("job-1", kFailed, "again")).ok());  // its own slot
  }
  {
    auto journal = FinalStateJournal::Open(path, 2);
    ASSERT_TRUE(journal.ok()) << journal.status();
    const std::vector<Job> kept = (*journal)->Records();
    ASSERT_EQ(kept.size(), 2u);
    EXPECT_EQ(kept[0].id(), "job-1");
    EXPECT_EQ(kept[0].state(), kFailed);
    EXPECT_EQ(kept[0].reason(), "again");
    EXPECT_EQ(kept[0].end_time().seconds(), 1700000000);
    EXPECT_EQ(kept[0].progress().step(), 40u);
    EXPECT_FALSE(kept[0].has_training());
    EXPECT_EQ(kept[1].id(), "job-2");
    ASSERT_TRUE((*journal)->Forget("job-2").ok());
    // A reason too long for a slot is cut at a character boundary; the rest is kept.
    std::string reason;
    for (int i = 0; i < 3000; ++i) reason += "\xC3\xA9";  // 6000 bytes of U+00E9
    ASSERT_TRUE((*journal)->Keep(FinishedJob("job-4", kFailed, reason)).ok());
  }
  {
    auto journal = FinalStateJournal::Open(path, 2);
    ASSERT_TRUE(journal.ok()) << journal.status();
    const std::vector<Job> kept = (*journal)->Records();
    ASSERT_EQ(kept.size(), 2u);
    EXPECT_EQ(kept[1].id(), "job-4");
    EXPECT_LT(kept[1].reason().size(), FinalStateJournal::kSlotBytes);
    EXPECT_THAT(kept[1].reason(), ::testing::StartsWith("\xC3\xA9\xC3\xA9"));
    EXPECT_THAT(kept[1].reason(), ::testing::EndsWith("\xC3\xA9 ..."));
    EXPECT_EQ(kept[1].progress().step(), 40u);
  }
  // A write cut short (its bytes no longer match the checksum) reads as a free slot.
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(20);
    file.put('\x7f');
  }
  auto journal = FinalStateJournal::Open(path, 2);
  ASSERT_TRUE(journal.ok()) << journal.status();
  ASSERT_EQ((*journal)->Records().size(), 1u);
  EXPECT_EQ((*journal)->Records()[0].id(), "job-4");
}

// A job's newer state goes to a free slot before its older slot is freed: a crash between the two
// leaves both whole, and the next Open keeps the newer one (by its sequence number) and frees the
// older on the disk.
TEST_F(JobStoreTest, TheFinalStateJournalKeepsANewerStateWholeThroughACrash) {
  std::filesystem::create_directories(dir_ + "/state");
  const std::string path = dir_ + "/state/final_states";
  const auto slot = [&path](std::size_t index) {
    std::ifstream file(path, std::ios::binary);
    std::string bytes(FinalStateJournal::kSlotBytes, '\0');
    file.seekg(static_cast<std::streamoff>(index * FinalStateJournal::kSlotBytes));
    file.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return bytes;
  };
  std::string older;
  {
    auto journal = FinalStateJournal::Open(path, 3);
    ASSERT_TRUE(journal.ok()) << journal.status();
    ASSERT_TRUE((*journal)->Keep(FinishedJob("job-1", kFailed, "first")).ok());
    older = slot(0);
    ASSERT_TRUE((*journal)->Keep(FinishedJob("job-1", kFailed, "second")).ok());
    ASSERT_EQ((*journal)->Records().size(), 1u);
    EXPECT_EQ((*journal)->Records()[0].reason(), "second");
    EXPECT_NE(slot(0), older);  // freed
  }
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.write(older.data(), static_cast<std::streamsize>(older.size()));  // as a crash left it
  }
  for (int reopen = 0; reopen < 2; ++reopen) {
    auto journal = FinalStateJournal::Open(path, 3);
    ASSERT_TRUE(journal.ok()) << journal.status();
    const std::vector<Job> kept = (*journal)->Records();
    ASSERT_EQ(kept.size(), 1u) << "reopen " << reopen;
    EXPECT_EQ(kept[0].reason(), "second") << "reopen " << reopen;
  }
  EXPECT_NE(slot(0), older);
}

TEST_F(JobStoreTest, MetricsRoundTripPerJob) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a"));
  Create(*store, MakeTrainingJob("b"));
  ASSERT_TRUE(store->history.AppendMetric("job-1", JobMetricRow{10, 2.25, 1e-4, 512.5, 1000}).ok());
  ASSERT_TRUE(store->history.AppendMetric("job-2", JobMetricRow{10, 9.0, 1.0, 1.0, 1}).ok());
  ASSERT_TRUE(
      store->history.AppendMetric("job-1", JobMetricRow{20, 1.75, 2e-4, 600.25, 2000}).ok());
  ASSERT_TRUE(store->history.AppendMetric("job-1", JobMetricRow{30, 0.125, 3e-4, 0, 3000}).ok());
  absl::StatusOr<std::vector<JobMetricRow>> metrics = store->history.Metrics("job-1");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics, ElementsAre(FieldsAre(10, 2.25, 1e-4, 512.5, 1000),
                                    FieldsAre(20, 1.75, 2e-4, 600.25, 2000),
                                    FieldsAre(30, 0.125, 3e-4, 0, 3000)));
  metrics = store->history.Metrics("job-2");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics, ElementsAre(FieldsAre(10, 9.0, 1.0, 1.0, 1)));
}

TEST_F(JobStoreTest, EvaluationsRoundTrip) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a"));
  const EvaluationReport first = MakeReport(100, 0.7);
  const EvaluationReport second = MakeReport(200, 0.85);
  ASSERT_TRUE(store->history.AppendEvaluation("job-1", first).ok());
  ASSERT_TRUE(store->history.AppendEvaluation("job-1", second).ok());
  absl::StatusOr<std::vector<EvaluationReport>> reports = store->history.Evaluations("job-1");
  ASSERT_TRUE(reports.ok()) << reports.status();
  EXPECT_THAT(*reports, ElementsAre(EqualsProto(first), EqualsProto(second)));
  EXPECT_EQ(RawDb(path_).QueryText("SELECT accuracy FROM job_evaluations WHERE step = 200"),
            "0.85");
}

TEST_F(JobStoreTest, TruncateHistoryDropsStepsAfterTheResumePoint) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a"));
  Create(*store, MakeTrainingJob("b"));
  for (const std::int64_t step : {10, 20, 30}) {
    ASSERT_TRUE(
        store->history.AppendMetric("job-1", JobMetricRow{step, 1.0, 1e-3, 1.0, step}).ok());
    ASSERT_TRUE(
        store->history.AppendMetric("job-2", JobMetricRow{step, 1.0, 1e-3, 1.0, step}).ok());
  }
  ASSERT_TRUE(store->history.AppendEvaluation("job-1", MakeReport(20, 0.5)).ok());
  ASSERT_TRUE(store->history.AppendEvaluation("job-1", MakeReport(30, 0.6)).ok());
  ASSERT_TRUE(store->history.TruncateHistory("job-1", 20).ok());
  absl::StatusOr<std::vector<JobMetricRow>> metrics = store->history.Metrics("job-1");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_EQ(metrics->size(), 2u);
  EXPECT_EQ(metrics->back().step, 20);
  absl::StatusOr<std::vector<EvaluationReport>> reports = store->history.Evaluations("job-1");
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_EQ(reports->size(), 1u);
  EXPECT_EQ(reports->front().step(), 20u);
  metrics = store->history.Metrics("job-2");  // other jobs keep theirs
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->size(), 3u);
  EXPECT_EQ(store->history.TruncateHistory("job-9", 0).code(), absl::StatusCode::kNotFound);
}

// Pages through job_id's history with `page_size` (at most 1000 pages); every page's size and
// token are checked on the way.
struct HistoryPages {
  std::vector<taylorshift::v1::GetJobHistoryResponse> pages;
  taylorshift::v1::GetJobHistoryResponse all;  // the pages concatenated
};
HistoryPages PageThrough(JobStores& store, const std::string& job_id, std::uint32_t page_size,
                         bool include_class_reports = false) {
  HistoryPages out;
  taylorshift::v1::GetJobHistoryRequest request;
  request.set_id(job_id);
  request.set_page_size(page_size);
  request.set_include_class_reports(include_class_reports);
  const std::uint32_t limit = page_size == 0 ? JobHistoryStore::kDefaultHistoryPageSize : page_size;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<taylorshift::v1::GetJobHistoryResponse> page = store.history.History(request);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    const int entries = page->loss_curve_size() + page->validations_size();
    EXPECT_LE(entries, static_cast<int>(limit));
    // Only the last page may be short.
    if (!page->next_page_token().empty()) {
      EXPECT_EQ(entries, static_cast<int>(limit));
    }
    out.pages.push_back(*page);
    out.all.mutable_loss_curve()->MergeFrom(page->loss_curve());
    out.all.mutable_validations()->MergeFrom(page->validations());
    if (page->next_page_token().empty()) break;
    request.set_page_token(page->next_page_token());
  }
  return out;
}

std::vector<std::uint64_t> PointSteps(const taylorshift::v1::GetJobHistoryResponse& history) {
  std::vector<std::uint64_t> steps;
  for (const auto& point : history.loss_curve()) steps.push_back(point.step());
  return steps;
}

std::vector<std::uint64_t> ValidationSteps(const taylorshift::v1::GetJobHistoryResponse& history) {
  std::vector<std::uint64_t> steps;
  for (const auto& report : history.validations()) steps.push_back(report.step());
  return steps;
}

TEST_F(JobStoreTest, HistoryPagesReturnEveryPointAndValidationOnceInStepOrder) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a"));
  Create(*store, MakeTrainingJob("b"));
  std::vector<std::uint64_t> point_steps, validation_steps;
  for (std::int64_t step = 10; step <= 250; step += 10) {
    ASSERT_TRUE(store->history
                    .AppendMetric("job-1", JobMetricRow{step, 3.0 - step / 100.0, step * 1e-5,
                                                        100.0 + step, 1700000000000 + step})
                    .ok());
    ASSERT_TRUE(store->history.AppendMetric("job-2", JobMetricRow{step, 9.0, 1.0, 1.0, 1}).ok());
    point_steps.push_back(static_cast<std::uint64_t>(step));
    if (step % 50 == 0) {
      ASSERT_TRUE(store->history
                      .AppendEvaluation("job-1", MakeReport(static_cast<std::uint64_t>(step), 0.5))
                      .ok());
      validation_steps.push_back(static_cast<std::uint64_t>(step));
    }
  }
  // 25 points and 5 validation runs: 30 entries, split alike for any page size.
  for (const std::uint32_t page_size : {1u, 2u, 3u, 7u, 29u, 30u, 31u, 0u}) {
    SCOPED_TRACE(page_size);
    const HistoryPages paged = PageThrough(*store, "job-1", page_size);
    const std::uint32_t size =
        page_size == 0 ? JobHistoryStore::kDefaultHistoryPageSize : page_size;
    EXPECT_EQ(paged.pages.size(), (30 + size - 1) / size);
    EXPECT_EQ(PointSteps(paged.all), point_steps);
    EXPECT_EQ(ValidationSteps(paged.all), validation_steps);
  }

  // Step order across the two lists: a step's point comes before its validation run.
  const HistoryPages fives = PageThrough(*store, "job-1", 5);
  ASSERT_EQ(fives.pages.size(), 6u);
  EXPECT_THAT(PointSteps(fives.pages[0]), ElementsAre(10, 20, 30, 40, 50));
  EXPECT_THAT(ValidationSteps(fives.pages[0]), IsEmpty());
  EXPECT_THAT(PointSteps(fives.pages[1]), ElementsAre(60, 70, 80, 90));
  EXPECT_THAT(ValidationSteps(fives.pages[1]), ElementsAre(50));

  // The values come through; class reports only on request.
  const taylorshift::v1::GetJobHistoryResponse& all = fives.all;
  ASSERT_EQ(all.loss_curve_size(), 25);
  const taylorshift::v1::LossPoint& point = all.loss_curve(2);  // step 30
  EXPECT_EQ(point.step(), 30u);
  EXPECT_DOUBLE_EQ(point.loss(), 2.7);
  EXPECT_DOUBLE_EQ(point.learning_rate(), 30e-5);
  EXPECT_DOUBLE_EQ(point.examples_per_second(), 130.0);
  EXPECT_EQ(point.time().seconds(), 1700000000);
  EXPECT_EQ(point.time().nanos(), 30000000);
  EvaluationReport summary = MakeReport(100, 0.5);
  summary.clear_classes();
  summary.clear_confusion();
  EXPECT_THAT(all.validations(1), EqualsProto(summary));
  const HistoryPages full = PageThrough(*store, "job-1", 4, /*include_class_reports=*/true);
  ASSERT_EQ(full.all.validations_size(), 5);
  EXPECT_THAT(full.all.validations(1), EqualsProto(MakeReport(100, 0.5)));

  // Another job's history is its own; a known job without one is one empty page.
  EXPECT_EQ(PageThrough(*store, "job-2", 0).all.loss_curve_size(), 25);
  EXPECT_THAT(PageThrough(*store, "job-2", 0).all.validations(), IsEmpty());
  Create(*store, MakeEvaluationJob("e"));
  const HistoryPages empty = PageThrough(*store, "job-3", 0);
  ASSERT_EQ(empty.pages.size(), 1u);
  EXPECT_THAT(empty.all.loss_curve(), IsEmpty());
  EXPECT_THAT(empty.all.validations(), IsEmpty());
  // An evaluation job's report is its one validation run.
  ASSERT_TRUE(store->history.AppendEvaluation("job-3", MakeReport(0, 0.8)).ok());
  EXPECT_THAT(ValidationSteps(PageThrough(*store, "job-3", 1).all), ElementsAre(0));
}

TEST_F(JobStoreTest, HistoryPagingFollowsAJobThatIsStillRunning) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a"));
  for (const std::int64_t step : {10, 20, 30}) {
    ASSERT_TRUE(
        store->history.AppendMetric("job-1", JobMetricRow{step, 1.0, 1e-3, 1.0, step}).ok());
  }
  ASSERT_TRUE(store->history.AppendEvaluation("job-1", MakeReport(30, 0.5)).ok());
  taylorshift::v1::GetJobHistoryRequest request;
  request.set_id("job-1");
  request.set_page_size(2);
  absl::StatusOr<taylorshift::v1::GetJobHistoryResponse> first = store->history.History(request);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(PointSteps(*first), ElementsAre(10, 20));
  ASSERT_FALSE(first->next_page_token().empty());
  // Meanwhile the job resumes from step 20 (dropping 30 and its validation run) and goes on.
  ASSERT_TRUE(store->history.TruncateHistory("job-1", 20).ok());
  for (const std::int64_t step : {30, 40}) {
    ASSERT_TRUE(
        store->history.AppendMetric("job-1", JobMetricRow{step, 0.5, 1e-3, 1.0, step}).ok());
  }
  ASSERT_TRUE(store->history.AppendEvaluation("job-1", MakeReport(40, 0.75)).ok());
  request.set_page_token(first->next_page_token());
  request.set_page_size(3);
  absl::StatusOr<taylorshift::v1::GetJobHistoryResponse> rest = store->history.History(request);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(PointSteps(*rest), ElementsAre(30, 40));
  ASSERT_EQ(rest->loss_curve_size(), 2);
  EXPECT_DOUBLE_EQ(rest->loss_curve(0).loss(), 0.5);  // step 30 as trained again
  EXPECT_THAT(ValidationSteps(*rest), ElementsAre(40));
  EXPECT_TRUE(rest->next_page_token().empty());
  // Read from the start, the history is the resumed one.
  const HistoryPages again = PageThrough(*store, "job-1", 2);
  EXPECT_THAT(PointSteps(again.all), ElementsAre(10, 20, 30, 40));
  EXPECT_DOUBLE_EQ(again.all.loss_curve(2).loss(), 0.5);
  EXPECT_THAT(ValidationSteps(again.all), ElementsAre(40));
}

TEST_F(JobStoreTest, HistoryRejectsBadRequestsNamingTheProblem) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a"));
  Create(*store, MakeTrainingJob("b"));
  for (const std::int64_t step : {10, 20, 30}) {
    ASSERT_TRUE(
        store->history.AppendMetric("job-1", JobMetricRow{step, 1.0, 1e-3, 1.0, step}).ok());
  }
  taylorshift::v1::GetJobHistoryRequest request;
  request.set_id("job-1");

  request.set_page_size(JobHistoryStore::kMaxHistoryPageSize + 1);
  absl::Status status = store->history.History(request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("page_size 10001 is over the limit of 10000"));
  request.set_page_size(JobHistoryStore::kMaxHistoryPageSize);
  EXPECT_TRUE(store->history.History(request).ok());

  request.set_page_size(1);
  absl::StatusOr<taylorshift::v1::GetJobHistoryResponse> page = store->history.History(request);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_FALSE(page->next_page_token().empty());
  const std::string token = page->next_page_token();
  for (const std::string& bad :
       {std::string("not base64!"), absl::WebSafeBase64Escape("10.0.1"),
        absl::WebSafeBase64Escape("x.0.1.job-1"), absl::WebSafeBase64Escape("10.7.1.job-1"),
        absl::WebSafeBase64Escape("-5.0.1.job-1")}) {
    request.set_page_token(bad);
    status = store->history.History(request).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("page_token is malformed")) << bad;
  }
  // A token continues only the history it came from.
  request.set_id("job-2");
  request.set_page_token(token);
  status = store->history.History(request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("issued for job job-1, not for job-2"));

  request.clear_page_token();
  request.set_id("job-42");
  status = store->history.History(request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "job job-42 not found");
  // A huge id is cut in the message.
  request.set_id("job-" + std::string(5000, '9'));
  status = store->history.History(request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("job-" + std::string(96, '9') + "... (5004 bytes)"));
  EXPECT_LT(status.message().size(), 160u);
  request.set_id("");
  status = store->history.History(request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("id is required"));
}

TEST_F(JobStoreTest, CheckpointsRecordReplaceAndRemove) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Create(*store, MakeTrainingJob("a"));
  Create(*store, MakeTrainingJob("b"));

  CheckpointInfo last;
  last.set_kind("last");
  last.set_step(100);
  last.set_path("state/jobs/job-1/step-100.tsckpt");
  last.mutable_time()->set_seconds(1700000000);
  last.mutable_time()->set_nanos(250000000);
  CheckpointInfo best;
  best.set_kind("best");
  best.set_step(100);
  best.set_path("state/jobs/job-1/best.tsckpt");
  best.set_validation_accuracy(0.0);  // a recorded zero is not "none"
  best.set_has_validation_accuracy(true);
  best.mutable_time()->set_seconds(1700000001);
  ASSERT_TRUE(store->history.RecordCheckpoint("job-1", last).ok());
  ASSERT_TRUE(store->history.RecordCheckpoint("job-1", best).ok());
  ASSERT_TRUE(store->history.RecordCheckpoint("job-2", last).ok());

  // A better model overwrites best.tsckpt: the entry is replaced, not duplicated.
  best.set_step(200);
  best.set_validation_accuracy(0.9);
  best.mutable_time()->set_seconds(1700000002);
  ASSERT_TRUE(store->history.RecordCheckpoint("job-1", best).ok());
  absl::StatusOr<std::vector<CheckpointInfo>> checkpoints = store->history.Checkpoints("job-1");
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  EXPECT_THAT(*checkpoints, ElementsAre(EqualsProto(last), EqualsProto(best)));
  EXPECT_FALSE((*checkpoints)[0].has_validation_accuracy());

  ASSERT_TRUE(store->history.RemoveCheckpoint("job-1", last.path()).ok());
  checkpoints = store->history.Checkpoints("job-1");
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  EXPECT_THAT(*checkpoints, ElementsAre(EqualsProto(best)));
  EXPECT_THAT(store->history.RemoveCheckpoint("job-1", last.path()),
              StatusIs(absl::StatusCode::kNotFound));
  // job-2's entry with the same path is its own.
  checkpoints = store->history.Checkpoints("job-2");
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  EXPECT_THAT(*checkpoints, ElementsAre(EqualsProto(last)));
}

TEST_F(JobStoreTest, CurrentPromotionsPickTheLatestPerModel) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  const auto record = [](std::string model, std::string version, std::string checkpoint,
                         std::string source, std::optional<double> accuracy, std::int64_t time_ms,
                         std::string job_id, std::string actor, std::string kind, bool forced) {
    PromotionRecord r;
    r.model = std::move(model);
    r.version = std::move(version);
    r.checkpoint = std::move(checkpoint);
    r.source = std::move(source);
    r.validation_accuracy = accuracy;
    r.time_ms = time_ms;
    r.job_id = std::move(job_id);
    r.actor = std::move(actor);
    r.kind = std::move(kind);
    r.forced = forced;
    return r;
  };
  const PromotionRecord imdb1 = record("imdb", "1", "/ckpt/imdb-a.tsckpt", "job:job-1:best", 0.81,
                                       1000, "job-1", "token:0123456789ab", "promote", false);
  const PromotionRecord listops1 = record("listops", "1", "/ckpt/l.tsckpt", "models/l.tsckpt",
                                          std::nullopt, 1500, "", "anonymous", "promote", true);
  const PromotionRecord imdb2 = record("imdb", "2", "/ckpt/imdb-b.tsckpt", "job:job-2:best", 0.84,
                                       2000, "job-2", "cert:CN=ops", "promote", false);
  const PromotionRecord cifar1 = record("cifar", "1", "/ckpt/c.tsckpt", "job:job-3:best", 0.5, 2500,
                                        "job-3", "anonymous", "promote", false);
  // A rollback of imdb to version 1: the latest record, so the current one.
  const PromotionRecord imdb_back = record("imdb", "1", "/ckpt/imdb-a.tsckpt", "job:job-1:best",
                                           0.81, 3000, "job-1", "anonymous", "rollback", false);
  for (const PromotionRecord& r : {imdb1, listops1, imdb2, cifar1, imdb_back}) {
    ASSERT_TRUE(store->promotions.RecordPromotion(r).ok());
  }
  const auto fields = [](const PromotionRecord& r) {
    return FieldsAre(r.model, r.version, r.checkpoint, r.source, r.validation_accuracy, r.time_ms,
                     r.job_id, r.actor, r.kind, r.forced);
  };

  absl::StatusOr<std::vector<PromotionRecord>> current = store->promotions.CurrentPromotions();
  ASSERT_TRUE(current.ok()) << current.status();
  EXPECT_THAT(*current, ElementsAre(fields(cifar1), fields(imdb_back), fields(listops1)));
  EXPECT_EQ((*current)[2].validation_accuracy, std::nullopt);
  EXPECT_THAT((*current)[1].validation_accuracy, Optional(0.81));

  absl::StatusOr<std::vector<PromotionRecord>> history = store->promotions.PromotionHistory("imdb");
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_THAT(*history, ElementsAre(fields(imdb1), fields(imdb2), fields(imdb_back)));
  history = store->promotions.PromotionHistory("never-promoted");
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_THAT(*history, IsEmpty());

  EXPECT_THAT(store->promotions.RecordPromotion(PromotionRecord{}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JobStoreTest, ConcurrentWritersLoseNothing) {
  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  constexpr int kJobsPerThread = 50;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < kJobsPerThread; ++i) {
        absl::StatusOr<Job> job =
            store->jobs.CreateJob(MakeTrainingJob(absl::StrCat("t", t, "-", i)));
        ASSERT_TRUE(job.ok()) << job.status();
        job->set_state(kRunning);
        job->mutable_progress()->set_step(t * 1000 + i);
        ASSERT_TRUE(store->jobs.UpdateJob(*job).ok());
        ASSERT_TRUE(
            store->history.AppendMetric(job->id(), JobMetricRow{t * 1000 + i, 1, 1, 1, 1}).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  ListJobsRequest request;
  request.set_page_size(1000);
  absl::StatusOr<ListJobsResponse> all = store->jobs.ListJobs(request);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->jobs_size(), kThreads * kJobsPerThread);
  std::set<std::string> ids;
  std::set<std::string> names;
  for (const Job& job : all->jobs()) {
    ids.insert(job.id());
    names.insert(job.name());
    EXPECT_EQ(job.state(), kRunning) << job.id();
    EXPECT_EQ(job.name(),
              absl::StrCat("t", job.progress().step() / 1000, "-", job.progress().step() % 1000));
    absl::StatusOr<std::vector<JobMetricRow>> metrics = store->history.Metrics(job.id());
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    EXPECT_THAT(*metrics, ElementsAre(FieldsAre(static_cast<std::int64_t>(job.progress().step()), 1,
                                                1, 1, 1)));
  }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kThreads * kJobsPerThread));
  EXPECT_EQ(names.size(), static_cast<std::size_t>(kThreads * kJobsPerThread));
  EXPECT_EQ(all->jobs(0).id(), "job-400");
  EXPECT_EQ(all->jobs(399).id(), "job-1");
}

TEST_F(JobStoreTest, CommittedWritesSurviveSigkill) {
  constexpr int kJobs = 40;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child process: no gtest assertions here, only exit codes.
    absl::StatusOr<std::unique_ptr<JobStores>> store = JobStores::Open(path_);
    if (!store.ok()) _exit(2);
    for (int i = 0; i < kJobs; ++i) {
      absl::StatusOr<Job> job = (*store)->jobs.CreateJob(MakeTrainingJob(absl::StrCat("j", i)));
      if (!job.ok()) _exit(3);
      job->set_state(kRunning);
      if (!(*store)->jobs.UpdateJob(*job).ok()) _exit(4);
      if (!(*store)->history.AppendMetric(job->id(), JobMetricRow{i, 0.5, 0.1, 10, i}).ok())
        _exit(5);
    }
    // Die without closing the database: no checkpoint, the rows are only in the -wal file.
    raise(SIGKILL);
    _exit(6);
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wait_status)) << "child exited with " << WEXITSTATUS(wait_status);
  EXPECT_EQ(WTERMSIG(wait_status), SIGKILL);
  EXPECT_TRUE(std::filesystem::exists(path_ + "-wal"));

  std::unique_ptr<JobStores> store = OpenStore();
  ASSERT_NE(store, nullptr);
  ListJobsRequest request;
  request.set_state(kRunning);
  request.set_page_size(1000);
  absl::StatusOr<ListJobsResponse> running = store->jobs.ListJobs(request);
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_EQ(running->jobs_size(), kJobs);
  for (int i = 0; i < kJobs; ++i) {
    const Job& job = running->jobs(kJobs - 1 - i);
    EXPECT_EQ(job.id(), absl::StrCat("job-", i + 1));
    EXPECT_EQ(job.name(), absl::StrCat("j", i));
    absl::StatusOr<std::vector<JobMetricRow>> metrics = store->history.Metrics(job.id());
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    EXPECT_THAT(*metrics, ElementsAre(FieldsAre(i, 0.5, 0.1, 10, i)));
  }
}

}  // namespace
}  // namespace ts::server
