// tsserver: serves the configured models over gRPC (Classifier, KServe v2, health, reflection)
// and HTTP/JSON (KServe v2 REST and the plain route, when http.listen is set), and exports
// Prometheus metrics on its own listener.
//
//   tsserver [--config FILE] [--listen ADDR] [--metrics-listen ADDR] [--http-listen ADDR]
//            [--model NAME=CHECKPOINT]...
//            [--state-dir DIR] [--data-root DIR] [--threads N] [--ready-file FILE]
//
// Flags override the config file. SIGTERM/SIGINT: stop accepting, finish what is queued and in
// flight within shutdown_grace, exit 0. Exit 1 on a start-up error (message on stderr).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "model/heap_policy.h"
#include "model/torch_compat.h"
#include "server/auth.h"
#include "server/classifier_service.h"
#include "server/config.h"
#include "server/http_frontend.h"
#include "server/inference_core.h"
#include "server/kserve_service.h"
#include "server/job_manager.h"
#include "server/jobs_service.h"
#include "server/metrics.h"
#include "server/model_registry.h"

namespace ts::server {
namespace {

void Log(const std::string& message) {
  std::cerr << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone())
            << " tsserver: " << message << std::endl;
}

struct Flags {
  std::string config;
  std::string listen, metrics_listen, http_listen, state_dir, data_root, ready_file;
  bool has_metrics_listen = false, has_http_listen = false;
  int threads = -1;
  std::vector<std::string> models;
};

constexpr char kUsage[] =
    "usage: tsserver [--config FILE] [--listen ADDR] [--metrics-listen ADDR] [--http-listen ADDR]\n"
    "                [--model NAME=CHECKPOINT]... [--state-dir DIR] [--data-root DIR]\n"
    "                [--threads N] [--ready-file FILE]\n";

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    const auto next = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      return std::string(argv[++i]);
    };
    absl::StatusOr<std::string> v;
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--config") {
      v = next();
      if (v.ok()) flags.config = *v;
    } else if (arg == "--listen") {
      v = next();
      if (v.ok()) flags.listen = *v;
    } else if (arg == "--metrics-listen") {
      v = next();
      if (v.ok()) {
        flags.metrics_listen = *v;
        flags.has_metrics_listen = true;
      }
    } else if (arg == "--http-listen") {
      v = next();
      if (v.ok()) {
        flags.http_listen = *v;
        flags.has_http_listen = true;
      }
    } else if (arg == "--model") {
      v = next();
      if (v.ok()) flags.models.push_back(*v);
    } else if (arg == "--state-dir") {
      v = next();
      if (v.ok()) flags.state_dir = *v;
    } else if (arg == "--data-root") {
      v = next();
      if (v.ok()) flags.data_root = *v;
    } else if (arg == "--ready-file") {
      v = next();
      if (v.ok()) flags.ready_file = *v;
    } else if (arg == "--threads") {
      v = next();
      if (v.ok()) {
        try {
          flags.threads = std::stoi(*v);
        } catch (const std::exception&) {
          return absl::InvalidArgumentError("--threads needs an integer");
        }
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument '", arg, "'"));
    }
    if (!v.ok()) return v.status();
  }
  return flags;
}

