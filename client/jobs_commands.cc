#include "client/jobs_commands.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "api/api_json.h"
#include "api/checkpoint_transfer.h"
#include "api/proto_names.h"
#include "client/command_line.h"
#include "client/file_util.h"
#include "client/job_format.h"
#include "client/job_plot.h"
#include "client/progress_line.h"
#include "common/command_line.h"
#include "common/file_io.h"
#include "grpcpp/grpcpp.h"
#include "job_contract/job_spec_yaml.h"
#include "taylorshift/v1/jobs.grpc.pb.h"

namespace ts::client {
namespace {

using taylorshift::v1::Job;
using taylorshift::v1::JobEvent;
using taylorshift::v1::Jobs;

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

// A spec file's size at most: the server's default jobs.limits.max_spec_bytes. Checked before
// the file is read or parsed, so an 80 MB file that is mostly a comment costs nothing.
constexpr std::uintmax_t kMaxSpecFileBytes = 1 << 20;

absl::Status SpecTooLarge(const std::string& file, std::uintmax_t bytes) {
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": ", bytes, " bytes; a spec file is at most ", kMaxSpecFileBytes,
                   " bytes (the server's default jobs.limits.max_spec_bytes)"));
}

// The spec file's text ("-" = stdin).
absl::StatusOr<std::string> ReadSpec(const std::string& file) {
  if (file == "-") {
    std::string text(kMaxSpecFileBytes + 1, '\0');
    std::cin.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(std::cin.gcount()));
    if (std::cin.bad()) return absl::DataLossError("stdin: read failed");
    if (text.size() > kMaxSpecFileBytes) return SpecTooLarge("stdin", text.size());
    return text;
  }
  std::error_code error;
  const std::uintmax_t bytes = std::filesystem::file_size(file, error);
  if (!error && bytes > kMaxSpecFileBytes) return SpecTooLarge(file, bytes);
  return ReadFile(file, "spec file");
}

// A watch lasts as long as the job: no deadline unless --timeout-ms is given.
std::int64_t WatchTimeoutMs(const ConnectionFlags& flags) { return flags.TimeoutMs(0); }

// A download without --timeout-ms: a checkpoint of some GiB on a slow link takes minutes.
constexpr std::int64_t kDownloadTimeoutMs = 30 * 60 * 1000;

struct SubmitFlags {
  ConnectionFlags common;
  std::string spec;
  bool wait = false;
  bool json = false;
};

// jobs get|cancel|delete|watch ID (--curve: get only) and jobs plot ID --out FILE.csv|FILE.svg.
struct JobFlags {
  ConnectionFlags common;
  std::string id;
  bool json = false;
  bool curve = false;
  std::string out;
};

