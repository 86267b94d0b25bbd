// Issue 45: who may reach another identity's job or undo another identity's promotion.
#include "server/jobs/job_ownership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace ts::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAlice[] = "token:aaaaaaaaaaaa";
constexpr char kBob[] = "token:bbbbbbbbbbbb";

TEST(JobOwnershipTest, OwnJobsAndJobsWithoutAnOwnerNeedNoMoreThanTheRpcsRole) {
  EXPECT_TRUE(CheckJobAccess("job-1", kAlice, kAlice, false).ok());
  EXPECT_TRUE(CheckJobAccess("job-1", "", kBob, false).ok());           // stored before owners
  EXPECT_TRUE(CheckJobAccess("job-1", "anonymous", kBob, false).ok());  // submitted without auth
  EXPECT_TRUE(CheckJobAccess("job-1", kAlice, kBob, true).ok());        // all_jobs
}

TEST(JobOwnershipTest, AnotherIdentitysJobIsPermissionDeniedNamingTheJobTheOwnerKindAndTheRole) {
  const absl::Status token = CheckJobAccess("job-7", kAlice, kBob, false);
  EXPECT_EQ(token.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(token.message(), HasSubstr("job job-7"));
  EXPECT_THAT(token.message(), HasSubstr("(a token)"));
  EXPECT_THAT(token.message(), HasSubstr("needs the all_jobs role"));
  EXPECT_THAT(token.message(), Not(HasSubstr("aaaaaaaaaaaa")));  // no owner's digest

  const absl::Status cert = CheckJobAccess("job-8", "cert:CN=alice", kBob, false);
  EXPECT_EQ(cert.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(cert.message(), HasSubstr("(a client certificate)"));
  EXPECT_THAT(cert.message(), Not(HasSubstr("alice")));
  EXPECT_EQ(CheckJobAccess("job-8", "cert:CN=alice", "cert:CN=bob", false).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckJobAccess("job-8", "cert:CN=alice", "cert:CN=alice", false).ok());
}

TEST(JobOwnershipTest, RollingBackAnotherIdentitysPromotionNeedsAllJobs) {
  EXPECT_TRUE(CheckRollbackAccess("news", kAlice, kAlice, false).ok());
  EXPECT_TRUE(CheckRollbackAccess("news", "", kBob, false).ok());  // before actors were recorded
  EXPECT_TRUE(CheckRollbackAccess("news", "anonymous", kBob, false).ok());
  EXPECT_TRUE(CheckRollbackAccess("news", kAlice, kBob, true).ok());
  const absl::Status denied = CheckRollbackAccess("news", kAlice, kBob, false);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("model news"));
  EXPECT_THAT(denied.message(), HasSubstr("(a token)"));
  EXPECT_THAT(denied.message(), HasSubstr("needs the all_jobs role"));
}

}  // namespace
}  // namespace ts::server
