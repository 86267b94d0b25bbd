// tsctl: the remote CLI for TaylorShift Serve (models, model, classify, bench).
// Exit status: 0 success, 1 an RPC or I/O error (stderr names the gRPC code), 2 a usage error.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/channel.h"
#include "client/classify_input.h"
#include "client/file_util.h"
#include "client/load_generator.h"
#include "client/proto_names.h"
#include "client/result_format.h"
#include "grpcpp/grpcpp.h"
#include "taylorshift/v1/classifier.grpc.pb.h"

namespace ts::client {
namespace {

using taylorshift::v1::Classifier;
using taylorshift::v1::ClassifyRequest;
using taylorshift::v1::ClassifyResponse;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
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
           [--deadline-ms MS] [--json]
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
                            bench use --deadline-ms instead when it is given
  --max-message-bytes N     largest message sent or received (default 67108864)
  --json                    machine-readable output (one JSON object per line)
  --help                    this text

Flags take their value as "--flag VALUE" or "--flag=VALUE"; "--" ends the flags.
Exit status: 0 success, 1 RPC or I/O error (the gRPC code is named on stderr; classify and
bench report per-request failures and exit 1 after all inputs / when no request succeeded),
2 usage error.
)";

// Prints a usage error with a hint; returns exit status 2.
int Usage(absl::string_view message) {
  std::cerr << "tsctl: " << message << "\nRun 'tsctl --help' for usage.\n";
  return kExitUsage;
}

// Command-line flags of one command. Flags not in the command's spec are usage errors. The
// first problem (in Parse, a typed accessor, or reported through Fail) is kept in error();
// accessors then return their fallback, so a command reads every flag and checks once.
class Flags {
 public:
  // `value_flags` take a value, `bool_flags` do not, `list_flags` take every following
  // argument up to the next flag.
  Flags(std::set<std::string> value_flags, std::set<std::string> bool_flags,
        std::set<std::string> list_flags = {})
      : value_flags_(std::move(value_flags)),
        bool_flags_(std::move(bool_flags)),
        list_flags_(std::move(list_flags)) {}

  // False (with error() set) on an unknown flag or a missing value.
  bool Parse(const std::vector<std::string>& args) {
    bool flags_done = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (flags_done || arg == "-" || !absl::StartsWith(arg, "--")) {
        positionals_.push_back(arg);
        continue;
      }
      if (arg == "--") {
        flags_done = true;
        continue;
      }
      std::string name = arg.substr(2);
      std::optional<std::string> inline_value;
      if (const std::size_t eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (bool_flags_.count(name) != 0) {
        if (inline_value.has_value()) return Fail(absl::StrCat("--", name, " takes no value"));
        bools_.insert(name);
      } else if (value_flags_.count(name) != 0) {
        if (inline_value.has_value()) {
          values_[name] = *inline_value;
        } else if (i + 1 < args.size()) {
          values_[name] = args[++i];
        } else {
          return Fail(absl::StrCat("--", name, " needs a value"));
        }
      } else if (list_flags_.count(name) != 0) {
        std::vector<std::string>& list = lists_[name];
        if (inline_value.has_value()) list.push_back(*inline_value);
        while (i + 1 < args.size() && !absl::StartsWith(args[i + 1], "--")) {
          list.push_back(args[++i]);
        }
        if (list.empty()) return Fail(absl::StrCat("--", name, " needs at least one value"));
      } else {
        return Fail(absl::StrCat("unknown flag --", name));
      }
    }
    return true;
  }

  // Records a usage problem (the first one wins); always false.
  bool Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }

  bool Has(const std::string& name) const {
    return bools_.count(name) != 0 || values_.count(name) != 0 || lists_.count(name) != 0;
  }
  std::string String(const std::string& name, const std::string& fallback) const {
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  std::vector<std::string> List(const std::string& name) const {
    const auto it = lists_.find(name);
    return it == lists_.end() ? std::vector<std::string>{} : it->second;
  }
  // The flag as an integer in [low, high], or `fallback` when absent.
  std::int64_t Int(const std::string& name, std::int64_t fallback, std::int64_t low,
                   std::int64_t high) {
    const auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    std::int64_t value = 0;
    if (!absl::SimpleAtoi(it->second, &value) || value < low || value > high) {
      Fail(absl::StrCat("--", name, " must be an integer in ", low, "..", high, ", got '",
                        it->second, "'"));
      return fallback;
    }
    return value;
  }
  // The flag as a finite number >= low, or `fallback` when absent.
  double Double(const std::string& name, double fallback, double low) {
    const auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    double value = 0;
    if (!absl::SimpleAtod(it->second, &value) || !std::isfinite(value) || value < low) {
      Fail(absl::StrCat("--", name, " must be a number >= ", low, ", got '", it->second, "'"));
      return fallback;
    }
    return value;
  }
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::set<std::string> value_flags_, bool_flags_, list_flags_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> lists_;
  std::set<std::string> bools_;
  std::vector<std::string> positionals_;
  std::string error_;
};

const std::set<std::string> kCommonValueFlags = {
    "server", "ca-file",    "cert-file",         "key-file",
    "token",  "timeout-ms", "max-message-bytes", "tls-server-name"};

std::set<std::string> With(std::set<std::string> base, std::initializer_list<const char*> more) {
  for (const char* name : more) base.insert(name);
  return base;
}

ConnectionOptions ConnectionFromFlags(Flags& flags) {
  ConnectionOptions options;
  options.server = flags.String("server", options.server);
  if (options.server.empty()) flags.Fail("--server must not be empty");
  options.tls = flags.Has("tls");
  options.ca_file = flags.String("ca-file", "");
  options.cert_file = flags.String("cert-file", "");
  options.key_file = flags.String("key-file", "");
  if (options.cert_file.empty() != options.key_file.empty()) {
    flags.Fail("--cert-file and --key-file go together");
  }
  options.tls_server_name = flags.String("tls-server-name", "");
  const char* env_token = std::getenv("TSCTL_TOKEN");
  options.token = flags.String("token", env_token != nullptr ? env_token : "");
  options.max_message_bytes =
      flags.Int("max-message-bytes", options.max_message_bytes, 1, std::int64_t{1} << 31);
  return options;
}

// Connects to the server; I/O problems with the PEM files are errors, not usage errors.
std::unique_ptr<Classifier::Stub> NewStub(const ConnectionOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(options);
  if (!channel.ok()) {
    std::cerr << "tsctl: " << GrpcCodeName(ToGrpcStatus(channel.status()).error_code()) << ": "
              << channel.status().message() << "\n";
    return nullptr;
  }
  return Classifier::NewStub(*channel);
}

int RpcFailed(const std::string& rpc, const ConnectionOptions& options,
              const grpc::Status& status) {
  std::cerr << "tsctl: " << rpc << " on " << options.server
            << " failed: " << GrpcCodeName(status.error_code()) << ": " << status.error_message()
            << "\n";
  return kExitError;
}

int RunModels(const std::vector<std::string>& args) {
  Flags flags(kCommonValueFlags, {"json", "tls"});
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
  Flags flags(kCommonValueFlags, {"json", "tls"});
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
  Flags flags(With(kCommonValueFlags, {"model", "concurrency", "top-k", "path", "deadline-ms"}),
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
  Flags flags(With(kCommonValueFlags, {"model", "concurrency", "requests", "duration-s", "rate",
                                       "lengths", "seed", "path", "top-k", "deadline-ms"}),
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
  const auto seed = static_cast<std::uint64_t>(flags.Int("seed", 1, 0, INT64_MAX));
  const std::int64_t timeout_ms = ClassifyTimeoutMs(flags);
  const ConnectionOptions connection = ConnectionFromFlags(flags);
  if (flags.failed()) return Usage(flags.error());

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

  std::unique_ptr<Classifier::Stub> stub = NewStub(connection);
  if (stub == nullptr) return kExitError;
  const ClassifyCall call = [&](const ClassifyRequest& request, ClassifyResponse* response) {
    grpc::ClientContext context;
    PrepareContext(connection, timeout_ms, &context);
    return stub->Classify(&context, request, response);
  };
  const BenchReport report = RunLoad(load, *generator, call);
  std::cout << (flags.Has("json") ? FormatBenchJson(report) + "\n" : FormatBenchText(report));
  std::cout.flush();
  if (report.ok == 0) {
    std::vector<std::string> errors;
    for (const auto& [code, count] : report.errors)
      errors.push_back(absl::StrCat(code, " x", count));
    std::cerr << "tsctl: no request to " << connection.server
              << " succeeded: " << absl::StrJoin(errors, ", ") << "\n";
    return kExitError;
  }
  return kExitOk;
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
  return Usage(absl::StrCat("unknown command '", command, "'"));
}

}  // namespace
}  // namespace ts::client

int main(int argc, char** argv) { return ts::client::Main(argc, argv); }
