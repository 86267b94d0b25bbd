#include "server/jobs/job_ownership.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/jobs/job_store.h"

namespace ts::server {

std::string IdentityKind(const std::string& identity) {
  if (absl::StartsWith(identity, "token:")) return "a token";
  if (absl::StartsWith(identity, "cert:")) return "a client certificate";
  return "an identity";
}

absl::Status CheckJobAccess(const std::string& job_id, const std::string& submitted_by,
                            const std::string& caller, bool caller_has_all_jobs) {
  if (caller_has_all_jobs || !HasOwner(submitted_by) || submitted_by == caller) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "job ", job_id, " was submitted by another identity (", IdentityKind(submitted_by),
      "); reaching another identity's job needs the ", kAllJobsRole, " role"));
}

absl::Status CheckRollbackAccess(const std::string& model, const std::string& actor,
                                 const std::string& caller, bool caller_has_all_jobs) {
  if (caller_has_all_jobs || !HasOwner(actor) || actor == caller) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("the version served under model ", model, " was promoted by another identity (",
                   IdentityKind(actor), "); undoing another identity's promotion needs the ",
                   kAllJobsRole, " role"));
}

}  // namespace ts::server
