// tsctl's job commands (the taylorshift.v1.Jobs service): train, eval, jobs list|get|cancel|delete|
// watch|plot, promote. Each takes the arguments after its command name and returns tsctl's exit
// status: 0 success (with --wait / watch: the job SUCCEEDED), 1 an RPC or I/O error or a job
// that FAILED or was CANCELLED (stderr names the reason), 2 a usage error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/command_line.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::client {

// tsctl train --spec FILE [--wait] [--json]: the YAML spec (server/job_spec.h) → SubmitTraining.
int RunTrain(const std::vector<std::string>& args);
// tsctl eval --spec FILE [--wait] [--json]: the same for SubmitEvaluation.
int RunEval(const std::vector<std::string>& args);
// tsctl jobs list|get|cancel|delete|watch|plot ... `jobs get ID --curve` adds the job's loss curve
// and validation accuracy (every GetJobHistory page) as text charts (--json: a "history" key);
// `jobs plot ID --out F.svg` writes them as an SVG file (only .svg: another extension is a
// usage error).
int RunJobs(const std::vector<std::string>& args);
// tsctl promote (--job ID [--last] | --checkpoint PATH) --model NAME [--require-better] [--json]
int RunPromote(const std::vector<std::string>& args);

// The flag parsers of the commands (exposed for tests): the common connection flags plus
//   train/eval:  --spec FILE, --wait, --json
//   jobs list:   --state S, --kind K, --limit N, --json
//   jobs plot:   --out FILE
//   promote:     --job ID, --checkpoint PATH, --model NAME, --last, --require-better, --json
Flags SubmitFlags();
Flags ListFlags();
Flags PlotFlags();
Flags PromoteFlags();

// jobs list's request (state and kind filters) and --limit (0 = every job); problems are
// recorded in `flags`.
struct ListOptions {
  taylorshift::v1::ListJobsRequest request;
  std::int64_t limit = 0;
};
ListOptions ListOptionsFromFlags(Flags& flags);

// promote's request: exactly one of --job and --checkpoint, --model required, --last only
// with --job; problems are recorded in `flags`.
taylorshift::v1::PromoteCheckpointRequest PromoteRequestFromFlags(Flags& flags);

}  // namespace ts::client
