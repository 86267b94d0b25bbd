#include "client/command_line.h"

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/proto_names.h"

namespace ts::client {

int Usage(absl::string_view message) {
  std::cerr << "tsctl: " << message << "\nRun 'tsctl --help' for usage.\n";
  return kExitUsage;
}

int RpcFailed(const std::string& rpc, const ConnectionOptions& options,
              const grpc::Status& status) {
  std::cerr << "tsctl: " << rpc << " on " << options.server
            << " failed: " << GrpcCodeName(status.error_code()) << ": " << status.error_message()
            << "\n";
  return kExitError;
}

Flags::Flags(std::set<std::string> value_flags, std::set<std::string> bool_flags,
             std::set<std::string> list_flags)
    : value_flags_(std::move(value_flags)),
      bool_flags_(std::move(bool_flags)),
      list_flags_(std::move(list_flags)) {}

bool Flags::Parse(const std::vector<std::string>& args) {
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

bool Flags::Fail(std::string message) {
  if (error_.empty()) error_ = std::move(message);
  return false;
}

bool Flags::Has(const std::string& name) const {
  return bools_.count(name) != 0 || values_.count(name) != 0 || lists_.count(name) != 0;
}

std::string Flags::String(const std::string& name, const std::string& fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::vector<std::string> Flags::List(const std::string& name) const {
  const auto it = lists_.find(name);
  return it == lists_.end() ? std::vector<std::string>{} : it->second;
}

std::int64_t Flags::Int(const std::string& name, std::int64_t fallback, std::int64_t low,
                        std::int64_t high) {
  const auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  std::int64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value) || value < low || value > high) {
    Fail(absl::StrCat("--", name, " must be an integer in ", low, "..", high, ", got '", it->second,
                      "'"));
    return fallback;
  }
  return value;
}

double Flags::Double(const std::string& name, double fallback, double low) {
  const auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  double value = 0;
  if (!absl::SimpleAtod(it->second, &value) || !std::isfinite(value) || value < low) {
    Fail(absl::StrCat("--", name, " must be a number >= ", low, ", got '", it->second, "'"));
    return fallback;
  }
  return value;
}

const std::set<std::string>& CommonValueFlags() {
  static const std::set<std::string>* flags =
      new std::set<std::string>{"server", "ca-file",    "cert-file",         "key-file",
                                "token",  "timeout-ms", "max-message-bytes", "tls-server-name"};
  return *flags;
}

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

std::shared_ptr<grpc::Channel> ConnectOrReport(const ConnectionOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(options);
  if (!channel.ok()) {
    std::cerr << "tsctl: " << GrpcCodeName(ToGrpcStatus(channel.status()).error_code()) << ": "
              << channel.status().message() << "\n";
    return nullptr;
  }
  return *std::move(channel);
}

}  // namespace ts::client
