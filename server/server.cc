#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>

#include <iostream>
#include <set>
#include <string_view>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "common/gpu_telemetry.h"
#include "common/status_macros.h"
#include "model/api/precision.h"
#include "model/kernels/cpu_features.h"
#include "model/torch_compat.h"
#include "model/training/data_parallel.h"
#include "server/jobs/job_manager.h"
#include "server/jobs/jobs_off_service.h"
#include "server/jobs/jobs_service.h"
#include "server/metrics.h"
#include "server/serving/auth.h"
#include "server/serving/classifier_service.h"
#include "server/serving/discovery_guard.h"
#include "server/serving/http_frontend.h"
#include "server/serving/inference_core.h"
#include "server/serving/kserve_service.h"
#include "server/serving/model_registry.h"
#include "server/serving/promotion_follower.h"
#include "server/serving/reflection_v1_service.h"
#include "server/serving/unknown_method.h"

namespace ts::server {
namespace {

constexpr char kJobsService[] = "taylorshift.v1.Jobs";
// What grpc.health.v1 answers for besides the models: the whole server ("") and the services.
// Health of these stays open to probes when auth.protect_discovery guards the models' names.
constexpr const char* kHealthServices[] = {"", "taylorshift.v1.Classifier",
                                           "inference.GRPCInferenceService", kJobsService};

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const TlsConfig& tls) {
  if (tls.cert_file.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  TS_ASSIGN_OR_RETURN(std::string cert, ReadFile(tls.cert_file, "cert_file"));
  TS_ASSIGN_OR_RETURN(std::string key, ReadFile(tls.key_file, "key_file"));
  options.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
  if (!tls.client_ca_file.empty()) {
    TS_ASSIGN_OR_RETURN(options.pem_root_certs, ReadFile(tls.client_ca_file, "client_ca_file"));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

// The GPU gauges from NVML, when `library` is set and loads; says in the log what it found.
void ReadGpusInto(const std::string& library, Metrics& metrics,
                  const std::function<void(const std::string&)>& log) {
  if (library.empty()) return;
  auto gpus = GpuTelemetry::Open(library);
  if (!gpus.ok()) {
    log(absl::StrCat("GPU telemetry: none (", gpus.status().message(), ")"));
    return;
  }
  log(absl::StrCat("GPU telemetry: NVML, ", (*gpus)->device_count(), " GPU(s)"));
  std::shared_ptr<GpuTelemetry> telemetry = std::move(*gpus);
  metrics.SetGpuSource([telemetry] { return telemetry->Read(); });
}

// The /metrics endpoint's options: its address, TLS, (metrics_require_token) the check of a
// scrape's token by `authorizer`, which must outlive the endpoint, and the expiry of finished
// jobs' series on `clock`.
MetricsOptions MetricsOptionsFor(const ServerConfig& config, const Authorizer* authorizer,
                                 Clock* clock) {
  MetricsOptions options;
  options.listen = config.metrics_listen;
  options.finished_job_series = config.metrics.finished_job_series;
  options.clock = clock;
  options.cert_file = config.metrics.tls.cert_file;
  options.key_file = config.metrics.tls.key_file;
  options.client_ca_file = config.metrics.tls.client_ca_file;
  if (config.metrics.require_token) {
    options.authorize = [authorizer](std::string_view authorization) {
      return authorizer->Check(authorization, "metrics");
    };
  }
  return options;
}

// The job manager's options from the config and this machine (CUDA devices, NCCL, cores).
JobManagerOptions JobOptionsFor(const ServerConfig& config) {
  JobManagerOptions options;
  options.jobs = config.jobs;
  options.jobs.cuda_devices = compat::CudaDeviceCount();
  options.jobs.cuda_data_parallel = HaveNccl();
  options.state_dir = config.state_dir;
  options.data_root = config.data_root;
  options.num_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.heap_keep_freed_bytes = config.heap_keep_freed_bytes;
  options.configured_models = config.models;
  return options;
}

// One line per served model (version, device, precision, crossover) and its calibration warnings.
void LogModels(const ModelRegistry& registry, const std::function<void(const std::string&)>& log) {
  for (const auto& model : registry.List()) {
    log(absl::StrCat("model '", model->name(), "' version ", model->version(), " on ",
                     model->device().str(), " at ", PrecisionName(model->config().precision),
                     ", crossover ", model->crossover_tokens(), " (", model->crossover_source(),
                     model->crossover_table().empty()
                         ? ""
                         : absl::StrCat("; ", model->crossover_table().Describe()),
                     ")"));
    for (const auto& warning : model->calibration_warnings()) {
      log(absl::StrCat("model '", model->name(), "': warning: ", warning));
    }
  }
}

// promotions.follow: the follower of the jobs server's promotions, the configured models' last
// followed versions served from its cache (before the server accepts calls); null when off.
absl::StatusOr<std::unique_ptr<PromotionFollower>> StartFollowing(
    const ServerConfig& config, std::function<void(const std::string&)> log,
    ModelRegistry* registry, Metrics* metrics, Clock* clock) {
  if (config.promotions.follow.server.empty()) return nullptr;
  PromotionFollowerOptions options;
  options.follow = config.promotions.follow;
  for (const auto& model : config.models) options.models.push_back(model.name);
  options.log = std::move(log);
  TS_ASSIGN_OR_RETURN(auto follower, Prefixed(PromotionFollower::Create(std::move(options),
                                                                        registry, metrics, clock),
                                              "promotions.follow: "));
  follower->RestoreFromCache();
  return follower;
}

// Registers the Jobs service (jobs on) or the jobs-off answer to its RPCs, and the answer to
// methods no service takes: UNIMPLEMENTED naming what is served instead (unknown_method.h).
// Reflection v1 (reflection_v1_service.h) lists the same services as gRPC's v1alpha.
void RegisterJobsAndUnknownMethods(const ServerConfig& config, JobManager* jobs,
                                   Authorizer* authorizer, grpc::ServerBuilder* builder,
                                   std::unique_ptr<JobsService>* jobs_service,
                                   std::unique_ptr<JobsOffService>* jobs_off,
                                   std::unique_ptr<UnknownMethodService>* unknown_methods,
                                   std::unique_ptr<ReflectionV1Service>* reflection_v1) {
  std::vector<std::string> served = {taylorshift::v1::Classifier::service_full_name(),
                                     inference::GRPCInferenceService::service_full_name(),
                                     "grpc.health.v1.Health",
                                     "grpc.reflection.v1alpha.ServerReflection"};
  if (jobs != nullptr) {
    *jobs_service = std::make_unique<JobsService>(jobs, authorizer);
    builder->RegisterService(jobs_service->get());
    served.insert(served.begin() + 1, taylorshift::v1::Jobs::service_full_name());
  }
  *reflection_v1 = std::make_unique<ReflectionV1Service>(served);
  builder->RegisterService(reflection_v1->get());
  served.push_back(grpc::reflection::v1::ServerReflection::service_full_name());
  if (jobs != nullptr) {
    *unknown_methods = std::make_unique<UnknownMethodService>(std::move(served));
    builder->RegisterCallbackGenericService(unknown_methods->get());
  } else {
    *jobs_off =
        std::make_unique<JobsOffService>(authorizer, config.jobs.elsewhere, std::move(served));
    builder->RegisterCallbackGenericService(jobs_off->get());
  }
}

}  // namespace

// Declared in the order they are built; destroyed in reverse (front ends before what they use).
struct Server::Parts {
  ServerConfig config;
  std::function<void(const std::string&)> log;
  Clock* clock = nullptr;
  std::unique_ptr<Authorizer> authorizer;
  std::unique_ptr<Metrics> metrics;  // its endpoint may call the authorizer
  std::unique_ptr<ModelRegistry> registry;
  grpc::HealthCheckServiceInterface* health = nullptr;
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<PromotionFollower> follower;  // promotions.follow
  std::unique_ptr<InferenceCore> inference;
  std::unique_ptr<ClassifierService> classifier;
  std::unique_ptr<KServeService> kserve;
  std::unique_ptr<JobsService> jobs_service;
  std::unique_ptr<JobsOffService> jobs_off;  // jobs.enabled false: the Jobs RPCs' answer
  std::unique_ptr<UnknownMethodService> unknown_methods;  // jobs on: unknown methods' answer
  std::unique_ptr<ReflectionV1Service> reflection_v1;
  std::unique_ptr<grpc::Server> grpc;
  std::unique_ptr<HttpFrontend> http;
  int port = 0;
  bool stopped = false;
};

// Made once gRPC serves: the promotion follower starts polling now.
Server::Server(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {
  if (parts_->follower != nullptr) parts_->follower->Start();
}

Server::~Server() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<Server>> Server::Create(
    const ServerConfig& config, Clock* clock, std::function<void(const std::string&)> log) {
  auto parts = std::make_unique<Parts>();
  Parts& p = *parts;
  p.config = config;
  p.clock = clock;
  p.log = log != nullptr ? std::move(log)
                         : [](const std::string& line) { std::cerr << line << std::endl; };
  // A mistyped TS_CPU_CAPABILITY would otherwise leave the kernels silently uncapped.
  if (auto cap = CpuCapabilityFromEnvironment(); !cap.ok()) return cap.status();
  p.log(absl::StrCat("CPU kernels: ", DescribeCpuCapability()));
  TS_ASSIGN_OR_RETURN(p.authorizer, Prefixed(Authorizer::Create(config.auth), "auth: "));
  // Parts declares the authorizer first: it outlives the endpoint's threads.
  TS_ASSIGN_OR_RETURN(
      p.metrics,
      Prefixed(Metrics::Create(MetricsOptionsFor(config, p.authorizer.get(), clock)), "metrics: "));
  ReadGpusInto(config.nvml_library, *p.metrics, p.log);
  TS_ASSIGN_OR_RETURN(
      p.registry,
      Prefixed(ModelRegistry::Create(config.models, p.metrics.get(), clock), "loading models: "));
  LogModels(*p.registry, p.log);
  // Jobs: the store under state_dir, data paths confined to data_root. Promoted models are
  // served again before the server accepts calls. With jobs.enabled false there is no job
  // manager: nothing is read or written under state_dir (or data_root), and every Jobs RPC
  // answers FAILED_PRECONDITION saying so and where jobs run (JobsOffService).
  if (config.jobs.enabled) {
    JobManagerOptions job_options = JobOptionsFor(config);
    job_options.on_model_served = [&p](const std::string& name) {
      if (p.health != nullptr) p.health->SetServingStatus(name, true);
    };
    job_options.log = p.log;
    TS_ASSIGN_OR_RETURN(
        p.jobs, Prefixed(JobManager::Create(job_options, p.registry.get(), p.metrics.get(), clock),
                         "jobs: "));
    p.jobs->RestorePromotions();
  }
  TS_ASSIGN_OR_RETURN(p.follower,
                      StartFollowing(config, p.log, p.registry.get(), p.metrics.get(), clock));
  TS_ASSIGN_OR_RETURN(const auto credentials, Prefixed(Credentials(config.tls), "tls: "));

  p.inference = std::make_unique<InferenceCore>(
      p.registry.get(), p.authorizer.get(), p.metrics.get(), clock,
      InferenceCoreOptions{config.auth.classify_diagnostic_options});
  p.classifier = std::make_unique<ClassifierService>(p.inference.get());
  p.kserve = std::make_unique<KServeService>(p.inference.get(), config.max_infer_batch);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, credentials, &p.port);
  if (config.auth.protect_discovery && p.authorizer->enabled()) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> guards;
    guards.push_back(std::make_unique<DiscoveryGuardFactory>(
        p.authorizer.get(),
        std::set<std::string>(std::begin(kHealthServices), std::end(kHealthServices))));
    builder.experimental().SetInterceptorCreators(std::move(guards));
  }
  builder.RegisterService(p.classifier.get());
  builder.RegisterService(p.kserve.get());
  RegisterJobsAndUnknownMethods(config, p.jobs.get(), p.authorizer.get(), &builder, &p.jobs_service,
                                &p.jobs_off, &p.unknown_methods, &p.reflection_v1);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, config.max_concurrent_streams);
  // gRPC sets SO_REUSEPORT by default on Linux: a second server on the same port would start
  // and silently take part of the first one's connections. Refuse an address in use instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (config.grpc_threads > 0) {
    grpc::ResourceQuota quota("tsserver");
    quota.SetMaxThreads(config.grpc_threads);
    builder.SetResourceQuota(quota);
  }
  p.grpc = builder.BuildAndStart();
  if (p.grpc == nullptr || p.port == 0) {
    if (p.jobs != nullptr) p.jobs->Shutdown();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", config.listen));
  }
  p.health = p.grpc->GetHealthCheckService();
  p.health->SetServingStatus(true);
  for (const char* service : kHealthServices) {
    if (*service != '\0') {
      p.health->SetServingStatus(service,
                                 service != std::string_view(kJobsService) || config.jobs.enabled);
    }
  }
  for (const auto& model : p.registry->List()) p.health->SetServingStatus(model->name(), true);