// The unary call `rpc` with the request that names job flags.id; false after reporting a failure.
template <typename Request, typename Response>
bool CallWithId(Jobs::Stub& stub,
                grpc::Status (Jobs::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                const std::string& rpc, const JobFlags& flags, Response* response) {
  Request request;
  request.set_id(flags.id);
  return CallOrReport(stub, method, rpc, flags.common.connection, flags.common.UnaryTimeoutMs(),
                      request, response);
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
  // Events can be minutes apart: the progress display on stderr keeps the elapsed time, rate
  // and ETA moving between them.
  absl::Mutex mu;
  Progress latest;
  ProgressTicker ticker(StderrProgressOptions(), &std::cerr, [&] {
    absl::MutexLock lock(&mu);
    return latest;
  });
  while (reader->Read(&event)) {
    {
      absl::MutexLock lock(&mu);
      latest = WatchProgress(event.job());
    }
    ticker.PrintAbove(
        [&] { std::cout << (json ? JobEventJson(event) : JobEventText(event)) << std::endl; });
    last = event.job();
  }
  ticker.Stop();
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
template <typename Request>
int Submit(const SubmitFlags& flags,
           absl::StatusOr<std::decay_t<decltype(Request().spec())>> (*parse)(const std::string&),
           grpc::Status (Jobs::Stub::*submit)(grpc::ClientContext*, const Request&, Job*),
           const std::string& rpc) {
  const std::string& file = flags.spec;
  const ConnectionOptions& connection = flags.common.connection;
  absl::StatusOr<std::string> text = ReadSpec(file);
  if (!text.ok()) return LocalError(text.status());
  auto spec = parse(*text);
  if (!spec.ok()) {
    return LocalError(
        absl::Status(spec.status().code(), absl::StrCat(file, ": ", spec.status().message())));
  }
  Request request;
  *request.mutable_spec() = *std::move(spec);
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(connection);
  Job job;
  if (stub == nullptr ||
      !CallOrReport(*stub, submit, rpc, connection, flags.common.UnaryTimeoutMs(), request, &job)) {
    return kExitError;
  }
  if (!flags.wait) {
    std::cout << (flags.json ? JobJson(job) : job.id()) << std::endl;
    return kExitOk;
  }
  return WatchJob(*stub, connection, job.id(), WatchTimeoutMs(flags.common), flags.json);
}

int RunJobsList(const ListFlags& flags) {
  taylorshift::v1::ListJobsRequest request;
  request.set_state(flags.state);
  request.set_kind(flags.kind);
  const std::int64_t limit = flags.limit;
  const ConnectionOptions& connection = flags.common.connection;
  const std::int64_t timeout_ms = flags.common.UnaryTimeoutMs();
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(connection);
  if (stub == nullptr) return kExitError;

  std::vector<Job> jobs;
  while (true) {
    const std::int64_t remaining = limit - static_cast<std::int64_t>(jobs.size());
    // Page size 0 = the server's default page.
    request.set_page_size(limit > 0 ? static_cast<std::uint32_t>(std::min(remaining, kMaxPageSize))
                                    : 0);
    taylorshift::v1::ListJobsResponse response;
    if (!CallOrReport(*stub, &Jobs::Stub::ListJobs, "ListJobs", connection, timeout_ms, request,
                      &response)) {
      return kExitError;
    }
    for (Job& job : *response.mutable_jobs()) jobs.push_back(std::move(job));
    // An empty page with a token would never end; the server does not send one, but be safe.
    if (response.next_page_token().empty() || response.jobs().empty()) break;
    if (limit > 0 && static_cast<std::int64_t>(jobs.size()) >= limit) break;
    request.set_page_token(response.next_page_token());
  }
  if (limit > 0 && static_cast<std::int64_t>(jobs.size()) > limit) jobs.resize(limit);
  if (flags.json) {
    for (const Job& job : jobs) std::cout << JobJson(job) << "\n";
  } else {
    std::cout << JobTable(jobs);
  }
  std::cout.flush();
  return kExitOk;
}

// Every page of the job's history, followed from the first to the last and concatenated; false
// after reporting a failure.
bool FetchHistory(Jobs::Stub& stub, const JobFlags& flags,
                  taylorshift::v1::GetJobHistoryResponse* history) {
  const ConnectionOptions& connection = flags.common.connection;
  taylorshift::v1::GetJobHistoryRequest request;
  request.set_id(flags.id);
  request.set_page_size(kHistoryPageSize);
  for (int page = 0; page < kMaxHistoryPages; ++page) {
    taylorshift::v1::GetJobHistoryResponse response;
    if (!CallOrReport(stub, &Jobs::Stub::GetJobHistory, "GetJobHistory", connection,
                      flags.common.UnaryTimeoutMs(), request, &response)) {
      return false;
    }
    const bool empty = response.loss_curve().empty() && response.validations().empty();
    history->MergeFrom(response);
    if (response.next_page_token().empty()) {
      history->clear_next_page_token();
      return true;
    }
    // A page that moves nothing forward would repeat forever.
    if (empty || response.next_page_token() == request.page_token()) {
      RpcFailed("GetJobHistory", connection,
                grpc::Status(grpc::StatusCode::INTERNAL,
                             "the server answered a page without progress (an empty page, or the "
                             "same page_token again)"));
      return false;
    }
    request.set_page_token(response.next_page_token());
  }
  RpcFailed("GetJobHistory", connection,
            grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                         absl::StrCat("job ", flags.id, " has more than ", kMaxHistoryPages,
                                      " pages of history; stopped following them")));
  return false;
}

// "F.png" → ".png"; "" when the file name has no extension.
std::string Extension(const std::string& path) {
  const std::size_t dot = path.find_last_of("./");
  return dot == std::string::npos || path[dot] == '/' ? "" : path.substr(dot);
}

// jobs plot's --out: a .csv or .svg file name.
std::string CheckPlotName(const std::string& out) {
  const std::string extension = Extension(out);
  if (absl::EqualsIgnoreCase(extension, ".csv") || absl::EqualsIgnoreCase(extension, ".svg")) {
    return "";
  }
  return absl::StrCat("jobs plot writes CSV or SVG (a file name ending in .csv or .svg); got ",
                      extension.empty() ? "no extension" : "'" + extension + "'", " in ", out);
}

// jobs plot ID --out F.csv|F.svg: the job's loss curve and validation runs as CSV data or an
// SVG picture.
int RunJobsPlot(const JobFlags& flags) {
  const std::string& out = flags.out;
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(flags.common.connection);
  if (stub == nullptr) return kExitError;

  Job job;
  if (!CallWithId(*stub, &Jobs::Stub::GetJob, "GetJob", flags, &job)) return kExitError;
  if (job.kind() == taylorshift::v1::JOB_KIND_EVALUATION || job.has_evaluation()) {
    // An empty chart would read as "nothing learned yet"; say what there is instead.
    std::cerr << "tsctl: job " << job.id()
              << " is an evaluation: evaluations have no loss curve or validation runs to plot "
                 "(tsctl jobs get "
              << job.id() << " shows its report)\n";
    return kExitError;
  }
  taylorshift::v1::GetJobHistoryResponse history;
  if (!FetchHistory(*stub, flags, &history)) return kExitError;
  const std::string title =
      absl::StrCat(job.id(), " ", job.name(), ": training loss and validation accuracy");
  const bool csv = absl::EqualsIgnoreCase(Extension(out), ".csv");
  if (absl::Status written =
          WriteFileBytes(out, csv ? HistoryCsv(history) : HistorySvg(history, title));
      !written.ok()) {
    return LocalError(written);
  }
  std::cout << "wrote " << out << " (" << history.loss_curve_size() << " loss points, "
            << history.validations_size() << " validation runs)" << std::endl;
  return kExitOk;
}

// jobs get|cancel|delete|watch ID.
int RunJobsWithId(const std::string& subcommand, const JobFlags& flags) {
  const std::string& id = flags.id;
  const ConnectionOptions& connection = flags.common.connection;
  const std::int64_t watch_timeout_ms = WatchTimeoutMs(flags.common);
  const bool json = flags.json;
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(connection);
  if (stub == nullptr) return kExitError;
  if (subcommand == "watch") return WatchJob(*stub, connection, id, watch_timeout_ms, json);

  Job job;
  if (subcommand == "get") {
    if (!CallWithId(*stub, &Jobs::Stub::GetJob, "GetJob", flags, &job)) return kExitError;
    if (!flags.curve) {
      std::cout << (json ? JobJson(job) + "\n" : JobDetails(job));
    } else {
      taylorshift::v1::GetJobHistoryResponse history;
      if (!FetchHistory(*stub, flags, &history)) return kExitError;
      std::cout << (json ? JobJson(job, &history) + "\n"
                         : absl::StrCat(JobDetails(job), "\n", HistoryText(history)));
    }
  } else if (subcommand == "delete") {
    taylorshift::v1::DeleteJobResponse deleted;
    if (!CallWithId(*stub, &Jobs::Stub::DeleteJob, "DeleteJob", flags, &deleted)) return kExitError;
    if (json) {
      std::cout << DeleteJson(deleted) << "\n";
    } else {
      std::cout << absl::StrFormat("job %s (%s) deleted: %d files, %.1f MiB freed\n", deleted.id(),
                                   JobStateName(deleted.state()), deleted.files_removed(),
                                   static_cast<double>(deleted.bytes_freed()) / (1 << 20));
    }
  } else {
    if (!CallWithId(*stub, &Jobs::Stub::CancelJob, "CancelJob", flags, &job)) return kExitError;
    // A queued job is cancelled at once; a running one is only asked to stop (its worker gets
    // SIGTERM), so the job CancelJob answers is still RUNNING: do not print that as its state.
    std::cout << (json ? JobJson(job)
                  : IsFinalState(job.state())
                      ? absl::StrCat("job ", job.id(), ": ", JobStateName(job.state()))
                      : absl::StrCat("cancel requested; job ", job.id(),
                                     " is stopping (tsctl jobs watch ", job.id(),
                                     " follows it to the end)"))
              << "\n";
  }
  std::cout.flush();
  return kExitOk;
}

// promote: serve a job's checkpoint or a checkpoint file as a model (version).
int RunPromote(const PromoteFlags& flags) {
  const ConnectionOptions& connection = flags.common.connection;
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(connection);
  taylorshift::v1::PromoteCheckpointResponse response;
  if (flags.rollback) {
    taylorshift::v1::RollbackPromotionRequest request;
    request.set_model(flags.request.model());
    if (stub == nullptr ||
        !CallOrReport(*stub, &Jobs::Stub::RollbackPromotion, "RollbackPromotion", connection,
                      flags.common.UnaryTimeoutMs(), request, &response)) {
      return kExitError;
    }
    std::cout << (flags.json ? PromoteJson(response) : RollbackText(response)) << std::endl;
    return kExitOk;
  }
  if (stub == nullptr ||
      !CallOrReport(*stub, &Jobs::Stub::PromoteCheckpoint, "PromoteCheckpoint", connection,
                    flags.common.UnaryTimeoutMs(), flags.request, &response)) {
    return kExitError;
  }
  std::cout << (flags.json ? PromoteJson(response) : PromoteText(response)) << std::endl;
  return kExitOk;
}

// download: a job's checkpoint or a served model's into a file, checked against its CRC-32.
int RunDownload(const DownloadFlags& flags) {
  const ConnectionOptions& connection = flags.common.connection;
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(connection);
  if (stub == nullptr) return kExitError;
  grpc::ClientContext context;
  PrepareContext(connection, flags.common.TimeoutMs(kDownloadTimeoutMs), &context);
  std::unique_ptr<grpc::ClientReader<taylorshift::v1::CheckpointChunk>> reader =
      stub->DownloadCheckpoint(&context, flags.request);
  bool call_failed = false;
  absl::StatusOr<taylorshift::v1::CheckpointHeader> header =
      api::ReceiveCheckpoint(context, *reader, flags.out, flags.max_bytes, &call_failed);
  if (!header.ok()) {
    return call_failed ? RpcFailed("DownloadCheckpoint", connection, ToGrpcStatus(header.status()))
                       : LocalError(header.status());
  }
  if (flags.json) {
    Json json = MessageJson(*header);
    json["path"] = flags.out;
    std::cout << DumpJson(json) << std::endl;
  } else {
    std::cout << absl::StrFormat("wrote %s: %s version %s, %d bytes, CRC-32 %08x checked",
                                 flags.out, header->source(), header->version(),
                                 header->size_bytes(), header->crc32())
              << std::endl;
  }
  return kExitOk;
}

int RunTrain(const SubmitFlags& flags) {
  return Submit(flags, &ParseTrainingSpecYaml, &Jobs::Stub::SubmitTraining, "SubmitTraining");
}

int RunEval(const SubmitFlags& flags) {
  return Submit(flags, &ParseEvaluationSpecYaml, &Jobs::Stub::SubmitEvaluation, "SubmitEvaluation");
}

// train / eval SUBMIT: the spec and how to follow the job.
void AddSubmitCommand(Commands& commands, const std::string& name, const std::string& description,
                      int (*run)(const SubmitFlags&)) {
  auto flags = std::make_shared<SubmitFlags>();
  CLI::App* command = commands.app().add_subcommand(name, description);
  command->add_option("--spec", flags->spec, "the YAML spec ('-' = stdin)")
      ->required()
      ->check(NonEmpty());
  command->add_flag("--wait", flags->wait,
                    "follow the job: one line per event (--json: one object per event, then the "
                    "job); exit 0 only if it SUCCEEDED");
  command->add_flag("--json", flags->json, "print the job as JSON");
  AddConnectionFlags(*command, &flags->common);
  commands.OnRun(*command, [flags, run] { return run(*flags); });
}

// jobs SUBCOMMAND ID.
CLI::App* AddJobCommand(Commands& commands, CLI::App& jobs, const std::string& name,
                        const std::string& description, const std::shared_ptr<JobFlags>& flags) {
  CLI::App* command = jobs.add_subcommand(name, description);
  command->add_option("ID", flags->id, "the job")->required();
  if (name != "plot") command->add_flag("--json", flags->json, "JSON output");
  AddConnectionFlags(*command, &flags->common);
  commands.OnRun(*command, [flags, name] {
    return name == "plot" ? RunJobsPlot(*flags) : RunJobsWithId(name, *flags);
  });
  return command;
}

}  // namespace

