// Command-line conventions shared by the project's binaries, on CLI11 (Debian libcli11-dev):
// flags are "--flag VALUE" or "--flag=VALUE", a flag given twice keeps its last value, "--"
// ends the flags; --help prints the generated usage on stdout and exits 0; a usage error (an
// unknown flag, a missing or malformed value) prints "PROGRAM: MESSAGE" naming the flag on
// stderr and exits 2. Plus the value checks the binaries share. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"

namespace ts {

// The exit status of a usage error, in every binary.
constexpr int kUsageExitStatus = 2;

// Applies the conventions above to `app` and the options and subcommands added to it later:
// call it before adding any. Flags that take no value refuse "--flag=VALUE" (other than
// "--flag=true").
void UseFlagConventions(CLI::App& app);

// Parses `args` (the words after the program name) with `app`. nullopt: go on. Otherwise the
// exit status, after printing the help of the (sub)command asked for or --version's text
// (stdout, 0) or
// "PROGRAM: MESSAGE\nRun 'PROGRAM [SUBCOMMAND...] --help' for usage." (stderr, 2).
std::optional<int> ParseCommandLine(CLI::App& app, std::vector<std::string> args);
std::optional<int> ParseCommandLine(CLI::App& app, int argc, const char* const* argv);

// For a program that hands the flags it does not know on to another parser (Google Benchmark's
// benchmark::Initialize(&argc, argv)): as ParseCommandLine, but those words are no usage error;
// on nullopt, argv holds the program name and them, in the order given, and *argc their count.
std::optional<int> ParseCommandLineKeepingExtras(CLI::App& app, int* argc, char** argv);

// The value must be an integer in [low, high]; otherwise "--flag: must be an integer in
// LOW..HIGH, got 'VALUE'".
CLI::Validator IntegerIn(std::int64_t low, std::int64_t high);
// The value must be a finite number >= low; otherwise "--flag: must be a number >= LOW, got
// 'VALUE'".
CLI::Validator NumberAtLeast(double low);
// The value must not be empty; otherwise "--flag: must not be empty".
CLI::Validator NonEmpty();

// Adds option `name`, whose text `parse` (returning absl::StatusOr<T>) turns into *value; a
// value it refuses is a usage error "--flag: <the status message>".
template <typename T, typename Parse>
CLI::Option* AddParsedOption(CLI::App& app, const std::string& name, T* value, Parse parse,
                             const std::string& description) {
  return app.add_option_function<std::string>(
      name,
      [name, value, parse](const std::string& text) {
        auto parsed = parse(text);
        if (!parsed.ok()) throw CLI::ValidationError(name, std::string(parsed.status().message()));
        *value = *std::move(parsed);
      },
      description);
}

}  // namespace ts
