// tsctl's command-line plumbing shared by its commands: exit codes, the flag parser, the
// connection flags every command takes, and the usual ways of reporting a failure.
// Flags is not thread-safe; the free functions are.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "client/channel.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"

namespace ts::client {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// Prints "tsctl: MESSAGE" and a hint to stderr; returns kExitUsage.
int Usage(absl::string_view message);

// Prints "tsctl: RPC on SERVER failed: CODE: message" to stderr; returns kExitError.
int RpcFailed(const std::string& rpc, const ConnectionOptions& options, const grpc::Status& status);

// Command-line flags of one command. Flags not in the command's spec are usage errors. The
// first problem (in Parse, a typed accessor, or reported through Fail) is kept in error();
// accessors then return their fallback, so a command reads every flag and checks once.
// Flags take their value as "--flag VALUE" or "--flag=VALUE"; "--" ends the flags; "-" and
// anything not starting with "--" is a positional argument.
class Flags {
 public:
  // `value_flags` take a value, `bool_flags` do not, `list_flags` take every following
  // argument up to the next flag.
  Flags(std::set<std::string> value_flags, std::set<std::string> bool_flags,
        std::set<std::string> list_flags = {});

  // False (with error() set) on an unknown flag or a missing value.
  bool Parse(const std::vector<std::string>& args);

  // Records a usage problem (the first one wins); always false.
  bool Fail(std::string message);
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }

  bool Has(const std::string& name) const;
  std::string String(const std::string& name, const std::string& fallback) const;
  std::vector<std::string> List(const std::string& name) const;
  // The flag as an integer in [low, high], or `fallback` when absent.
  std::int64_t Int(const std::string& name, std::int64_t fallback, std::int64_t low,
                   std::int64_t high);
  // The flag as a finite number >= low, or `fallback` when absent.
  double Double(const std::string& name, double fallback, double low);
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::set<std::string> value_flags_, bool_flags_, list_flags_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> lists_;
  std::set<std::string> bools_;
  std::vector<std::string> positionals_;
  std::string error_;
};

// The value flags every command takes: --server, the TLS files, --token, --timeout-ms,
// --max-message-bytes, --tls-server-name (and the bool flag --tls).
const std::set<std::string>& CommonValueFlags();

// The channel for `options`, or nullptr after printing "tsctl: CODE: message" to stderr (e.g.
// a PEM file that cannot be read).
std::shared_ptr<grpc::Channel> ConnectOrReport(const ConnectionOptions& options);

// `base` plus `more`.
std::set<std::string> With(std::set<std::string> base, std::initializer_list<const char*> more);

// The connection from the common flags (the token defaults to $TSCTL_TOKEN); problems are
// recorded in `flags`.
ConnectionOptions ConnectionFromFlags(Flags& flags);

}  // namespace ts::client
