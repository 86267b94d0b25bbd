// tsctl's job commands (the taylorshift.v1.Jobs service): train, eval, jobs list|get|cancel|delete|
// watch|plot, promote. Each exits with tsctl's status: 0 success (with --wait / watch: the job
// SUCCEEDED), 1 an RPC or I/O error or a job that FAILED or was CANCELLED (stderr names the
// reason), 2 a usage error.
#pragma once

#include <cstdint>
#include <string>

#include "client/command_line.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::client {

// Adds train, eval, jobs (list|get|cancel|delete|watch|plot) and promote to `commands`:
//   train --spec FILE [--wait] [--json]: the YAML spec (job_contract/job_spec.h) → SubmitTraining.
//   eval --spec FILE [--wait] [--json]: the same for SubmitEvaluation.
//   jobs list|get|cancel|delete|watch|plot ... `jobs get ID --curve` adds the job's loss curve
//     and validation accuracy (every GetJobHistory page) as text charts (--json: a "history"
//     key); `jobs plot ID --out F.svg` writes them as an SVG file (only .svg: another extension
//     is a usage error).
//   promote (--job ID [--last] | --checkpoint PATH) --model NAME [--require-better] [--json]
//   download (--job ID [--last] | --model NAME) --out FILE [--max-bytes N] [--json]:
//     DownloadCheckpoint into FILE (written to a temporary name, checked against the size and
//     CRC-32 the server sent, then renamed).
void AddJobCommands(Commands& commands);

// jobs list's flags (exposed for tests): --state and --kind filters, --limit (0 = every job).
struct ListFlags {
  ConnectionFlags common;
  taylorshift::v1::JobState state = taylorshift::v1::JOB_STATE_UNSPECIFIED;
  taylorshift::v1::JobKind kind = taylorshift::v1::JOB_KIND_UNSPECIFIED;
  std::int64_t limit = 0;
  bool json = false;
};
void AddListFlags(CLI::App& command, ListFlags* flags);

// promote's flags (exposed for tests): exactly one of --job and --checkpoint, --model
// required, --last only with --job; they fill `request`.
struct PromoteFlags {
  ConnectionFlags common;
  taylorshift::v1::PromoteCheckpointRequest request;
  bool json = false;
  bool rollback = false;  // --rollback: RollbackPromotion of request.model(), no source
};
void AddPromoteFlags(CLI::App& command, PromoteFlags* flags);

// models --history NAME: the model's promotions and rollbacks (ListPromotions), as a table or
// one JSON object a line. An exit code.
int RunPromotionHistory(const ConnectionFlags& common, const std::string& model, bool json);

// download's flags (exposed for tests): exactly one of --job and --model, --last only with
// --job, --out required; they fill `request`.
struct DownloadFlags {
  ConnectionFlags common;
  taylorshift::v1::DownloadCheckpointRequest request;
  std::string out;
  std::int64_t max_bytes = std::int64_t{16} << 30;
  bool json = false;
};
void AddDownloadFlags(CLI::App& command, DownloadFlags* flags);

}  // namespace ts::client
