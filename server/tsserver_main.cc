// tsserver: serves the configured models over gRPC (Classifier, KServe v2, health, reflection)
// and HTTP/JSON (KServe v2 REST and the plain route, when http.listen is set), and exports
// Prometheus metrics on its own listener.
//
//   tsserver [--config FILE] [--listen ADDR] [--metrics-listen ADDR] [--http-listen ADDR]
//            [--model NAME=CHECKPOINT]...
//            [--state-dir DIR] [--data-root DIR] [--threads N] [--ready-file FILE]
//
// Flags override the config file. SIGTERM/SIGINT: stop accepting, finish what is queued and in
// flight within shutdown_grace, exit 0. Exit 1 on a start-up error (message on stderr), 2 on a
// usage error (common/command_line.h).
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/build_version.h"
#include "common/command_line.h"
#include "common/status_macros.h"
#include "model/heap_policy.h"
#include "model/torch_compat.h"
#include "model/version_fields.h"
#include "server/config.h"
#include "server/server.h"

namespace ts::server {
namespace {

void Log(const std::string& message) {
  std::cerr << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone())
            << " tsserver: " << message << std::endl;
}

// The flags as given; an absent one leaves the config file's value.
struct Flags {
  std::string config;
  std::string listen, state_dir, data_root, ready_file;
  // Given empty, these turn the listener off.
  std::optional<std::string> metrics_listen, http_listen;
  std::optional<int> threads;
  std::vector<std::string> models;
};

void AddFlags(CLI::App& app, Flags* flags) {
  app.add_option("--config", flags->config, "YAML config file (config/default.yaml documents it)");
  app.add_option("--listen", flags->listen, "gRPC address (default 127.0.0.1:50051)");
  app.add_option("--metrics-listen", flags->metrics_listen,
                 "Prometheus /metrics address (empty = off)");
  app.add_option("--http-listen", flags->http_listen, "HTTP/JSON front end address (empty = off)");
  app.add_option("--model", flags->models,
                 "serve checkpoint CHECKPOINT as model NAME (NAME=CHECKPOINT; repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("NAME=CHECKPOINT");
  app.add_option("--state-dir", flags->state_dir, "where the server keeps its state");
  app.add_option("--data-root", flags->data_root, "the folder job data paths resolve in");
  app.add_option("--threads", flags->threads, "intra-op threads (0 = every core)")
      ->check(IntegerIn(0, INT32_MAX));
  app.add_option("--ready-file", flags->ready_file,
                 "once serving, write the bound addresses here (grpc=, metrics=, http=)");
}

absl::StatusOr<ServerConfig> BuildConfig(const Flags& flags) {
  ServerConfig config;
  if (!flags.config.empty()) {
    TS_ASSIGN_OR_RETURN(config, LoadServerConfig(flags.config));
  }
  if (!flags.listen.empty()) config.listen = flags.listen;
  if (flags.metrics_listen) config.metrics_listen = *flags.metrics_listen;
  if (flags.http_listen) config.http.listen = *flags.http_listen;
  if (!flags.state_dir.empty()) config.state_dir = flags.state_dir;
  if (!flags.data_root.empty()) config.data_root = flags.data_root;
  if (flags.threads) config.intra_op_threads = *flags.threads;
  for (const auto& flag : flags.models) {
    TS_ASSIGN_OR_RETURN(auto model, ParseModelFlag(flag));
    config.models.push_back(std::move(model));
  }
  TS_RETURN_IF_ERROR(ValidateServerConfig(config));
  if (config.models.empty()) {
    return absl::InvalidArgumentError(
        "no models to serve: give --config or --model NAME=CHECKPOINT");
  }
  return config;
}

int Run(int argc, char** argv) {
  // SIGTERM/SIGINT are taken by sigwait below; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  CLI::App app(
      "tsserver: serves the configured models over gRPC and HTTP/JSON, with Prometheus "
      "metrics. Flags override the config file.",
      "tsserver");
  UseFlagConventions(app);
  AddVersionFlag(app, TorchVersionFields);
  app.footer(
      "SIGTERM/SIGINT: stop accepting, finish what is queued and in flight within "
      "shutdown_grace, exit 0. Exit 1 on a start-up error, 2 on a usage error.");
  Flags flags;
  AddFlags(app, &flags);
  if (std::optional<int> exit = ParseCommandLine(app, argc, argv)) return *exit;
  auto config = BuildConfig(flags);
  if (!config.ok()) {
    Log(absl::StrCat("configuration error: ", config.status().message()));
    return 1;
  }
  const int threads = config->intra_op_threads > 0
                          ? config->intra_op_threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Before any tensor operation; the workers this server starts inherit it.
  if (auto cache = LimitOneDnnPrimitiveCache(config->onednn_primitive_cache_capacity);
      !cache.ok()) {
    Log(absl::StrCat("configuration error: ", cache.message()));
    return 1;
  }
  compat::SetThreads(threads);
  compat::SetCudaTf32(config->cuda_allow_tf32);
  if (auto heap = KeepFreedHeapMemory(config->heap_keep_freed_bytes); !heap.ok()) {
    Log(absl::StrCat("configuration error: ", heap.message()));
    return 1;
  }

  auto server = Server::Create(*config, RealClock(), [](const std::string& line) { Log(line); });
  if (!server.ok()) {
    Log(std::string(server.status().message()));
    return 1;
  }
  const std::string http = (*server)->http_address();
  const std::string metrics = (*server)->metrics_address();
  Log(absl::StrCat("serving gRPC on ", (*server)->grpc_address(), ", HTTP on ",
                   http.empty() ? "(off)" : http, ", metrics on ",
                   metrics.empty() ? "(off)" : metrics, ", ", threads, " intra-op threads"));
  if (!flags.ready_file.empty()) {
    const std::string tmp = flags.ready_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << "grpc=" << (*server)->grpc_address() << "\nmetrics=" << metrics << "\n";
      if (!http.empty()) out << "http=" << http << "\n";
    }
    std::rename(tmp.c_str(), flags.ready_file.c_str());
  }

  int signal = 0;
  sigwait(&signals, &signal);
  Log(absl::StrCat("received ", signal == SIGTERM ? "SIGTERM" : "SIGINT", ": draining (grace ",
                   absl::FormatDuration(config->shutdown_grace), ")"));
  (*server)->Shutdown(config->shutdown_grace);
  return 0;
}

}  // namespace
}  // namespace ts::server

int main(int argc, char** argv) try {
  return ts::server::Run(argc, argv);
} catch (const std::exception& e) {  // outside Run's own error handling, e.g. declaring the flags
  std::cerr << "tsserver: " << e.what() << "\n";
  return 1;
}