int RunPromotionHistory(const ConnectionFlags& common, const std::string& model, bool json) {
  std::unique_ptr<Jobs::Stub> stub = NewJobsStub(common.connection);
  taylorshift::v1::ListPromotionsRequest request;
  request.set_model(model);
  taylorshift::v1::ListPromotionsResponse response;
  if (stub == nullptr ||
      !CallOrReport(*stub, &Jobs::Stub::ListPromotions, "ListPromotions", common.connection,
                    common.UnaryTimeoutMs(), request, &response)) {
    return kExitError;
  }
  if (json) {
    for (const auto& entry : response.entries()) std::cout << PromotionEntryJson(entry) << "\n";
  } else if (response.entries_size() == 0) {
    std::cout << "model " << model << " was never promoted\n";
  } else {
    std::cout << PromotionHistoryTable(response);
  }
  std::cout.flush();
  return kExitOk;
}

void AddListFlags(CLI::App& command, ListFlags* flags) {
  AddParsedOption(command, "--state", &flags->state, ParseJobState,
                  "only jobs in this state: queued|running|succeeded|failed|cancelled");
  AddParsedOption(command, "--kind", &flags->kind, ParseJobKind,
                  "only jobs of this kind: training|evaluation");
  command.add_option("--limit", flags->limit, "at most N jobs (0 = all)")
      ->check(IntegerIn(0, INT32_MAX));
}

