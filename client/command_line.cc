#include "client/command_line.h"

#include <cstdint>
#include <iostream>
#include <utility>

#include "absl/status/statusor.h"
#include "api/proto_names.h"
#include "common/build_version.h"
#include "common/command_line.h"

namespace ts::client {

int Usage(absl::string_view message) {
  std::cerr << "tsctl: " << message << "\nRun 'tsctl --help' for usage.\n";
  return kExitUsage;
}

int LocalError(const absl::Status& status) {
  std::cerr << "tsctl: " << GrpcCodeName(ToGrpcStatus(status).error_code()) << ": "
            << status.message() << "\n";
  return kExitError;
}

int RpcFailed(const std::string& rpc, const ConnectionOptions& options,
              const grpc::Status& status) {
  std::cerr << "tsctl: " << rpc << " on " << options.server
            << " failed: " << GrpcCodeName(status.error_code()) << ": " << status.error_message()
            << "\n";
  return kExitError;
}

void AddConnectionFlags(CLI::App& command, ConnectionFlags* flags) {
  // The flags added here are listed under "Connection" in the help.
  const std::string group = command.option_defaults()->get_group();
  command.option_defaults()->group("Connection");
  ConnectionOptions& connection = flags->connection;
  command.add_option("--server", connection.server, "server address (host:port or a gRPC target)")
      ->capture_default_str()
      ->check(NonEmpty());
  command.add_flag("--tls", connection.tls, "use TLS with the system CA roots");
  command.add_option("--ca-file", connection.ca_file,
                     "verify the server with this PEM CA bundle (implies --tls)");
  CLI::Option* cert =
      command.add_option("--cert-file", connection.cert_file,
                         "PEM client certificate for mutual TLS, with --key-file (implies --tls)");
  CLI::Option* key =
      command.add_option("--key-file", connection.key_file, "PEM private key of --cert-file");
  cert->needs(key);
  key->needs(cert);
  command.add_option("--tls-server-name", connection.tls_server_name,
                     "name to check in the server certificate (implies --tls)");
  command
      .add_option("--token", connection.token, "send \"authorization: Bearer TOKEN\" on every call")
      ->envname("TSCTL_TOKEN");
  command
      .add_option("--timeout-ms", flags->timeout_ms,
                  "deadline of each call (default 30000; 0 = none); classify and bench use "
                  "--deadline-ms instead when it is given; following a job (--wait, jobs "
                  "watch) has no deadline unless this is given")
      ->check(IntegerIn(0, INT32_MAX));
  command
      .add_option("--max-message-bytes", connection.max_message_bytes,
                  "largest message sent or received")
      ->capture_default_str()
      ->check(IntegerIn(1, std::int64_t{1} << 31));
  command.option_defaults()->group(group);
}

Commands::Commands() : app_("tsctl: the remote CLI for TaylorShift Serve", "tsctl") {
  UseFlagConventions(app_);
  // tsctl links no LibTorch: the version and the commit only.
  AddVersionFlag(app_);
  // One command per command line: a later word that names another command is an argument.
  app_.require_subcommand(0, 1);
  app_.footer(
      "Run 'tsctl COMMAND --help' for a command's flags.\n"
      "Exit status: 0 success, 1 RPC or I/O error (the gRPC code is named on stderr; classify "
      "and bench report per-request failures and exit 1 after all inputs / when no request "
      "succeeded), a followed job that FAILED or was CANCELLED (stderr names the reason), or a "
      "health status other than SERVING, 2 usage error.");
}

void Commands::OnRun(CLI::App& command, std::function<int()> run) {
  command.callback([this, run = std::move(run)] { exit_status_ = run(); });
}

int Commands::Run(std::vector<std::string> args) {
  if (!args.empty() && args[0] == "help") args[0] = "--help";
  exit_status_ = kExitOk;
  if (std::optional<int> exit = ParseCommandLine(app_, std::move(args))) return *exit;
  if (app_.get_subcommands().empty()) {
    std::cerr << app_.help();
    return kExitUsage;
  }
  return exit_status_;
}

std::shared_ptr<grpc::Channel> ConnectOrReport(const ConnectionOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(options);
  if (channel.ok()) return *std::move(channel);
  LocalError(channel.status());
  return nullptr;
}

}  // namespace ts::client
