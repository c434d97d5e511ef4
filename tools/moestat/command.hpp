// The shape every `moestat` subcommand has: it registers its options, then runs if chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace moestat::cli {

/// Exit codes of the CLI.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeError = 1;  ///< A moestat::Error: bad file, failed check.
inline constexpr int kExitUsageError = 2;    ///< Bad command line (CLI11 parse errors).

class Command {
 public:
  virtual ~Command() = default;
  /// Adds the subcommand (with a one-line description and an example footer) to `app`.
  virtual CLI::App* add_to(CLI::App& app) = 0;
  /// Runs after parsing; returns the exit code or throws moestat::Error.
  virtual int run() = 0;
};

std::unique_ptr<Command> make_inspect_command();
std::unique_ptr<Command> make_demo_command();
std::unique_ptr<Command> make_convert_command();
std::unique_ptr<Command> make_plan_command();
std::unique_ptr<Command> make_eval_command();
std::unique_ptr<Command> make_hot_experts_command();
std::unique_ptr<Command> make_report_command();
std::unique_ptr<Command> make_merge_command();

}  // namespace moestat::cli
