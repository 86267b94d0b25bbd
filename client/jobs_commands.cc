#include "client/jobs_commands.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/command_line.h"
#include "client/file_util.h"
#include "client/job_format.h"
#include "client/job_plot.h"
#include "common/job_spec_yaml.h"
#include "common/proto_names.h"
#include "grpcpp/grpcpp.h"
#include "taylorshift/v1/jobs.grpc.pb.h"

namespace ts::client {
namespace {

using taylorshift::v1::Job;
using taylorshift::v1::JobEvent;
using taylorshift::v1::Jobs;

constexpr std::int64_t kDefaultTimeoutMs = 30000;
// ListJobs answers at most this many jobs per page.
constexpr std::int64_t kMaxPageSize = 1000;
// GetJobHistory pages: the server's maximum (entries of a few dozen bytes each, so a page
// stays far below the default 4 MiB message limit), and a bound on how many are followed
// (10^8 entries, far beyond any job: only a misbehaving server gets there).
constexpr std::uint32_t kHistoryPageSize = 10000;
constexpr int kMaxHistoryPages = 10000;

std::unique_ptr<Jobs::Stub> NewJobsStub(const ConnectionOptions& options) {
  std::shared_ptr<grpc::Channel> channel = ConnectOrReport(options);
  return channel == nullptr ? nullptr : Jobs::NewStub(channel);
}

// Prints a local error the way tsctl reports them ("tsctl: CODE: message"); returns 1.
int LocalError(const absl::Status& status) {
  std::cerr << "tsctl: " << GrpcCodeName(ToGrpcStatus(status).error_code()) << ": "
            << status.message() << "\n";
  return kExitError;
}

// The spec file's text ("-" = stdin).
absl::StatusOr<std::string> ReadSpec(const std::string& file) {
  if (file == "-") return ReadStreamBytes(std::cin, "stdin");
  return ReadFileBytes(file);
}

// The unary calls' deadline: --timeout-ms (default 30 s).
std::int64_t UnaryTimeoutMs(Flags& flags) {
  return flags.Int("timeout-ms", kDefaultTimeoutMs, 0, INT32_MAX);
}

// A watch lasts as long as the job: no deadline unless --timeout-ms is given.
std::int64_t WatchTimeoutMs(Flags& flags) {
  return flags.Has("timeout-ms") ? flags.Int("timeout-ms", 0, 0, INT32_MAX) : 0;
}

// 0 when the job SUCCEEDED; otherwise names the state and reason on stderr and returns 1.
int JobOutcome(const Job& job) {
  if (job.state() == taylorshift::v1::JOB_STATE_SUCCEEDED) return kExitOk;
  std::cerr << "tsctl: job " << job.id() << " " << JobStateName(job.state())
            << (job.reason().empty() ? "" : ": ") << job.reason() << "\n";
  return kExitError;
}

// Streams the job's events (one line each) until it reaches a final state; with --json the
// last line is the job. Returns the job's outcome.
int WatchJob(Jobs::Stub& stub, const ConnectionOptions& connection, const std::string& id,
             std::int64_t timeout_ms, bool json) {
  grpc::ClientContext context;
  PrepareContext(connection, timeout_ms, &context);
  taylorshift::v1::WatchJobRequest request;
  request.set_id(id);
  std::unique_ptr<grpc::ClientReader<JobEvent>> reader = stub.WatchJob(&context, request);
  JobEvent event;
  std::optional<Job> last;
  while (reader->Read(&event)) {
    std::cout << (json ? JobEventJson(event) : JobEventText(event)) << std::endl;
    last = event.job();
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return RpcFailed("WatchJob", connection, status);
  if (!last.has_value() || !IsFinalState(last->state())) {
    std::cerr << "tsctl: WatchJob on " << connection.server << " ended before job " << id
              << " finished"
              << (last.has_value() ? absl::StrCat(" (last state ", JobStateName(last->state()), ")")
                                   : "")
              << "\n";
    return kExitError;
  }
  if (json) std::cout << JobJson(*last) << std::endl;
  return JobOutcome(*last);
}

// train and eval: parse the spec, submit, then print the job or follow it.
template <typename Spec>
int Submit(
    const std::vector<std::string>& args, const char* command,
    absl::StatusOr<Spec> (*parse)(const std::string&),
    const std::function<grpc::Status(Jobs::Stub&, grpc::ClientContext*, const Spec&, Job*)>& call,
    const char* rpc) {
  Flags flags = SubmitFlags();
  if (!flags.Parse(args)) return Usage(flags.error());
  if (!flags.positionals().empty()) {
    return Usage(absl::StrCat(command, " takes no arguments, got '", flags.positionals()[0],
                              "' (the spec goes after --spec)"));
  }
  const std::string file = flags.String("spec", "");
  if (file.empty()) flags.Fail("--spec FILE is required");
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  const std::int64_t timeout_ms = UnaryTimeoutMs(flags);
  const std::int64_t watch_timeout_ms = WatchTimeoutMs(flags);
  const bool json = flags.Has("json");
  if (flags.failed()) return Usage(flags.error());

  absl::StatusOr<std::string> text = ReadSpec(file);
  if (!text.ok()) return LocalError(text.status());
  absl::StatusOr<Spec> spec = parse(*text);
  if (!spec.ok()) {
    return LocalError(
        absl::Status(spec.status().code(), absl::StrCat(file, ": ", spec.status().message())));
  }
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(connection);
  if (stub == nullptr) return kExitError;
  Job job;
  {
    grpc::ClientContext context;
    PrepareContext(connection, timeout_ms, &context);
    const grpc::Status status = call(*stub, &context, *spec, &job);
    if (!status.ok()) return RpcFailed(rpc, connection, status);
  }
  if (!flags.Has("wait")) {
    std::cout << (json ? JobJson(job) : job.id()) << std::endl;
    return kExitOk;
  }
  return WatchJob(*stub, connection, job.id(), watch_timeout_ms, json);
}

int RunJobsList(const std::vector<std::string>& args) {
  Flags flags = ListFlags();
  if (!flags.Parse(args)) return Usage(flags.error());
  if (!flags.positionals().empty()) {
    return Usage(absl::StrCat("jobs list takes no arguments, got '", flags.positionals()[0], "'"));
  }
  ListOptions options = ListOptionsFromFlags(flags);
  taylorshift::v1::ListJobsRequest& request = options.request;
  const std::int64_t limit = options.limit;
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  const std::int64_t timeout_ms = UnaryTimeoutMs(flags);
  if (flags.failed()) return Usage(flags.error());
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(connection);
  if (stub == nullptr) return kExitError;

  std::vector<Job> jobs;
  while (true) {
    const std::int64_t remaining = limit - static_cast<std::int64_t>(jobs.size());
    // Page size 0 = the server's default page.
    request.set_page_size(limit > 0 ? static_cast<std::uint32_t>(std::min(remaining, kMaxPageSize))
                                    : 0);
    grpc::ClientContext context;
    PrepareContext(connection, timeout_ms, &context);
    taylorshift::v1::ListJobsResponse response;
    const grpc::Status status = stub->ListJobs(&context, request, &response);
    if (!status.ok()) return RpcFailed("ListJobs", connection, status);
    for (Job& job : *response.mutable_jobs()) jobs.push_back(std::move(job));
    // An empty page with a token would never end; the server does not send one, but be safe.
    if (response.next_page_token().empty() || response.jobs().empty()) break;
    if (limit > 0 && static_cast<std::int64_t>(jobs.size()) >= limit) break;
    request.set_page_token(response.next_page_token());
  }
  if (limit > 0 && static_cast<std::int64_t>(jobs.size()) > limit) jobs.resize(limit);
  if (flags.Has("json")) {
    for (const Job& job : jobs) std::cout << JobJson(job) << "\n";
  } else {
    std::cout << JobTable(jobs);
  }
  std::cout.flush();
  return kExitOk;
}

// Every page of the job's history, followed from the first to the last and concatenated.
grpc::Status FetchHistory(Jobs::Stub& stub, const ConnectionOptions& connection,
                          const std::string& id, std::int64_t timeout_ms,
                          taylorshift::v1::GetJobHistoryResponse* history) {
  taylorshift::v1::GetJobHistoryRequest request;
  request.set_id(id);
  request.set_page_size(kHistoryPageSize);
  for (int page = 0; page < kMaxHistoryPages; ++page) {
    grpc::ClientContext context;
    PrepareContext(connection, timeout_ms, &context);
    taylorshift::v1::GetJobHistoryResponse response;
    const grpc::Status status = stub.GetJobHistory(&context, request, &response);
    if (!status.ok()) return status;
    const bool empty = response.loss_curve().empty() && response.validations().empty();
    for (auto& point : *response.mutable_loss_curve()) {
      *history->add_loss_curve() = std::move(point);
    }
    for (auto& report : *response.mutable_validations()) {
      *history->add_validations() = std::move(report);
    }
    if (response.next_page_token().empty()) return grpc::Status::OK;
    // A page that moves nothing forward would repeat forever.
    if (empty || response.next_page_token() == request.page_token()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "the server answered a page without progress (an empty page, or the "
                          "same page_token again)");
    }
    request.set_page_token(response.next_page_token());
  }
  return grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                      absl::StrCat("job ", id, " has more than ", kMaxHistoryPages,
                                   " pages of history; stopped following them"));
}

// "F.png" → ".png"; "" when the file name has no extension.
std::string Extension(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return path.substr(dot);
}

// jobs plot ID --out F.svg: the job's loss curve and validation accuracy as an SVG file.
int RunJobsPlot(const std::vector<std::string>& args) {
  Flags flags = PlotFlags();
  if (!flags.Parse(args)) return Usage(flags.error());
  if (flags.positionals().size() != 1) return Usage("jobs plot takes exactly one job ID");
  const std::string id = flags.positionals()[0];
  const std::string out = flags.String("out", "");
  if (out.empty()) {
    flags.Fail("jobs plot needs --out FILE.svg");
  } else if (const std::string extension = Extension(out);
             !absl::EqualsIgnoreCase(extension, ".svg")) {
    flags.Fail(absl::StrCat("--out ", out, ": only SVG output is supported (a file name ending in ",
                            ".svg); got ",
                            extension.empty() ? "no extension" : "'" + extension + "'"));
  }
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  const std::int64_t timeout_ms = UnaryTimeoutMs(flags);
  if (flags.failed()) return Usage(flags.error());
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(connection);
  if (stub == nullptr) return kExitError;

  Job job;
  {
    grpc::ClientContext context;
    PrepareContext(connection, timeout_ms, &context);
    taylorshift::v1::GetJobRequest request;
    request.set_id(id);
    const grpc::Status status = stub->GetJob(&context, request, &job);
    if (!status.ok()) return RpcFailed("GetJob", connection, status);
  }
  taylorshift::v1::GetJobHistoryResponse history;
  if (const grpc::Status status = FetchHistory(*stub, connection, id, timeout_ms, &history);
      !status.ok()) {
    return RpcFailed("GetJobHistory", connection, status);
  }
  const std::string title =
      absl::StrCat(job.id(), " ", job.name(), ": training loss and validation accuracy");
  if (absl::Status written = WriteFileBytes(out, HistorySvg(history, title)); !written.ok()) {
    return LocalError(written);
  }
  std::cout << "wrote " << out << " (" << history.loss_curve_size() << " loss points, "
            << history.validations_size() << " validation runs)" << std::endl;
  return kExitOk;
}

// jobs get|cancel|delete|watch ID.
int RunJobsWithId(const std::string& subcommand, const std::vector<std::string>& args) {
  Flags flags(CommonValueFlags(), {"json", "tls", "curve"});
  if (!flags.Parse(args)) return Usage(flags.error());
  if (flags.positionals().size() != 1) {
    return Usage(absl::StrCat("jobs ", subcommand, " takes exactly one job ID"));
  }
  const std::string id = flags.positionals()[0];
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  const std::int64_t timeout_ms = UnaryTimeoutMs(flags);
  const std::int64_t watch_timeout_ms = WatchTimeoutMs(flags);
  const bool json = flags.Has("json");
  const bool curve = flags.Has("curve");
  if (curve && subcommand != "get") flags.Fail("--curve goes with jobs get");
  if (flags.failed()) return Usage(flags.error());
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(connection);
  if (stub == nullptr) return kExitError;
  if (subcommand == "watch") return WatchJob(*stub, connection, id, watch_timeout_ms, json);

  grpc::ClientContext context;
  PrepareContext(connection, timeout_ms, &context);
  Job job;
  if (subcommand == "get") {
    taylorshift::v1::GetJobRequest request;
    request.set_id(id);
    const grpc::Status status = stub->GetJob(&context, request, &job);
    if (!status.ok()) return RpcFailed("GetJob", connection, status);
    if (!curve) {
      std::cout << (json ? JobJson(job) + "\n" : JobDetails(job));
    } else {
      taylorshift::v1::GetJobHistoryResponse history;
      if (const grpc::Status fetched = FetchHistory(*stub, connection, id, timeout_ms, &history);
          !fetched.ok()) {
        return RpcFailed("GetJobHistory", connection, fetched);
      }
      std::cout << (json ? JobJson(job, &history) + "\n"
                         : absl::StrCat(JobDetails(job), "\n", HistoryText(history)));
    }
  } else if (subcommand == "delete") {
    taylorshift::v1::DeleteJobRequest request;
    request.set_id(id);
    taylorshift::v1::DeleteJobResponse deleted;
    const grpc::Status status = stub->DeleteJob(&context, request, &deleted);
    if (!status.ok()) return RpcFailed("DeleteJob", connection, status);
    if (json) {
      std::cout << DumpJson(MessageJson(deleted)) << "\n";
    } else {
      std::cout << absl::StrFormat("job %s (%s) deleted: %d files, %.1f MiB freed\n", deleted.id(),
                                   JobStateName(deleted.state()), deleted.files_removed(),
                                   static_cast<double>(deleted.bytes_freed()) / (1 << 20));
    }
  } else {
    taylorshift::v1::CancelJobRequest request;
    request.set_id(id);
    const grpc::Status status = stub->CancelJob(&context, request, &job);
    if (!status.ok()) return RpcFailed("CancelJob", connection, status);
    std::cout << (json ? JobJson(job)
                       : absl::StrCat("job ", job.id(), ": ", JobStateName(job.state())))
              << "\n";
  }
  std::cout.flush();
  return kExitOk;
}

}  // namespace

