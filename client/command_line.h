// tsctl's command-line plumbing shared by its commands (on CLI11, common/command_line.h): exit
// codes, the connection flags every command takes, running a parsed command, and the usual
// ways of reporting a failure. The free functions are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/channel.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace ts::client {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// Prints "tsctl: MESSAGE" and a hint to stderr; returns kExitUsage.
int Usage(absl::string_view message);

// Prints a local error (one that is no RPC's) as "tsctl: CODE: message" to stderr; returns
// kExitError.
int LocalError(const absl::Status& status);

// Prints "tsctl: RPC on SERVER failed: CODE: message" to stderr; returns kExitError.
int RpcFailed(const std::string& rpc, const ConnectionOptions& options, const grpc::Status& status);

// One unary call of `method` on `stub`, its context from PrepareContext(connection, timeout_ms).
// Returns whether it succeeded; a failure is printed as RpcFailed(rpc, connection, status).
template <typename Stub, typename Request, typename Response>
bool CallOrReport(Stub& stub,
                  grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                  const std::string& rpc, const ConnectionOptions& connection,
                  std::int64_t timeout_ms, const Request& request, Response* response) {
  grpc::ClientContext context;
  PrepareContext(connection, timeout_ms, &context);
  const grpc::Status status = (stub.*method)(&context, request, response);
  if (!status.ok()) RpcFailed(rpc, connection, status);
  return status.ok();
}

// The flags every command takes, as parsed: the connection (--server, --tls, the TLS files,
// --tls-server-name, --token defaulting to $TSCTL_TOKEN, --max-message-bytes) and --timeout-ms
// (absent: each command's default).
struct ConnectionFlags {
  ConnectionOptions connection;
  std::optional<std::int64_t> timeout_ms;
  // --timeout-ms, else `fallback`.
  std::int64_t TimeoutMs(std::int64_t fallback) const { return timeout_ms.value_or(fallback); }
  // The deadline of a unary call: --timeout-ms, else 30 s.
  std::int64_t UnaryTimeoutMs() const { return TimeoutMs(30000); }
};

// Adds the flags of ConnectionFlags to `command`, parsed into *flags (which must outlive the
// parse). --server must not be empty; --cert-file and --key-file go together.
void AddConnectionFlags(CLI::App& command, ConnectionFlags* flags);

// tsctl's command line: a CLI11 app (common/command_line.h's conventions) whose subcommands
// each run after a successful parse. Not thread-safe; not movable.
class Commands {
 public:
  Commands();
  Commands(const Commands&) = delete;
  Commands& operator=(const Commands&) = delete;

  // The top-level app, for adding commands.
  CLI::App& app() { return app_; }

  // Makes `command` (a subcommand of app() or of one of its subcommands) run `run` when it is
  // the command given; its result is Run's exit status.
  void OnRun(CLI::App& command, std::function<int()> run);

  // Runs the command line `args` (the words after "tsctl"): the exit status of the command
  // given, 0 after --help, or kExitUsage after a usage error or when no command is given (the
  // usage goes to stderr).
  int Run(std::vector<std::string> args);

 private:
  CLI::App app_;
  int exit_status_ = kExitOk;
};

// The channel for `options`, or nullptr after printing "tsctl: CODE: message" to stderr (e.g.
// a PEM file that cannot be read).
std::shared_ptr<grpc::Channel> ConnectOrReport(const ConnectionOptions& options);

}  // namespace ts::client
