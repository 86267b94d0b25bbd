#include "common/command_line.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ts {

void UseFlagConventions(CLI::App& app) {
  app.option_defaults()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->disable_flag_override();
}

std::optional<int> ParseCommandLine(CLI::App& app, std::vector<std::string> args) {
  // CLI11 takes the words last first.
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& version) {  // --version (common/build_version.h)
    std::cout << version.what() << std::flush;
    return 0;
  } catch (const CLI::ParseError& e) {
    // The help of the (sub)command the error is in: "tsctl jobs list --help".
    std::string command = app.get_name();
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      command += " " + sub->get_name();
    }
    std::cerr << app.get_name() << ": " << e.what() << "\nRun '" << command
              << " --help' for usage.\n";
    return kUsageExitStatus;
  }
  return std::nullopt;
}

std::optional<int> ParseCommandLine(CLI::App& app, int argc, const char* const* argv) {
  return ParseCommandLine(app, std::vector<std::string>(argv + 1, argv + argc));
}

std::optional<int> ParseCommandLineKeepingExtras(CLI::App& app, int* argc, char** argv) {
  app.allow_extras();
  if (std::optional<int> exit = ParseCommandLine(app, *argc, argv)) return exit;
  // CLI11 keeps each word it did not take as given, so they are a subsequence of argv.
  const std::vector<std::string> extras = app.remaining();
  int kept = 1;
  for (int i = 1; i < *argc && static_cast<std::size_t>(kept - 1) < extras.size(); ++i) {
    if (extras[kept - 1] == argv[i]) argv[kept++] = argv[i];
  }
  *argc = kept;
  return std::nullopt;
}

CLI::Validator IntegerIn(std::int64_t low, std::int64_t high) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        std::int64_t value = 0;
        if (absl::SimpleAtoi(text, &value) && value >= low && value <= high) return "";
        return absl::StrCat("must be an integer in ", low, "..", high, ", got '", text, "'");
      },
      absl::StrCat("[", low, "..", high, "]"));
}

CLI::Validator NumberAtLeast(double low) {
  return CLI::Validator(
      [low](std::string& text) -> std::string {
        double value = 0;
        if (absl::SimpleAtod(text, &value) && std::isfinite(value) && value >= low) return "";
        return absl::StrCat("must be a number >= ", low, ", got '", text, "'");
      },
      absl::StrCat(">= ", low));
}

CLI::Validator NonEmpty() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; }, "");
}

}  // namespace ts