Flags SubmitFlags() { return Flags(With(CommonValueFlags(), {"spec"}), {"json", "tls", "wait"}); }

Flags ListFlags() {
  return Flags(With(CommonValueFlags(), {"state", "kind", "limit"}), {"json", "tls"});
}

Flags PlotFlags() { return Flags(With(CommonValueFlags(), {"out"}), {"tls"}); }

Flags PromoteFlags() {
  return Flags(With(CommonValueFlags(), {"job", "checkpoint", "model"}),
               {"json", "tls", "last", "require-better"});
}

ListOptions ListOptionsFromFlags(Flags& flags) {
  ListOptions options;
  if (flags.Has("state")) {
    absl::StatusOr<taylorshift::v1::JobState> state = ParseJobState(flags.String("state", ""));
    if (state.ok()) {
      options.request.set_state(*state);
    } else {
      flags.Fail(absl::StrCat("--state: ", state.status().message()));
    }
  }
  if (flags.Has("kind")) {
    absl::StatusOr<taylorshift::v1::JobKind> kind = ParseJobKind(flags.String("kind", ""));
    if (kind.ok()) {
      options.request.set_kind(*kind);
    } else {
      flags.Fail(absl::StrCat("--kind: ", kind.status().message()));
    }
  }
  options.limit = flags.Int("limit", 0, 0, INT32_MAX);
  return options;
}

