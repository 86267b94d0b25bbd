#include "client/channel.h"

#include <algorithm>
#include <chrono>
#include <climits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace ts::client {
namespace {

// Where Debian-family, Fedora-family and Alpine systems keep their CA bundle; gRPC's own
// default roots are used when none of them exists.
constexpr const char* kSystemRootBundles[] = {
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
};

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  TS_ASSIGN_OR_RETURN(std::string pem, ReadFile(path, flag));
  if (pem.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  return pem;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const ConnectionOptions& options) {
  if (options.server.empty()) return absl::InvalidArgumentError("--server must not be empty");
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError("--cert-file and --key-file go together (mutual TLS)");
  }
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError("--max-message-bytes must be positive");
  }
  grpc::ChannelArguments args;
  const int max_bytes =
      static_cast<int>(std::min<std::int64_t>(options.max_message_bytes, INT_MAX));
  args.SetMaxReceiveMessageSize(max_bytes);
  args.SetMaxSendMessageSize(max_bytes);

  const bool tls = options.tls || !options.ca_file.empty() || !options.cert_file.empty() ||
                   !options.tls_server_name.empty();
  if (!tls) {
    return grpc::CreateCustomChannel(options.server, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.ca_file.empty()) {
    TS_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(options.ca_file, "--ca-file"));
  } else {
    for (const char* bundle : kSystemRootBundles) {
      absl::StatusOr<std::string> roots = ReadFile(bundle);
      if (roots.ok() && !roots->empty()) {
        ssl.pem_root_certs = *std::move(roots);
        break;
      }
    }
  }
  if (!options.cert_file.empty()) {
    TS_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(options.cert_file, "--cert-file"));
    TS_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(options.key_file, "--key-file"));
  }
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  return grpc::CreateCustomChannel(options.server, grpc::SslCredentials(ssl), args);
}

void PrepareContext(const ConnectionOptions& options, std::int64_t timeout_ms,
                    grpc::ClientContext* context) {
  if (timeout_ms > 0) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  }
  if (!options.token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options.token));
  }
}

}  // namespace ts::client