  // The HTTP front end, once gRPC is up (both share the inference core).
  std::unique_ptr<Server> server(new Server(std::move(parts)));
  if (!config.http.listen.empty()) {
    HttpFrontendOptions http_options;
    http_options.http = config.http;
    http_options.tls = config.tls;
    http_options.max_message_bytes = config.max_message_bytes;
    http_options.max_infer_batch = config.max_infer_batch;
    http_options.clock = server->parts_->clock;
    if (Metrics* metrics = server->parts_->metrics.get(); metrics != nullptr) {
      http_options.on_response = [metrics](int status) { metrics->RecordHttpResponse(status); };
    }
    // On an error ~Server stops the rest.
    TS_ASSIGN_OR_RETURN(server->parts_->http,
                        HttpFrontend::Start(http_options, server->parts_->inference.get()));
  }
  return server;
}

int Server::port() const { return parts_->port; }

std::string Server::grpc_address() const {
  const std::string& listen = parts_->config.listen;
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", parts_->port);
}

std::string Server::http_address() const {
  return parts_->http == nullptr ? "" : parts_->http->address();
}

std::string Server::metrics_address() const { return parts_->metrics->bound_address(); }

void Server::Shutdown(absl::Duration grace) {
  Parts& p = *parts_;
  if (p.stopped) return;
  p.stopped = true;
  p.health->SetServingStatus(false);
  p.inference->SetDraining();
  if (p.follower != nullptr) p.follower->Stop();
  const absl::Time deadline = p.clock->Now() + grace;
  // A running training job saves its state at its next step and resumes on the next start.
  if (p.jobs != nullptr) {
    p.jobs->Shutdown();
    p.log("jobs stopped");
  }
  // Everything received runs now, queued requests without waiting for their max_queue_delay,
  // and the batchers still take what the front ends' calls in flight bring: a gRPC call already
  // accepted, or an HTTP request read but still waiting for a handler thread, is answered rather
  // than refused as the batchers close.
  p.registry->FlushAll();
  // Both front ends stop accepting and wait for their calls in flight, at the same time.
  absl::Notification http_stopped;
  std::thread http_stopper;
  if (p.http != nullptr) {
    http_stopper = std::thread([&p, &http_stopped] {
      p.http->Stop();
      http_stopped.Notify();
    });
  } else {
    http_stopped.Notify();
  }
  // gRPC takes a wall-clock deadline: what is left of the grace on the server's clock, from now.
  const auto left = [&p, deadline] {
    return std::max(absl::ZeroDuration(), deadline - p.clock->Now());
  };
  p.grpc->Shutdown(absl::ToChronoTime(absl::Now() + left()));
  http_stopped.WaitForNotificationWithTimeout(left());
  // When the grace is up, what is still queued is UNAVAILABLE and running batches stop at their
  // next step; that answers the HTTP requests still waiting too.
  p.registry->DrainAll(deadline);
  p.log("batchers drained");
  if (http_stopper.joinable()) {
    http_stopper.join();
    p.log("HTTP stopped");
  }
  p.grpc->Wait();
  p.log("stopped");
}

}  // namespace ts::server
