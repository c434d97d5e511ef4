// The shape every `moestat` subcommand has: it registers its options, then runs if chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

namespace moestat::cli {

/// Exit codes of the CLI.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeError = 1;  ///< A moestat::Error: bad file, failed check.
inline constexpr int kExitUsageError = 2;    ///< Bad command line (CLI11 parse errors).

/// A number in [0, 1]. CLI::Range lets NaN through (every comparison with NaN is false), so
/// a fraction is checked as "inside", never as "not outside"; infinities are outside.
inline const CLI::Validator kFraction(
    [](std::string& text) -> std::string {
      double value = 0.0;
      if (!CLI::detail::lexical_cast(text, value)) return "Value " + text + " is not a number";
      if (value >= 0.0 && value <= 1.0) return "";
      return "Value " + text + " not in range [0, 1]";
    },
    "FRACTION in [0, 1]");

/// Adds a range check to every integer option of `app` and its subcommands, so that a value
/// beyond the 64-bit bounds is a usage error rather than silently clamped. Call once every
/// subcommand has registered its options.
void refuse_out_of_range_integers(CLI::App& app);

/// Checks of a number option that say what is wrong in a line ("must be greater than 0, got
/// 0"), where CLI11's PositiveNumber and NonNegativeNumber print the range of a double (a
/// number of 309 digits). Text that is not a number is left to CLI11's conversion message.
extern const CLI::Validator kPositive;
extern const CLI::Validator kNonNegative;

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
std::unique_ptr<Command> make_advise_command();
std::unique_ptr<Command> make_hot_experts_command();
std::unique_ptr<Command> make_llama_offload_command();
std::unique_ptr<Command> make_report_command();
std::unique_ptr<Command> make_merge_command();
std::unique_ptr<Command> make_simulate_command();
#ifdef MOESTAT_WITH_LLAMA_CPP
/// `moestat llama-record`: only in a build with llama.cpp (the llama_cpp component).
std::unique_ptr<Command> make_llama_record_command();
#endif
/// `moestat help [COMMAND]`; register it last, after the commands it describes.
std::unique_ptr<Command> make_help_command();

}  // namespace moestat::cli
