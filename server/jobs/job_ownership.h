// Job ownership between identities (issue 45): who may reach a job, and a promotion, that another
// identity made. Pure decisions over Authorizer identities ("token:<12 hex>", "cert:<subject>",
// "anonymous"); the Jobs service asks them when authentication is on.
//
// - A job's owner is its submitted_by (HasOwner in job_store.h: jobs stored before submitters
//   were recorded, and "anonymous" ones, have none and are anyone's).
// - The caller's own jobs, and jobs with no owner, need nothing more than the RPC's role; another
//   identity's job needs kAllJobsRole as well.
// - Errors: PERMISSION_DENIED naming the job (or model), the owner's kind (never the identity,
//   whose token digest is no one else's business) and kAllJobsRole.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace ts::server {

// The role that reaches every identity's jobs and undoes every identity's promotions.
inline constexpr char kAllJobsRole[] = "all_jobs";

// "a token", "a client certificate" or "an identity": what an error may say of `identity`.
std::string IdentityKind(const std::string& identity);

// OK when `caller` may read or change job `job_id` submitted by `submitted_by`.
absl::Status CheckJobAccess(const std::string& job_id, const std::string& submitted_by,
                            const std::string& caller, bool caller_has_all_jobs);

// OK when `caller` may undo the current version of `model`, which `actor` served (its latest
// promotion or rollback record; empty when none is recorded or it predates actors).
absl::Status CheckRollbackAccess(const std::string& model, const std::string& actor,
                                 const std::string& caller, bool caller_has_all_jobs);

}  // namespace ts::server