taylorshift::v1::PromoteCheckpointRequest PromoteRequestFromFlags(Flags& flags) {
  taylorshift::v1::PromoteCheckpointRequest request;
  request.set_model(flags.String("model", ""));
  if (request.model().empty()) flags.Fail("--model NAME is required");
  const std::string job = flags.String("job", "");
  const std::string checkpoint = flags.String("checkpoint", "");
  if (flags.Has("job") == flags.Has("checkpoint")) {
    flags.Fail("give exactly one of --job ID and --checkpoint PATH");
  } else if (flags.Has("job")) {
    if (job.empty()) flags.Fail("--job must not be empty");
    request.set_job_id(job);
  } else {
    if (checkpoint.empty()) flags.Fail("--checkpoint must not be empty");
    if (flags.Has("last")) flags.Fail("--last goes with --job (a checkpoint file is one file)");
    request.set_checkpoint(checkpoint);
  }
  request.set_which(flags.Has("last") ? taylorshift::v1::CHECKPOINT_CHOICE_LAST
                                      : taylorshift::v1::CHECKPOINT_CHOICE_BEST);
  request.set_require_at_least_current_accuracy(flags.Has("require-better"));
  return request;
}

int RunTrain(const std::vector<std::string>& args) {
  using taylorshift::v1::TrainingSpec;
  return Submit<TrainingSpec>(
      args, "train", &ParseTrainingSpecYaml,
      [](Jobs::Stub& stub, grpc::ClientContext* context, const TrainingSpec& spec, Job* job) {
        taylorshift::v1::SubmitTrainingRequest request;
        *request.mutable_spec() = spec;
        return stub.SubmitTraining(context, request, job);
      },
      "SubmitTraining");
}