absl::StatusOr<ServerConfig> BuildConfig(const Flags& flags) {
  ServerConfig config;
  if (!flags.config.empty()) {
    auto loaded = LoadServerConfig(flags.config);
    if (!loaded.ok()) return loaded.status();
    config = std::move(*loaded);
  }
  if (!flags.listen.empty()) config.listen = flags.listen;
  if (flags.has_metrics_listen) config.metrics_listen = flags.metrics_listen;
  if (flags.has_http_listen) config.http.listen = flags.http_listen;
  if (!flags.state_dir.empty()) config.state_dir = flags.state_dir;
  if (!flags.data_root.empty()) config.data_root = flags.data_root;
  if (flags.threads >= 0) config.intra_op_threads = flags.threads;
  for (const auto& flag : flags.models) {
    auto model = ParseModelFlag(flag);
    if (!model.ok()) return model.status();
    config.models.push_back(std::move(*model));
  }
  if (auto valid = ValidateServerConfig(config); !valid.ok()) return valid;
  if (config.models.empty()) {
    return absl::InvalidArgumentError(
        "no models to serve: give --config or --model NAME=CHECKPOINT");
  }
  return config;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const TlsConfig& tls) {
  if (tls.cert_file.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  auto cert = ReadFile(tls.cert_file);
  if (!cert.ok()) return cert.status();
  auto key = ReadFile(tls.key_file);
  if (!key.ok()) return key.status();
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.client_ca_file.empty()) {
    auto ca = ReadFile(tls.client_ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

int Run(int argc, char** argv) {
  // SIGTERM/SIGINT are taken by sigwait below; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::cerr << "tsserver: " << flags.status().message() << "\n" << kUsage;
    return 2;
  }
  auto config = BuildConfig(*flags);
  if (!config.ok()) {
    Log(absl::StrCat("configuration error: ", config.status().message()));
    return 1;
  }
  const int threads = config->intra_op_threads > 0
                          ? config->intra_op_threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  compat::SetThreads(threads);
  if (auto heap = KeepFreedHeapMemory(config->heap_keep_freed_bytes); !heap.ok()) {
    Log(absl::StrCat("configuration error: ", heap.message()));
    return 1;
  }

  auto metrics = Metrics::Create(config->metrics_listen);
  if (!metrics.ok()) {
    Log(absl::StrCat("metrics: ", metrics.status().message()));
    return 1;
  }
  auto authorizer = Authorizer::Create(config->auth);
  if (!authorizer.ok()) {
    Log(absl::StrCat("auth: ", authorizer.status().message()));
    return 1;
  }
  auto registry = ModelRegistry::Create(config->models, metrics->get(), RealClock());
  if (!registry.ok()) {
    Log(absl::StrCat("loading models: ", registry.status().message()));
    return 1;
  }
  for (const auto& model : (*registry)->List()) {
    Log(absl::StrCat("model '", model->name(), "' version ", model->version(), " on ",
                     model->device().str(), ", crossover ", model->crossover_tokens(), " (",
                     model->crossover_source(), ")"));
  }
  // Jobs: the store under state_dir, data paths confined to data_root. Promoted models are
  // served again before the server accepts calls. With jobs.enabled false there is no Jobs
  // service (its RPCs are UNIMPLEMENTED) and nothing is read or written under state_dir.
  grpc::HealthCheckServiceInterface* health = nullptr;
  std::unique_ptr<JobManager> jobs;
  if (config->jobs.enabled) {
    JobManagerOptions job_options;
    job_options.jobs = config->jobs;
    job_options.state_dir = config->state_dir;
    job_options.data_root = config->data_root;
    job_options.num_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    job_options.heap_keep_freed_bytes = config->heap_keep_freed_bytes;
    job_options.on_model_served = [&health](const std::string& name) {
      if (health != nullptr) health->SetServingStatus(name, true);
    };
    job_options.log = [](const std::string& line) { Log(line); };
    auto created = JobManager::Create(job_options, registry->get(), metrics->get(), RealClock());
    if (!created.ok()) {
      Log(absl::StrCat("jobs: ", created.status().message()));
      return 1;
    }
    jobs = std::move(*created);
    jobs->RestorePromotions();
  }
  auto credentials = Credentials(config->tls);
  if (!credentials.ok()) {
    Log(absl::StrCat("tls: ", credentials.status().message()));
    return 1;
  }

  InferenceCore inference(registry->get(), authorizer->get(), metrics->get(), RealClock());
  ClassifierService classifier(&inference);
  KServeService kserve(&inference, config->max_infer_batch);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config->listen, *credentials, &port);
  builder.RegisterService(&classifier);
  builder.RegisterService(&kserve);
  std::unique_ptr<JobsService> jobs_service;
  if (jobs != nullptr) {
    jobs_service = std::make_unique<JobsService>(jobs.get(), authorizer->get());
    builder.RegisterService(jobs_service.get());
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(config->max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config->max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, config->max_concurrent_streams);
  if (config->grpc_threads > 0) {
    grpc::ResourceQuota quota("tsserver");
    quota.SetMaxThreads(config->grpc_threads);
    builder.SetResourceQuota(quota);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    Log(absl::StrCat("cannot listen on ", config->listen));
    return 1;
  }
  health = server->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus("taylorshift.v1.Classifier", true);
  health->SetServingStatus("inference.GRPCInferenceService", true);
  health->SetServingStatus("taylorshift.v1.Jobs", config->jobs.enabled);
  for (const auto& model : (*registry)->List()) health->SetServingStatus(model->name(), true);

  // The HTTP front end, once gRPC is up (both share the inference core).
  std::unique_ptr<HttpFrontend> http;
  if (!config->http.listen.empty()) {
    HttpFrontendOptions http_options;
    http_options.http = config->http;
    http_options.tls = config->tls;
    http_options.max_message_bytes = config->max_message_bytes;
    http_options.max_infer_batch = config->max_infer_batch;
    auto started = HttpFrontend::Start(http_options, &inference);
    if (!started.ok()) {
      Log(std::string(started.status().message()));
      server->Shutdown();
      return 1;
    }
    http = std::move(*started);
  }

  const std::string host = config->listen.substr(0, config->listen.rfind(':'));
  const std::string grpc_address = absl::StrCat(host, ":", port);
  Log(absl::StrCat("serving gRPC on ", grpc_address, ", HTTP on ",
                   http == nullptr ? "(off)" : http->address(), ", metrics on ",
                   config->metrics_listen.empty() ? "(off)" : (*metrics)->bound_address(), ", ",
                   threads, " intra-op threads"));
  if (!flags->ready_file.empty()) {
    const std::string tmp = flags->ready_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << "grpc=" << grpc_address << "\nmetrics=" << (*metrics)->bound_address() << "\n";
      if (http != nullptr) out << "http=" << http->address() << "\n";
    }
    std::rename(tmp.c_str(), flags->ready_file.c_str());
  }

  int signal = 0;
  sigwait(&signals, &signal);
  Log(absl::StrCat("received ", signal == SIGTERM ? "SIGTERM" : "SIGINT", ": draining (grace ",
                   absl::FormatDuration(config->shutdown_grace), ")"));
  health->SetServingStatus(false);
  inference.SetDraining();
  const absl::Time deadline = absl::Now() + config->shutdown_grace;
  // A running training job saves its state at its next step and resumes on the next start.
  if (jobs != nullptr) {
    jobs->Shutdown();
    Log("jobs stopped");
  }
  // Stops accepting calls and waits for those in flight (their batches keep running).
  if (http != nullptr) {
    http->Stop();
    Log("HTTP stopped");
  }
  server->Shutdown(absl::ToChronoTime(deadline));
  Log("RPCs finished; draining batchers");
  (*registry)->DrainAll(std::max(absl::ZeroDuration(), deadline - absl::Now()));
  server->Wait();
  Log("stopped");
  return 0;
}

}  // namespace
}  // namespace ts::server

int main(int argc, char** argv) { return ts::server::Run(argc, argv); }