void AddPromoteFlags(CLI::App& command, PromoteFlags* flags) {
  taylorshift::v1::PromoteCheckpointRequest* request = &flags->request;
  request->set_which(taylorshift::v1::CHECKPOINT_CHOICE_BEST);
  CLI::App* source =
      command.add_option_group("Source", "what to promote (exactly one, none with --rollback)");
  CLI::Option* job = source
                         ->add_option_function<std::string>(
                             "--job", [request](const std::string& id) { request->set_job_id(id); },
                             "a training job: its best checkpoint (--last: its latest)")
                         ->check(NonEmpty());
  CLI::Option* checkpoint =
      source
          ->add_option_function<std::string>(
              "--checkpoint", [request](const std::string& path) { request->set_checkpoint(path); },
              "a .tsckpt file under the server's data root")
          ->check(NonEmpty());
  source->require_option(1);
  // Option callbacks run before the groups' requirements are checked: --rollback lifts the source.
  CLI::Option* rollback =
      command
          .add_flag_callback(
              "--rollback",
              [flags, source] {
                flags->rollback = true;
                source->require_option(0);
              },
              "serve the model's previous version again (down to its configured checkpoint) "
              "instead of promoting")
          ->excludes(job)
          ->excludes(checkpoint);
  command
      .add_flag_callback(
          "--force", [request] { request->set_force(true); },
          "replace a served version whose labels, input kind (bytes/pixels) or max length differ "
          "(refused without it, naming the differences)")
      ->excludes(rollback);
  command
      .add_option("--model", *request->mutable_model(),
                  "serve it as model NAME (a new name, or a new version of it)")
      ->required()
      ->check(NonEmpty());
  command
      .add_flag_callback(
          "--last", [request] { request->set_which(taylorshift::v1::CHECKPOINT_CHOICE_LAST); },
          "the job's latest checkpoint instead of its best")
      ->needs(job);
  command.add_flag_callback(
      "--require-better", [request] { request->set_require_at_least_current_accuracy(true); },
      "refuse (FAILED_PRECONDITION) unless its validation accuracy is at least the served "
      "version's");
}