int RunEval(const std::vector<std::string>& args) {
  using taylorshift::v1::EvaluationSpec;
  return Submit<EvaluationSpec>(
      args, "eval", &ParseEvaluationSpecYaml,
      [](Jobs::Stub& stub, grpc::ClientContext* context, const EvaluationSpec& spec, Job* job) {
        taylorshift::v1::SubmitEvaluationRequest request;
        *request.mutable_spec() = spec;
        return stub.SubmitEvaluation(context, request, job);
      },
      "SubmitEvaluation");
}

int RunJobs(const std::vector<std::string>& args) {
  if (args.empty()) {
    return Usage("jobs needs a subcommand: list, get, cancel, delete, watch or plot");
  }
  const std::string subcommand = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (subcommand == "list") return RunJobsList(rest);
  if (subcommand == "plot") return RunJobsPlot(rest);
  if (subcommand == "get" || subcommand == "cancel" || subcommand == "delete" ||
      subcommand == "watch") {
    return RunJobsWithId(subcommand, rest);
  }
  return Usage(absl::StrCat("unknown jobs subcommand '", subcommand,
                            "' (expected list, get, cancel, delete, watch or plot)"));
}

int RunPromote(const std::vector<std::string>& args) {
  Flags flags = PromoteFlags();
  if (!flags.Parse(args)) return Usage(flags.error());
  if (!flags.positionals().empty()) {
    return Usage(absl::StrCat("promote takes no arguments, got '", flags.positionals()[0], "'"));
  }
  const taylorshift::v1::PromoteCheckpointRequest request = PromoteRequestFromFlags(flags);
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  const std::int64_t timeout_ms = UnaryTimeoutMs(flags);
  if (flags.failed()) return Usage(flags.error());
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(connection);
  if (stub == nullptr) return kExitError;
  grpc::ClientContext context;
  PrepareContext(connection, timeout_ms, &context);
  taylorshift::v1::PromoteCheckpointResponse response;
  const grpc::Status status = stub->PromoteCheckpoint(&context, request, &response);
  if (!status.ok()) return RpcFailed("PromoteCheckpoint", connection, status);
  std::cout << (flags.Has("json") ? PromoteJson(response) : PromoteText(response)) << std::endl;
  return kExitOk;
}

}  // namespace ts::client
