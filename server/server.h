// The whole server as a library: Server::Create builds what a ServerConfig describes (metrics,
// auth, the model registry, jobs, the inference core, the gRPC services — Classifier, KServe v2,
// Jobs, health, reflection — and the HTTP front end) and starts serving; Shutdown drains it.
// tsserver's main only parses flags, sets process-wide options and waits for a signal; tests
// can run a server in-process with their own clock.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/config.h"

namespace ts::server {

class Server {
 public:
  // Start-up errors come back with what failed ("loading models: …", "tls: …"); nothing is
  // left running then. `log` receives one line per event (null: stderr).
  static absl::StatusOr<std::unique_ptr<Server>> Create(
      const ServerConfig& config, Clock* clock,
      std::function<void(const std::string&)> log = nullptr);
  ~Server();  // Shutdown(zero grace) unless done
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;                     // the gRPC port bound (listen may say :0)
  std::string grpc_address() const;     // host:port
  std::string http_address() const;     // empty when http.listen is empty
  std::string metrics_address() const;  // empty when metrics_listen is empty

  // Health turns NOT_SERVING, running jobs save their state, batchers stop accepting and run
  // what is queued at once (whatever its max_queue_delay), then the HTTP front end and gRPC stop
  // accepting and answer what is in flight — all within `grace` — then everything stops.
  // Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  struct Parts;
  explicit Server(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace ts::server