void AddDownloadFlags(CLI::App& command, DownloadFlags* flags) {
  taylorshift::v1::DownloadCheckpointRequest* request = &flags->request;
  CLI::App* source = command.add_option_group("Source", "what to download (exactly one)");
  CLI::Option* job = source
                         ->add_option_function<std::string>(
                             "--job", [request](const std::string& id) { request->set_job_id(id); },
                             "a training job: its best checkpoint (--last: its latest)")
                         ->check(NonEmpty());
  source
      ->add_option_function<std::string>(
          "--model", [request](const std::string& name) { request->set_model(name); },
          "a served model: the checkpoint of the version served now (a promotion's included)")
      ->check(NonEmpty());
  source->require_option(1);
  command
      .add_flag_callback(
          "--last", [request] { request->set_which(taylorshift::v1::CHECKPOINT_CHOICE_LAST); },
          "the job's latest checkpoint instead of its best")
      ->needs(job);
  command.add_option("--out", flags->out, "the .tsckpt file to write (replaced atomically)")
      ->required()
      ->check(NonEmpty());
  command.add_option("--max-bytes", flags->max_bytes, "refuse a checkpoint larger than this")
      ->capture_default_str()
      ->check(IntegerIn(1, INT64_MAX));
}

void AddJobCommands(Commands& commands) {
  AddSubmitCommand(commands, "train",
                   "submit a training job from a YAML spec (keys as in jobs.proto's "
                   "TrainingSpec); prints the job id (--json: the job)",
                   RunTrain);
  AddSubmitCommand(commands, "eval",
                   "submit an evaluation job from a YAML spec (keys as in jobs.proto's "
                   "EvaluationSpec); prints the job id (--json: the job)",
                   RunEval);

  CLI::App* jobs = commands.app().add_subcommand(
      "jobs", "the Jobs service (the admin role when the server has tokens)");
  // At most one (so a job ID may be "list"), and one is needed.
  jobs->require_subcommand(0, 1);
  jobs->callback([jobs] {
    if (jobs->get_subcommands().empty()) {
      throw CLI::RequiredError("jobs needs a subcommand: list, get, cancel, delete, watch or plot",
                               CLI::ExitCodes::RequiredError);
    }
  });
  {
    auto flags = std::make_shared<ListFlags>();
    CLI::App* list = jobs->add_subcommand("list", "jobs, newest first (all pages, or the first N)");
    AddListFlags(*list, flags.get());
    list->add_flag("--json", flags->json, "one JSON object per job per line");
    AddConnectionFlags(*list, &flags->common);
    commands.OnRun(*list, [flags] { return RunJobsList(*flags); });
  }
  auto get = std::make_shared<JobFlags>();
  AddJobCommand(
      commands, *jobs, "get",
      "one job: progress, metrics with per-class precision/recall and confusion, checkpoints", get)
      ->add_flag("--curve", get->curve,
                 "add text charts of the loss curve and validation accuracy (--json: "
                 "\"history\")");
  auto plot = std::make_shared<JobFlags>();
  AddJobCommand(commands, *jobs, "plot",
                "write the loss curve and validation runs as CSV data or an SVG chart", plot)
      ->add_option("--out", plot->out, "the file: .csv (data) or .svg (a picture)")
      ->required()
      ->check(CLI::Validator(CheckPlotName, "FILE.csv|FILE.svg"));
  AddJobCommand(commands, *jobs, "cancel", "cancel a queued or running job",
                std::make_shared<JobFlags>());
  AddJobCommand(commands, *jobs, "delete",
                "delete a finished job, its checkpoints and history (promoted models stay "
                "served)",
                std::make_shared<JobFlags>());
  AddJobCommand(commands, *jobs, "watch", "follow a job as train --wait does",
                std::make_shared<JobFlags>());

  auto promote = std::make_shared<PromoteFlags>();
  CLI::App* command = commands.app().add_subcommand(
      "promote",
      "serve a training job's best (--last: latest) checkpoint, or a .tsckpt under the data "
      "root, as model NAME; --rollback serves its previous version again");
  AddPromoteFlags(*command, promote.get());
  command->add_flag("--json", promote->json, "JSON output");
  AddConnectionFlags(*command, &promote->common);
  commands.OnRun(*command, [promote] { return RunPromote(*promote); });

  auto download = std::make_shared<DownloadFlags>();
  CLI::App* download_command = commands.app().add_subcommand(
      "download",
      "write a training job's best (--last: latest) checkpoint, or the checkpoint a model is "
      "served from, to a file (its size and CRC-32 checked); it loads with tsmodel and serves "
      "with tsserver --model NAME=FILE");
  AddDownloadFlags(*download_command, download.get());
  download_command->add_flag("--json", download->json,
                             "print the checkpoint's header (version, size, CRC-32, source) as "
                             "JSON");
  AddConnectionFlags(*download_command, &download->common);
  commands.OnRun(*download_command, [download] { return RunDownload(*download); });
}

}  // namespace ts::client
