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
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "model/heap_policy.h"
#include "model/torch_compat.h"
#include "server/config.h"
#include "server/server.h"

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
  if (!flags->ready_file.empty()) {
    const std::string tmp = flags->ready_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << "grpc=" << (*server)->grpc_address() << "\nmetrics=" << metrics << "\n";
      if (!http.empty()) out << "http=" << http << "\n";
    }
    std::rename(tmp.c_str(), flags->ready_file.c_str());
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

int main(int argc, char** argv) { return ts::server::Run(argc, argv); }
