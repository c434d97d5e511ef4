// `moestat`: the command-line tool. Each subcommand lives in its own file.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <memory>
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

/// Levenshtein distance: how many letters to insert, delete or change to turn `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/// The candidate `word` was probably meant as: the nearest within two edits, or one that
/// starts with it or that it starts with ("--replica" for "--replicas"); "" when none is.
std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = 3;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    const bool prefix = candidate.starts_with(word) || word.starts_with(candidate);
    if (distance < best_distance || (prefix && best.empty())) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

/// The first word of the command line that no command or option took, said plainly with
/// the one it is close to: `--replica 288` otherwise reads "--replicas is required", and
/// `demoo` "The following arguments were not expected". "" when every word was taken.
std::string unexpected_word_message(CLI::App& app) {
  const std::vector<CLI::App*> parsed = app.get_subcommands();
  CLI::App& command = parsed.empty() ? app : *parsed.front();
  const std::vector<std::string> words = command.remaining();
  if (words.empty()) return "";
  const std::string word = words.front().substr(0, words.front().find('='));
  const std::string where =
      parsed.empty() ? "moestat" : fmt::format("moestat {}", command.get_name());
  std::vector<std::string> candidates;
  if (word.starts_with("-")) {
    for (const CLI::Option* option : command.get_options()) {
      for (const std::string& name : option->get_lnames()) candidates.push_back("--" + name);
    }
  } else if (parsed.empty()) {
    for (const CLI::App* subcommand : app.get_subcommands({})) {
      candidates.push_back(subcommand->get_name());
    }
  } else {
    return fmt::format("{}: unexpected argument '{}'", where, words.front());
  }
  const std::string meant = closest(word, candidates);
  const std::string what = word.starts_with("-") ? "option" : "command";
  return meant.empty()
             ? fmt::format("{}: unknown {} '{}'", where, what, word)
             : fmt::format("{}: unknown {} '{}'; did you mean {}?", where, what, word, meant);
}

/// The exit code for a parse that ended in `error`, once it is printed. CLI11 answers
/// --help when every word has been read but before it refuses the words it did not expect:
/// alone, `moestat bogus --help` and `moestat plan --bogus --help` would print a help and
/// succeed, hiding the mistake. Those words are a usage error, --help or not; and they are
/// said first, as they explain the other errors ("--replicas is required" after `--replica
/// 288`).
int exit_after_parse_error(CLI::App& app, const CLI::ParseError& error) {
  if (const std::string message = unexpected_word_message(app); !message.empty()) {
    fmt::print(stderr, "{}\nRun with --help for more information.\n", message);
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
  std::vector<std::unique_ptr<Command> (*)()> makers{
      moestat::cli::make_demo_command,         moestat::cli::make_inspect_command,
      moestat::cli::make_convert_command,      moestat::cli::make_plan_command,
      moestat::cli::make_eval_command,         moestat::cli::make_advise_command,
      moestat::cli::make_hot_experts_command,  moestat::cli::make_report_command,
      moestat::cli::make_merge_command,        moestat::cli::make_simulate_command,
      moestat::cli::make_llama_offload_command};
#ifdef MOESTAT_WITH_LLAMA_CPP
  makers.push_back(moestat::cli::make_llama_record_command);
#endif
  makers.push_back(moestat::cli::make_help_command);  // last: it describes the others
  for (auto make : makers) {
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
  // Named from the commands this build has (llama-record only with llama.cpp).
  std::vector<std::string> names;
  for (const auto& [subcommand, command] : commands) names.push_back(subcommand->get_name());
  fmt::print(stderr, "moestat: a command is required ({})\nRun with --help for more information.\n",
             fmt::join(names, ", "));
  return moestat::cli::kExitUsageError;
}
