// `moestat`: the command-line tool. Each subcommand lives in its own file.
#include <fmt/format.h>
#include <signal.h>

#include <cstdio>
#include <moestat/error.hpp>
#include <moestat/io/output_file.hpp>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "command.hpp"

namespace {

/// Removes the temporary files of the writes in progress, then ends the process by the same
/// signal, so the parent still sees what killed it.
extern "C" void remove_temporaries_and_die(int signal) {
  moestat::io::remove_temporary_files();
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

/// An interrupted command leaves no `.NAME.tmp-*` file behind (kill -9 cannot be caught: the
/// next write of the same file sweeps those). A signal the parent ignores (nohup) stays so.
void remove_temporaries_on_signals() {
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    if (::sigaction(signal, nullptr, &current) != 0 || current.sa_handler == SIG_IGN) continue;
    struct sigaction action {};
    action.sa_handler = remove_temporaries_and_die;
    sigemptyset(&action.sa_mask);
    ::sigaction(signal, &action, nullptr);
  }
}

/// The exit code for a parse that ended in `error`, once it is printed. CLI11 answers
/// --help when every word has been read but before it refuses the words it did not expect:
/// alone, `moestat bogus --help` and `moestat plan --bogus --help` would print a help and
/// succeed, hiding the mistake. Those words are a usage error, --help or not.
int exit_after_parse_error(CLI::App& app, const CLI::ParseError& error) {
  const bool asks_for_help = dynamic_cast<const CLI::CallForHelp*>(&error) != nullptr ||
                             dynamic_cast<const CLI::CallForAllHelp*>(&error) != nullptr;
  const std::vector<std::string> unexpected = app.remaining(true);
  if (asks_for_help && !unexpected.empty()) {
    app.exit(CLI::ExtrasError(unexpected));
    return moestat::cli::kExitUsageError;
  }
  // Every real parse error is a usage error (2), whatever CLI11's own code for it.
  return app.exit(error) == 0 ? moestat::cli::kExitOk : moestat::cli::kExitUsageError;
}

}  // namespace

int main(int argc, char** argv) {
  using moestat::cli::Command;
  remove_temporaries_on_signals();
  CLI::App app{
      "moestat: record how Mixture-of-Experts models route tokens to experts, and "
      "inspect the recordings.",
      "moestat"};
  app.set_version_flag("--version", "moestat " MOESTAT_VERSION, "Print the version and exit");
  // At most one; "none" is reported below, so that an unknown word is reported as such.
  app.require_subcommand(0, 1);
  app.footer(
      "Run 'moestat help COMMAND' or 'moestat COMMAND --help' for a command's options and an "
      "example.");

  std::vector<std::pair<CLI::App*, std::unique_ptr<Command>>> commands;
  for (auto make : {moestat::cli::make_demo_command, moestat::cli::make_inspect_command,
                    moestat::cli::make_convert_command, moestat::cli::make_plan_command,
                    moestat::cli::make_eval_command, moestat::cli::make_advise_command,
                    moestat::cli::make_hot_experts_command, moestat::cli::make_report_command,
                    moestat::cli::make_merge_command, moestat::cli::make_simulate_command,
                    moestat::cli::make_help_command}) {
    std::unique_ptr<Command> command = make();
    CLI::App* subcommand = command->add_to(app);
    commands.emplace_back(subcommand, std::move(command));
  }
  moestat::cli::refuse_out_of_range_integers(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion& version) {
    // CLI11 answers --version as soon as it meets it, whatever follows; a word after it is
    // a mistake the user should hear about, not a success.
    if (argc != 2) {
      fmt::print(stderr, "moestat: --version takes no other arguments\n");
      return moestat::cli::kExitUsageError;
    }
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    return exit_after_parse_error(app, error);
  }

  try {
    for (auto& [subcommand, command] : commands) {
      if (subcommand->parsed()) return command->run();
    }
  } catch (const moestat::Error& error) {
    std::fflush(stdout);
    fmt::print(stderr, "moestat: error: {}\n", error.message());
    return moestat::cli::kExitRuntimeError;
  } catch (const std::bad_alloc&) {
    // Readers and planners bound what they allocate; this is a machine with less memory than
    // the bounds allow. Say which command, so the file or size it names is known.
    std::fflush(stdout);
    std::vector<std::string_view> args(argv + 1, argv + argc);
    fmt::print(stderr,
               "moestat: error: out of memory running `moestat {}`: a file or size it names is "
               "too large for this machine's memory\n",
               fmt::join(args, " "));
    return moestat::cli::kExitRuntimeError;
  } catch (const std::exception& error) {
    std::fflush(stdout);
    fmt::print(stderr, "moestat: error: {}\n", error.what());
    return moestat::cli::kExitRuntimeError;
  }
  fmt::print(
      stderr,
      "moestat: a command is required (demo, inspect, convert, plan, eval, advise, "
      "hot-experts, report, merge, simulate, help)\nRun with --help for more information.\n");
  return moestat::cli::kExitUsageError;
}
