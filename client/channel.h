// Connection setup for tsctl: builds the gRPC channel (plaintext, TLS with the system roots
// or a given CA, optionally mTLS) and prepares each call's ClientContext (deadline and the
// bearer token). The token is attached per call rather than as call credentials because gRPC
// refuses call credentials on plaintext channels, and a token over loopback plaintext is a
// supported setup. Thread-safe: ConnectionOptions is read-only after parsing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace ts::client {

struct ConnectionOptions {
  // host:port (or any gRPC target URI).
  std::string server = "127.0.0.1:50051";
  // Use TLS. Implied by ca_file / cert_file / key_file.
  bool tls = false;
  // PEM CA bundle to verify the server with; empty = the system roots.
  std::string ca_file;
  // PEM client certificate chain and private key for mutual TLS; both or neither.
  std::string cert_file;
  std::string key_file;
  // Overrides the name checked against the server certificate (e.g. "localhost" when
  // dialling 127.0.0.1); empty = the host part of `server`.
  std::string tls_server_name;
  // Sent as "authorization: Bearer <token>" on every call; empty = none.
  std::string token;
  // Largest message sent or received.
  std::int64_t max_message_bytes = std::int64_t{64} << 20;
};

// The channel for `options`. Errors: INVALID_ARGUMENT (cert without key and the like),
// NOT_FOUND / PERMISSION_DENIED when a PEM file cannot be read. Does not connect yet.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const ConnectionOptions& options);

// Sets the deadline (now + timeout_ms; none when timeout_ms <= 0) and the bearer token.
void PrepareContext(const ConnectionOptions& options, std::int64_t timeout_ms,
                    grpc::ClientContext* context);

}  // namespace ts::client
