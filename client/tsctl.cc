// tsctl: the remote CLI for TaylorShift Serve (models, model, classify, bench, health, and the
// job commands train, eval, jobs, promote in client/jobs_commands.h).
// Exit status: 0 success, 1 an RPC or I/O error (stderr names the gRPC code), a watched job
// that did not succeed or a health check that is not SERVING, 2 a usage error.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/channel.h"
#include "client/classify_input.h"
#include "client/command_line.h"
#include "client/file_util.h"
#include "client/health_check.h"
#include "client/jobs_commands.h"
#include "client/load_generator.h"
#include "client/protocol_calls.h"
#include "client/result_format.h"
#include "common/proto_names.h"
#include "grpcpp/grpcpp.h"
#include "model/json_output.h"
#include "taylorshift/v1/classifier.grpc.pb.h"

namespace ts::client {
namespace {

using taylorshift::v1::Classifier;
using taylorshift::v1::ClassifyRequest;
using taylorshift::v1::ClassifyResponse;

constexpr int kMaxConcurrency = 4096;

constexpr char kUsage[] = R"(usage: tsctl COMMAND [FLAGS] [ARGS]

Commands:
  models   [--json]                       list the served models (table, or one JSON object
                                          per model per line)
  model    [--json] NAME                  show one model
  classify --model NAME [--json] [--concurrency K] [--top-k K]
           [--path auto|direct|efficient|softmax] [--deadline-ms MS] FILE... | -
                                          classify each FILE (.pgm/.ppm/.pnm files are sent
                                          as images, anything else as a byte document; '-'
                                          reads stdin as one document). K requests in flight
                                          (default 1); output is in input order, one line
                                          per input.
  bench    --model NAME [--concurrency K] [--requests N | --duration-s S] [--rate R]
           [--files F... | --lengths DIST] [--seed S] [--path P] [--top-k K]
           [--deadline-ms MS] [--protocol PROTO] [--http HOST:PORT] [--json]
                                          load generator: K closed-loop workers (default 4),
                                          or an open loop at R requests/s with at most K in
                                          flight; stops after N requests or S seconds
                                          (whichever comes first; default 200 requests).
                                          DIST: fixed:N | uniform:MIN:MAX |
                                          lognormal:MEDIAN:SIGMA:MAX (default fixed:1000),
                                          random printable bytes seeded by --seed (default 1);
                                          or the --files inputs round-robin. Reports
                                          throughput, exact p50/p90/p99/max latency, errors by
                                          gRPC code, path and batch-size mix, server
                                          queue/compute time.
                                          PROTO: classify (default; Classifier/Classify),
                                          v2-grpc (KServe v2 ModelInfer, one BYTES element,
                                          same --server), v2-rest (POST /v2/models/NAME/infer)
                                          or rest (POST /v1/models/NAME:classify); the last
                                          two go to the HTTP front end at --http (http.listen;
                                          https:// with the TLS flags), one keep-alive
                                          connection per worker, HTTP errors counted by their
                                          gRPC code. Only classify sends images. v2 answers
                                          carry no path, tokens or server timing.
  health   [--service NAME] [--json]      ask the server's gRPC health service
                                          (grpc.health.v1.Health/Check, no token needed)
                                          about NAME: "" (default) = the server as a whole,
                                          taylorshift.v1.Classifier, taylorshift.v1.Jobs, or
                                          a model name. Prints SERVING, NOT_SERVING or
                                          UNKNOWN (--json: {"service":...,"status":...});
                                          exits 0 only when SERVING (a NAME the server does
                                          not know fails with NOT_FOUND).

Jobs (the Jobs service; the admin role when the server has tokens):
  train    --spec FILE [--wait] [--json]  submit a training job from a YAML spec ('-' =
                                          stdin; keys as in jobs.proto's TrainingSpec).
                                          Prints the job id (--json: the job). --wait
                                          follows it: one line per event (state, "step
                                          40/300 loss 1.234 lr 0.00099 12.3 ex/s", "val acc
                                          0.62 f1 0.58 loss 0.9 ...", checkpoints; --json:
                                          one object per event, then the job as the last
                                          line) and exits 0 only if it SUCCEEDED.
  eval     --spec FILE [--wait] [--json]  the same for an evaluation job (EvaluationSpec)
  jobs list [--state queued|running|succeeded|failed|cancelled]
            [--kind training|evaluation] [--limit N] [--json]
                                          jobs, newest first (all pages, or the first N)
  jobs get ID [--curve] [--json]          one job: progress, metrics with per-class
                                          precision/recall and confusion, checkpoints;
                                          --curve adds text charts of its loss curve and
                                          validation accuracy (--json: "history")
  jobs plot ID --out FILE.svg             write the loss curve and validation accuracy as
                                          an SVG chart (SVG only)
  jobs cancel ID [--json]                 cancel a queued or running job
  jobs delete ID [--json]                 delete a finished job, its checkpoints and
                                          history (promoted models stay served)
  jobs watch ID [--json]                  follow a job as train --wait does
  promote  (--job ID [--last] | --checkpoint PATH) --model NAME [--require-better] [--json]
                                          serve a training job's best (--last: latest)
                                          checkpoint, or a .tsckpt under the data root, as
                                          model NAME (a new name, or a new version of it);
                                          --require-better refuses (FAILED_PRECONDITION)
                                          unless its validation accuracy is at least the
                                          served version's.

Common flags:
  --server ADDR             server address (default 127.0.0.1:50051)
  --tls                     use TLS with the system CA roots
  --ca-file PEM             verify the server with this CA bundle (implies --tls)
  --cert-file PEM --key-file PEM
                            client certificate and key for mutual TLS (implies --tls)
  --tls-server-name NAME    name to check in the server certificate (implies --tls)
  --token TOKEN             send "authorization: Bearer TOKEN" on every call
                            (default: $TSCTL_TOKEN when set)
  --timeout-ms MS           deadline of each call (default 30000; 0 = none); classify and
                            bench use --deadline-ms instead when it is given; following a
                            job (--wait, jobs watch) has no deadline unless this is given
  --max-message-bytes N     largest message sent or received (default 67108864)
  --json                    machine-readable output (one JSON object per line)
  --help                    this text

Flags take their value as "--flag VALUE" or "--flag=VALUE"; "--" ends the flags.
Exit status: 0 success, 1 RPC or I/O error (the gRPC code is named on stderr; classify and
bench report per-request failures and exit 1 after all inputs / when no request succeeded),
a followed job that FAILED or was CANCELLED (stderr names the reason), or a health status
other than SERVING, 2 usage error.
)";

std::unique_ptr<Classifier::Stub> NewStub(const ConnectionOptions& options) {
  std::shared_ptr<grpc::Channel> channel = ConnectOrReport(options);
  return channel == nullptr ? nullptr : Classifier::NewStub(channel);
}

int RunModels(const std::vector<std::string>& args) {
  Flags flags(CommonValueFlags(), {"json", "tls"});
  if (!flags.Parse(args)) return Usage(flags.error());
  if (!flags.positionals().empty()) {
    return Usage(absl::StrCat("models takes no arguments, got '", flags.positionals()[0], "'"));
  }
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  const std::int64_t timeout_ms = flags.Int("timeout-ms", 30000, 0, INT32_MAX);
  if (flags.failed()) return Usage(flags.error());
  std::unique_ptr<Classifier::Stub> stub = NewStub(connection);
  if (stub == nullptr) return kExitError;
  grpc::ClientContext context;
  PrepareContext(connection, timeout_ms, &context);
  taylorshift::v1::ListModelsResponse response;
  const grpc::Status status =
      stub->ListModels(&context, taylorshift::v1::ListModelsRequest(), &response);
  if (!status.ok()) return RpcFailed("ListModels", connection, status);
  if (flags.Has("json")) {
    for (const auto& model : response.models()) std::cout << ModelJson(model) << "\n";
  } else {
    std::cout << ModelTable(response);
  }
  std::cout.flush();
  return kExitOk;
}

int RunModel(const std::vector<std::string>& args) {
  Flags flags(CommonValueFlags(), {"json", "tls"});
  if (!flags.Parse(args)) return Usage(flags.error());
  if (flags.positionals().size() != 1) return Usage("model takes exactly one NAME");
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  const std::int64_t timeout_ms = flags.Int("timeout-ms", 30000, 0, INT32_MAX);
  if (flags.failed()) return Usage(flags.error());
  std::unique_ptr<Classifier::Stub> stub = NewStub(connection);
  if (stub == nullptr) return kExitError;
  grpc::ClientContext context;
  PrepareContext(connection, timeout_ms, &context);
  taylorshift::v1::GetModelRequest request;
  request.set_name(flags.positionals()[0]);
  taylorshift::v1::ModelInfo response;
  const grpc::Status status = stub->GetModel(&context, request, &response);
  if (!status.ok()) return RpcFailed("GetModel", connection, status);
  std::cout << (flags.Has("json") ? ModelJson(response) + "\n" : ModelDetails(response));
  std::cout.flush();
  return kExitOk;
}

// Model, top_k and path shared by classify and bench.
ClassifyRequest PrototypeFromFlags(Flags& flags) {
  ClassifyRequest prototype;
  prototype.set_model(flags.String("model", ""));
  if (prototype.model().empty()) flags.Fail("--model NAME is required");
  prototype.set_top_k(static_cast<std::uint32_t>(flags.Int("top-k", 0, 0, UINT32_MAX)));
  absl::StatusOr<taylorshift::v1::AttentionPath> path = ParsePath(flags.String("path", "auto"));
  if (path.ok()) {
    prototype.set_path(*path);
  } else {
    flags.Fail(absl::StrCat("--path: ", path.status().message()));
  }
  return prototype;
}

// The deadline of each Classify call: --deadline-ms, else --timeout-ms.
std::int64_t ClassifyTimeoutMs(Flags& flags) {
  const std::int64_t timeout_ms = flags.Int("timeout-ms", 30000, 0, INT32_MAX);
  return flags.Int("deadline-ms", timeout_ms, 0, INT32_MAX);
}

int RunClassify(const std::vector<std::string>& args) {
  Flags flags(With(CommonValueFlags(), {"model", "concurrency", "top-k", "path", "deadline-ms"}),
              {"json", "tls"});
  if (!flags.Parse(args)) return Usage(flags.error());
  const std::vector<std::string>& inputs = flags.positionals();
  if (inputs.empty()) return Usage("classify needs at least one FILE (or - for stdin)");
  if (std::count(inputs.begin(), inputs.end(), "-") > 1) {
    return Usage("'-' (stdin) may be given only once");
  }
  const ClassifyRequest prototype = PrototypeFromFlags(flags);
  const auto concurrency =
      static_cast<std::size_t>(flags.Int("concurrency", 1, 1, kMaxConcurrency));
  const std::int64_t timeout_ms = ClassifyTimeoutMs(flags);
  const bool json = flags.Has("json");
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  if (flags.failed()) return Usage(flags.error());

  std::optional<absl::StatusOr<std::string>> stdin_document;
  if (std::count(inputs.begin(), inputs.end(), "-") == 1) {
    stdin_document = ReadStreamBytes(std::cin, "stdin");
  }
  std::unique_ptr<Classifier::Stub> stub = NewStub(connection);
  if (stub == nullptr) return kExitError;

  struct Result {
    bool done = false;
    grpc::Status status;
    ClassifyResponse response;
    double latency_ms = 0;
  };
  std::vector<Result> results(inputs.size());
  absl::Mutex mu;
  std::atomic<std::size_t> next{0};

  const auto classify_one = [&](std::size_t index, Result* result) {
    ClassifyRequest request = prototype;
    request.set_request_id(absl::StrCat("tsctl-", index));
    if (inputs[index] == "-") {
      if (!stdin_document->ok()) {
        result->status = ToGrpcStatus(stdin_document->status());
        return;
      }
      request.set_document(**stdin_document);
    } else if (absl::Status read = SetInputFromFile(inputs[index], &request); !read.ok()) {
      result->status = ToGrpcStatus(read);
      return;
    }
    grpc::ClientContext context;
    PrepareContext(connection, timeout_ms, &context);
    const auto start = std::chrono::steady_clock::now();
    result->status = stub->Classify(&context, request, &result->response);
    result->latency_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  const auto worker = [&] {
    for (std::size_t index = next.fetch_add(1); index < inputs.size(); index = next.fetch_add(1)) {
      Result result;
      classify_one(index, &result);
      result.done = true;
      absl::MutexLock lock(&mu);
      results[index] = std::move(result);
    }
  };
  std::vector<std::thread> workers;
  for (std::size_t i = 0; i < std::min(concurrency, inputs.size()); ++i) {
    workers.emplace_back(worker);
  }

  // Print strictly in input order, each line as soon as it and all before it are done.
  std::size_t failed = 0;
  for (std::size_t index = 0; index < inputs.size(); ++index) {
    Result result;
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&results[index].done));
      result = std::move(results[index]);
    }
    const std::string& file = inputs[index];
    if (result.status.ok()) {
      std::cout << (json ? ClassifyJson(file, result.response, result.latency_ms)
                         : ClassifyText(file, result.response, result.latency_ms))
                << std::endl;
    } else {
      ++failed;
      if (json) {
        std::cout << ClassifyErrorJson(file, result.status) << std::endl;
      } else {
        std::cerr << "tsctl: " << ClassifyErrorText(file, result.status) << std::endl;
      }
    }
  }
  for (std::thread& thread : workers) thread.join();
  if (failed > 0) {
    std::cerr << "tsctl: " << failed << " of " << inputs.size() << " inputs failed\n";
    return kExitError;
  }
  return kExitOk;
}

int RunBench(const std::vector<std::string>& args) {
  Flags flags(
      With(CommonValueFlags(), {"model", "concurrency", "requests", "duration-s", "rate", "lengths",
                                "seed", "path", "top-k", "deadline-ms", "protocol", "http"}),
      {"json", "tls"}, {"files"});
  if (!flags.Parse(args)) return Usage(flags.error());
  if (!flags.positionals().empty()) {
    return Usage(absl::StrCat("bench takes no positional arguments, got '", flags.positionals()[0],
                              "' (inputs go after --files)"));
  }
  const ClassifyRequest prototype = PrototypeFromFlags(flags);
  LoadOptions load;
  load.concurrency = static_cast<int>(flags.Int("concurrency", 4, 1, kMaxConcurrency));
  load.duration_s = flags.Double("duration-s", 0, 0);
  load.max_requests = flags.Int("requests", flags.Has("duration-s") ? 0 : 200, 0, INT64_MAX);
  load.rate_rps = flags.Double("rate", 0, 0);
  if (flags.failed()) return Usage(flags.error());
  if (absl::Status valid = ValidateLoadOptions(load); !valid.ok()) {
    return Usage(std::string(valid.message()));
  }
  if (flags.Has("files") && flags.Has("lengths")) {
    return Usage("--files and --lengths are alternatives");
  }
  absl::StatusOr<BenchProtocol> protocol = ParseBenchProtocol(flags.String("protocol", "classify"));
  if (!protocol.ok()) return Usage(absl::StrCat("--protocol: ", protocol.status().message()));
  const std::string http = flags.String("http", "");
  if (flags.Has("http") && http.empty()) return Usage("--http must not be empty");
  if (absl::Status valid = ValidateProtocolFlags(*protocol, http, false); !valid.ok()) {
    return Usage(std::string(valid.message()));
  }
  const auto seed = static_cast<std::uint64_t>(flags.Int("seed", 1, 0, INT64_MAX));
  const std::int64_t timeout_ms = ClassifyTimeoutMs(flags);
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  if (flags.failed()) return Usage(flags.error());
  std::string http_base_url;
  if (UsesHttp(*protocol)) {
    absl::StatusOr<std::string> url = HttpBaseUrl(http, connection);
    if (!url.ok()) return Usage(std::string(url.status().message()));
    http_base_url = *std::move(url);
  }

  std::optional<RequestGenerator> generator;
  if (flags.Has("files")) {
    std::vector<ClassifyRequest> inputs;
    for (const std::string& file : flags.List("files")) {
      ClassifyRequest input;
      if (absl::Status read = SetInputFromFile(file, &input); !read.ok()) {
        std::cerr << "tsctl: " << GrpcCodeName(ToGrpcStatus(read).error_code()) << ": "
                  << read.message() << "\n";
        return kExitError;
      }
      if (absl::Status valid = ValidateProtocolFlags(*protocol, http, input.has_image());
          !valid.ok()) {
        return Usage(absl::StrCat(file, ": ", valid.message()));
      }
      if (*protocol == BenchProtocol::kV2Rest) {
        if (absl::StatusOr<std::string> body = V2RestBody(input); !body.ok()) {
          return Usage(absl::StrCat(file, ": ", body.status().message()));
        }
      }
      inputs.push_back(std::move(input));
    }
    absl::StatusOr<RequestGenerator> round_robin =
        RequestGenerator::RoundRobin(prototype, std::move(inputs));
    if (!round_robin.ok()) return Usage(std::string(round_robin.status().message()));
    generator.emplace(*std::move(round_robin));
  } else {
    absl::StatusOr<LengthDistribution> lengths =
        LengthDistribution::Parse(flags.String("lengths", "fixed:1000"));
    if (!lengths.ok()) return Usage(absl::StrCat("--lengths: ", lengths.status().message()));
    generator.emplace(RequestGenerator::Synthetic(prototype, *lengths, seed));
  }

  ClassifyCall call;
  if (UsesHttp(*protocol)) {
    absl::StatusOr<ClassifyCall> http_call =
        MakeHttpCall(*protocol, http_base_url, connection, timeout_ms);
    if (!http_call.ok()) return Usage(std::string(http_call.status().message()));
    call = *std::move(http_call);
  } else {
    std::shared_ptr<grpc::Channel> channel = ConnectOrReport(connection);
    if (channel == nullptr) return kExitError;
    call = *protocol == BenchProtocol::kV2Grpc ? MakeV2GrpcCall(channel, connection, timeout_ms)
                                               : MakeClassifyCall(channel, connection, timeout_ms);
  }
  const BenchReport report = RunLoad(load, *generator, call);
  std::cout << (flags.Has("json") ? FormatBenchJson(report) + "\n" : FormatBenchText(report));
  std::cout.flush();
  if (report.ok == 0) {
    std::vector<std::string> errors;
    for (const auto& [code, count] : report.errors)
      errors.push_back(absl::StrCat(code, " x", count));
    std::cerr << "tsctl: no request to "
              << (UsesHttp(*protocol) ? http_base_url : connection.server)
              << " succeeded: " << absl::StrJoin(errors, ", ") << "\n";
    return kExitError;
  }
  return kExitOk;
}

int RunHealth(const std::vector<std::string>& args) {
  Flags flags(With(CommonValueFlags(), {"service"}), {"json", "tls"});
  if (!flags.Parse(args)) return Usage(flags.error());
  if (!flags.positionals().empty()) {
    return Usage(absl::StrCat("health takes no arguments, got '", flags.positionals()[0],
                              "' (name the service with --service)"));
  }
  const std::string service = flags.String("service", "");
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  const std::int64_t timeout_ms = flags.Int("timeout-ms", 30000, 0, INT32_MAX);
  if (flags.failed()) return Usage(flags.error());
  std::shared_ptr<grpc::Channel> channel = ConnectOrReport(connection);
  if (channel == nullptr) return kExitError;
  grpc::ClientContext context;
  PrepareContext(connection, timeout_ms, &context);
  ServingStatus status = ServingStatus::kUnknown;
  const grpc::Status call = CheckHealth(channel, service, &context, &status);
  if (!call.ok()) {
    return RpcFailed(service.empty() ? std::string("Health/Check")
                                     : absl::StrCat("Health/Check of '", service, "'"),
                     connection, call);
  }
  if (flags.Has("json")) {
    std::cout << DumpJson(Json{{"service", service}, {"status", ServingStatusName(status)}})
              << "\n";
  } else {
    std::cout << ServingStatusName(status) << "\n";
  }
  std::cout.flush();
  return status == ServingStatus::kServing ? kExitOk : kExitError;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool help = args.empty() || args[0] == "help" ||
                    std::find(args.begin(), args.end(), "--help") != args.end() ||
                    std::find(args.begin(), args.end(), "-h") != args.end();
  if (args.empty()) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  if (help) {
    std::cout << kUsage;
    return kExitOk;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "models") return RunModels(args);
  if (command == "model") return RunModel(args);
  if (command == "classify") return RunClassify(args);
  if (command == "bench") return RunBench(args);
  if (command == "health") return RunHealth(args);
  if (command == "train") return RunTrain(args);
  if (command == "eval") return RunEval(args);
  if (command == "jobs") return RunJobs(args);
  if (command == "promote") return RunPromote(args);
  return Usage(absl::StrCat("unknown command '", command, "'"));
}

}  // namespace
}  // namespace ts::client

int main(int argc, char** argv) { return ts::client::Main(argc, argv); }
