// tsctl: the remote CLI for TaylorShift Serve (models, model, classify, bench, health, and the
// job commands train, eval, jobs, promote in client/jobs_commands.h).
// Exit status: 0 success, 1 an RPC or I/O error (stderr names the gRPC code), a watched job
// that did not succeed or a health check that is not SERVING, 2 a usage error.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
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
#include "api/proto_names.h"
#include "client/channel.h"
#include "client/classify_input.h"
#include "client/command_line.h"
#include "client/jobs_commands.h"
#include "client/load_generator.h"
#include "client/progress_line.h"
#include "client/protocol_calls.h"
#include "client/result_format.h"
#include "common/command_line.h"
#include "common/json_output.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "taylorshift/v1/classifier.grpc.pb.h"

namespace ts::client {
namespace {

using taylorshift::v1::Classifier;
using taylorshift::v1::ClassifyRequest;
using taylorshift::v1::ClassifyResponse;

constexpr int kMaxConcurrency = 4096;

// models, model NAME.
struct ModelsFlags {
  ConnectionFlags common;
  std::string name;
  bool json = false;
};

// classify and bench: the request every input is sent as, and each call's deadline.
struct ClassifyFlags {
  ConnectionFlags common;
  ClassifyRequest prototype;
  std::optional<std::int64_t> deadline_ms;
  bool json = false;
  // The deadline of each Classify call: --deadline-ms, else --timeout-ms.
  std::int64_t TimeoutMs() const { return deadline_ms.value_or(common.UnaryTimeoutMs()); }
};

struct ClassifyInputs {
  ClassifyFlags classify;
  std::int64_t concurrency = 1;
  std::vector<std::string> inputs;
};

struct BenchFlags {
  ClassifyFlags classify;
  std::int64_t concurrency = 4;
  std::optional<std::int64_t> requests;
  std::optional<double> duration_s;
  double rate = 0;
  std::vector<std::string> files;
  std::optional<LengthDistribution> lengths;
  std::int64_t seed = 1;
  BenchProtocol protocol = BenchProtocol::kClassify;
  std::string http;
};

struct HealthFlags {
  ConnectionFlags common;
  std::string service;
  bool json = false;
};

std::unique_ptr<Classifier::Stub> NewStub(const ConnectionOptions& options) {
  std::shared_ptr<grpc::Channel> channel = ConnectOrReport(options);
  return channel == nullptr ? nullptr : Classifier::NewStub(channel);
}

// What the server keeps of a document sent to `flags`' model: its GetModel answer with
// --over-length applied. A server that does not answer GetModel (an older one, a proxy) leaves the
// limits unknown, and documents are sent whole up to --max-message-bytes.
DocumentLimits FetchDocumentLimits(Classifier::Stub& stub, const ClassifyFlags& flags) {
  const ConnectionOptions& connection = flags.common.connection;
  taylorshift::v1::GetModelRequest request;
  request.set_name(flags.prototype.model());
  taylorshift::v1::ModelInfo info;
  grpc::ClientContext context;
  PrepareContext(connection, flags.common.UnaryTimeoutMs(), &context);
  const bool known = stub.GetModel(&context, request, &info).ok();
  return LimitsFor(known ? &info : nullptr, flags.prototype.over_length(),
                   connection.max_message_bytes);
}

int RunModels(const ModelsFlags& flags) {
  std::unique_ptr<Classifier::Stub> stub = NewStub(flags.common.connection);
  taylorshift::v1::ListModelsResponse response;
  if (stub == nullptr || !CallOrReport(*stub, &Classifier::Stub::ListModels, "ListModels",
                                       flags.common.connection, flags.common.UnaryTimeoutMs(),
                                       taylorshift::v1::ListModelsRequest(), &response)) {
    return kExitError;
  }
  if (flags.json) {
    for (const auto& model : response.models()) std::cout << ModelJson(model) << "\n";
  } else {
    std::cout << ModelTable(response);
  }
  std::cout.flush();
  return kExitOk;
}

int RunModel(const ModelsFlags& flags) {
  std::unique_ptr<Classifier::Stub> stub = NewStub(flags.common.connection);
  taylorshift::v1::GetModelRequest request;
  request.set_name(flags.name);
  taylorshift::v1::ModelInfo response;
  if (stub == nullptr ||
      !CallOrReport(*stub, &Classifier::Stub::GetModel, "GetModel", flags.common.connection,
                    flags.common.UnaryTimeoutMs(), request, &response)) {
    return kExitError;
  }
  std::cout << (flags.json ? ModelJson(response) + "\n" : ModelDetails(response)) << std::flush;
  return kExitOk;
}

int RunClassify(const ClassifyInputs& flags) {
  const std::vector<std::string>& inputs = flags.inputs;
  if (std::count(inputs.begin(), inputs.end(), "-") > 1) {
    return Usage("'-' (stdin) may be given only once");
  }
  const ClassifyRequest& prototype = flags.classify.prototype;
  const bool json = flags.classify.json;
  const ConnectionOptions& connection = flags.classify.common.connection;

  std::unique_ptr<Classifier::Stub> stub = NewStub(connection);
  if (stub == nullptr) return kExitError;
  const DocumentLimits limits = FetchDocumentLimits(*stub, flags.classify);
  std::optional<absl::StatusOr<std::string>> stdin_document;
  if (std::count(inputs.begin(), inputs.end(), "-") == 1) {
    stdin_document = ReadDocumentStream(std::cin, "stdin", limits);
  }

  struct Result {
    grpc::Status status;
    ClassifyResponse response;
    double latency_ms = 0;
  };
  // Each input's result, set by the worker that sends it.
  std::vector<std::promise<Result>> results(inputs.size());
  std::atomic<std::size_t> next{0};

  const auto classify_one = [&](std::size_t index) {
    Result result;
    ClassifyRequest request = prototype;
    request.set_request_id(absl::StrCat("tsctl-", index));
    if (inputs[index] == "-") {
      if (!stdin_document->ok()) {
        result.status = ToGrpcStatus(stdin_document->status());
        return result;
      }
      request.set_document(**stdin_document);
    } else if (absl::Status read = SetInputFromFile(inputs[index], limits, &request); !read.ok()) {
      result.status = ToGrpcStatus(read);
      return result;
    }
    grpc::ClientContext context;
    PrepareContext(connection, flags.classify.TimeoutMs(), &context);
    const auto start = std::chrono::steady_clock::now();
    result.status = stub->Classify(&context, request, &result.response);
    result.latency_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return result;
  };
  const auto worker = [&] {
    for (std::size_t index = next.fetch_add(1); index < inputs.size(); index = next.fetch_add(1)) {
      results[index].set_value(classify_one(index));
    }
  };
  const auto concurrency = static_cast<std::size_t>(flags.concurrency);
  std::vector<std::thread> workers;
  for (std::size_t i = 0; i < std::min(concurrency, inputs.size()); ++i) {
    workers.emplace_back(worker);
  }

  // Print strictly in input order, each line as soon as it and all before it are done.
  std::size_t failed = 0;
  for (std::size_t index = 0; index < inputs.size(); ++index) {
    const Result result = results[index].get_future().get();
    const std::string& file = inputs[index];
    if (result.status.ok()) {
      std::cout << (json
                        ? ClassifyJson(file, result.response, result.latency_ms)
                        : ClassifyText(file, result.response, result.latency_ms, prototype.top_k()))
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

int RunBench(const BenchFlags& flags) {
  const ClassifyRequest& prototype = flags.classify.prototype;
  LoadOptions load;
  load.concurrency = static_cast<int>(flags.concurrency);
  load.duration_s = flags.duration_s.value_or(0);
  load.max_requests = flags.requests.value_or(flags.duration_s.has_value() ? 0 : 200);
  load.rate_rps = flags.rate;
  if (absl::Status valid = ValidateLoadOptions(load); !valid.ok()) {
    return Usage(std::string(valid.message()));
  }
  const BenchProtocol protocol = flags.protocol;
  const std::string& http = flags.http;
  if (absl::Status valid = ValidateProtocolFlags(protocol, http, false); !valid.ok()) {
    return Usage(std::string(valid.message()));
  }
  const std::int64_t timeout_ms = flags.classify.TimeoutMs();
  const ConnectionOptions& connection = flags.classify.common.connection;
  std::string http_base_url;
  if (UsesHttp(protocol)) {
    absl::StatusOr<std::string> url = HttpBaseUrl(http, connection);
    if (!url.ok()) return Usage(std::string(url.status().message()));
    http_base_url = *std::move(url);
  }

  std::optional<RequestGenerator> generator;
  if (!flags.files.empty()) {
    DocumentLimits limits = LimitsFor(nullptr, "", connection.max_message_bytes);
    if (protocol == BenchProtocol::kClassify) {
      std::unique_ptr<Classifier::Stub> stub = NewStub(connection);
      if (stub == nullptr) return kExitError;
      limits = FetchDocumentLimits(*stub, flags.classify);
    }
    std::vector<ClassifyRequest> inputs;
    for (const std::string& file : flags.files) {
      ClassifyRequest input;
      if (absl::Status read = SetInputFromFile(file, limits, &input); !read.ok())
        return LocalError(read);
      if (absl::Status valid = ValidateProtocolFlags(protocol, http, input.has_image());
          !valid.ok()) {
        return Usage(absl::StrCat(file, ": ", valid.message()));
      }
      if (protocol == BenchProtocol::kV2Rest) {
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
    generator.emplace(RequestGenerator::Synthetic(
        prototype, flags.lengths.value_or(*LengthDistribution::Parse("fixed:1000")),
        static_cast<std::uint64_t>(flags.seed)));
  }

  ClassifyCall call;
  if (UsesHttp(protocol)) {
    absl::StatusOr<ClassifyCall> http_call =
        MakeHttpCall(protocol, http_base_url, connection, timeout_ms);
    if (!http_call.ok()) return Usage(std::string(http_call.status().message()));
    call = *std::move(http_call);
  } else {
    std::shared_ptr<grpc::Channel> channel = ConnectOrReport(connection);
    if (channel == nullptr) return kExitError;
    call = MakeGrpcCall(protocol, channel, connection, timeout_ms);
  }
  // Progress on stderr while the load runs (the report on stdout stays as it was).
  std::atomic<std::int64_t> completed{0}, failed{0};
  const auto start = std::chrono::steady_clock::now();
  ProgressTicker progress(StderrProgressOptions(), &std::cerr, [&] {
    Progress now;
    now.unit = "requests";
    now.done = static_cast<double>(completed.load());
    now.total = static_cast<double>(load.max_requests);
    if (load.duration_s > 0) {
      // A time limit ends the run first when it comes before the count.
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      now.remaining_s = std::max(0.0, load.duration_s - elapsed);
      if (load.max_requests > 0 && now.done > 0) {
        now.remaining_s = std::min(now.remaining_s, (now.total - now.done) * elapsed / now.done);
      }
    }
    if (const std::int64_t errors = failed.load(); errors > 0) {
      now.detail = absl::StrCat(errors, " failed");
    }
    return now;
  });
  const BenchReport report = RunLoad(load, *generator, call, [&](bool ok) {
    completed.fetch_add(1);
    if (!ok) failed.fetch_add(1);
  });
  progress.Stop();
  std::cout << (flags.classify.json ? FormatBenchJson(report) + "\n" : FormatBenchText(report))
            << std::flush;
  if (report.ok == 0) {
    std::cerr << "tsctl: no request to " << (UsesHttp(protocol) ? http_base_url : connection.server)
              << " succeeded: " << absl::StrJoin(report.errors, ", ", absl::PairFormatter(" x"))
              << "\n";
    return kExitError;
  }
  return kExitOk;
}

int RunHealth(const HealthFlags& flags) {
  using grpc::health::v1::Health;
  const std::string& service = flags.service;
  const ConnectionOptions& connection = flags.common.connection;
  std::shared_ptr<grpc::Channel> channel = ConnectOrReport(connection);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  if (channel == nullptr ||
      !CallOrReport(*Health::NewStub(channel), &Health::Stub::Check,
                    service.empty() ? std::string("Health/Check")
                                    : absl::StrCat("Health/Check of '", service, "'"),
                    connection, flags.common.UnaryTimeoutMs(), request, &response)) {
    return kExitError;
  }
  const std::string status = ServingStatusName(response.status());
  std::cout << (flags.json ? DumpJson(Json{{"service", service}, {"status", status}}) : status)
            << std::endl;
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk : kExitError;
}

// The request's over_length: the policies the server knows (ClassifyRequest.over_length).
absl::StatusOr<std::string> ParseOverLength(const std::string& name) {
  for (const char* policy : {"truncate", "keep_tail", "reject", "window"}) {
    if (name == policy) return name;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown over-length policy '", name, "': expected truncate, keep_tail, reject or window"));
}

// --model, --top-k, --path, --over-length, --deadline-ms and --json of classify and bench.
void AddClassifyFlags(CLI::App& command, ClassifyFlags* flags) {
  ClassifyRequest* prototype = &flags->prototype;
  prototype->set_path(*ParsePath("auto"));
  command.add_option("--model", *prototype->mutable_model(), "the model to classify with")
      ->required()
      ->check(NonEmpty());
  command
      .add_option_function<std::int64_t>(
          "--top-k",
          [prototype](std::int64_t k) { prototype->set_top_k(static_cast<std::uint32_t>(k)); },
          "answer the K most likely labels (default: the model's)")
      ->check(IntegerIn(0, UINT32_MAX));
  command.add_option_function<std::string>(
      "--path",
      [prototype](const std::string& name) {
        absl::StatusOr<taylorshift::v1::AttentionPath> path = ParsePath(name);
        if (!path.ok()) throw CLI::ValidationError("--path", std::string(path.status().message()));
        prototype->set_path(*path);
      },
      "attention path: auto|direct|efficient|softmax (default auto)");
  AddParsedOption(
      command, "--over-length", prototype->mutable_over_length(), ParseOverLength,
      "inputs longer than the model's max_length: truncate (keep the head), keep_tail, reject "
      "(INVALID_ARGUMENT) or window (average overlapping windows); default the model's policy");
  command
      .add_option("--deadline-ms", flags->deadline_ms,
                  "deadline of each Classify call (default: --timeout-ms)")
      ->check(IntegerIn(0, INT32_MAX));
  AddConnectionFlags(command, &flags->common);
}

void AddCommands(Commands& commands) {
  CLI::App& tsctl = commands.app();
  {
    auto flags = std::make_shared<ModelsFlags>();
    CLI::App* command = tsctl.add_subcommand("models", "list the served models");
    command->add_flag("--json", flags->json, "one JSON object per model (or record) per line");
    command
        ->add_option("--history", flags->name,
                     "instead: model NAME's promotions and rollbacks (who, when, source, version, "
                     "validation accuracy), oldest first")
        ->check(NonEmpty());
    AddConnectionFlags(*command, &flags->common);
    commands.OnRun(*command, [flags] {
      return flags->name.empty() ? RunModels(*flags)
                                 : RunPromotionHistory(flags->common, flags->name, flags->json);
    });
  }
  {
    auto flags = std::make_shared<ModelsFlags>();
    CLI::App* command = tsctl.add_subcommand("model", "show one model");
    command->add_option("NAME", flags->name, "the model")->required();
    command->add_flag("--json", flags->json, "JSON output");
    AddConnectionFlags(*command, &flags->common);
    commands.OnRun(*command, [flags] { return RunModel(*flags); });
  }
  {
    auto flags = std::make_shared<ClassifyInputs>();
    CLI::App* command = tsctl.add_subcommand(
        "classify",
        "classify each FILE (.pgm/.ppm/.pnm files are sent as images, anything else as a byte "
        "document; '-' reads stdin as one document); output is in input order, one line per "
        "input");
    command->add_option("FILE", flags->inputs, "the inputs ('-' = stdin, once)")->required();
    command->add_option("--concurrency", flags->concurrency, "K requests in flight")
        ->capture_default_str()
        ->check(IntegerIn(1, kMaxConcurrency));
    AddClassifyFlags(*command, &flags->classify);
    command->add_flag("--json", flags->classify.json, "one JSON object per input per line");
    commands.OnRun(*command, [flags] { return RunClassify(*flags); });
  }
  {
    auto flags = std::make_shared<BenchFlags>();
    CLI::App* command = tsctl.add_subcommand(
        "bench",
        "load generator: K closed-loop workers, or an open loop at --rate R requests/s with at "
        "most K in flight; stops after N requests or S seconds (whichever comes first; default "
        "200 requests). Reports throughput, exact p50/p90/p99/max latency, errors by gRPC "
        "code, path and batch-size mix, server queue/compute time");
    command->add_option("--concurrency", flags->concurrency, "K workers")
        ->capture_default_str()
        ->check(IntegerIn(1, kMaxConcurrency));
    command->add_option("--requests", flags->requests, "N requests (0 = no count limit)")
        ->check(IntegerIn(0, INT64_MAX));
    command->add_option("--duration-s", flags->duration_s, "S seconds (0 = no time limit)")
        ->check(NumberAtLeast(0));
    command->add_option("--rate", flags->rate, "R requests/s (0 = closed loop)")
        ->check(NumberAtLeast(0));
    CLI::Option* files =
        command->add_option("--files", flags->files, "send these inputs round-robin");
    AddParsedOption(*command, "--lengths", &flags->lengths, LengthDistribution::Parse,
                    "random printable documents of these lengths: fixed:N | uniform:MIN:MAX | "
                    "lognormal:MEDIAN:SIGMA:MAX (default fixed:1000)")
        ->excludes(files);
    command->add_option("--seed", flags->seed, "seed of the random documents")
        ->capture_default_str()
        ->check(IntegerIn(0, INT64_MAX));
    AddParsedOption(*command, "--protocol", &flags->protocol, ParseBenchProtocol,
                    "classify (default; Classifier/Classify), v2-grpc (KServe v2 ModelInfer, "
                    "one BYTES element, same --server), v2-rest (POST /v2/models/NAME/infer) or "
                    "rest (POST /v1/models/NAME:classify); the last two go to the HTTP front "
                    "end at --http, one keep-alive connection per worker. Only classify sends "
                    "images; v2 answers carry no path, tokens or server timing");
    command
        ->add_option("--http", flags->http,
                     "HOST:PORT of the HTTP front end (http.listen; https:// with the TLS "
                     "flags)")
        ->check(NonEmpty());
    AddClassifyFlags(*command, &flags->classify);
    command->add_flag("--json", flags->classify.json, "the report as one JSON object");
    commands.OnRun(*command, [flags] { return RunBench(*flags); });
  }
  {
    auto flags = std::make_shared<HealthFlags>();
    CLI::App* command = tsctl.add_subcommand(
        "health",
        "ask the server's gRPC health service (grpc.health.v1.Health/Check, no token needed); "
        "prints SERVING, NOT_SERVING or UNKNOWN and exits 0 only when SERVING (a service the "
        "server does not know fails with NOT_FOUND)");
    command->add_option("--service", flags->service,
                        "\"\" (default) = the server as a whole, taylorshift.v1.Classifier, "
                        "taylorshift.v1.Jobs, or a model name");
    command->add_flag("--json", flags->json, "{\"service\":...,\"status\":...}");
    AddConnectionFlags(*command, &flags->common);
    commands.OnRun(*command, [flags] { return RunHealth(*flags); });
  }
  AddJobCommands(commands);
}

}  // namespace
}  // namespace ts::client

int main(int argc, char** argv) {
  try {
    ts::client::Commands commands;
    ts::client::AddCommands(commands);
    return commands.Run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::cerr << "tsctl: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "tsctl: an unknown exception\n";
  }
  return ts::client::kExitError;
}
