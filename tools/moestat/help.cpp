// `moestat help [COMMAND]`: the top-level help, or a command's, as `--help` prints them; the
// spelling many tools (git, cargo, go) accept, so a user who types it is answered.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "command.hpp"

namespace moestat::cli {
namespace {

class HelpCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    app_ = &app;
    CLI::App* sub =
        app.add_subcommand("help", "Print this help, or a command's options and example");
    // Checked at parse time, when every command is registered: an unknown name is a usage
    // error (exit 2) naming the commands there are.
    sub->add_option("COMMAND", name_, "The command to describe")
        ->check(
            CLI::Validator([this](std::string& name) { return unknown_command(name); }, "COMMAND"));
    sub->footer(
        "Example:\n"
        "  moestat help plan\n"
        "  moestat help");
    return sub;
  }

  int run() override {
    if (name_.empty()) {
      // app_->help() would describe the command chosen on this command line: `help` itself.
      fmt::print("{}", app_->get_formatter()->make_help(app_, app_->get_name(),
                                                        CLI::AppFormatMode::Normal));
    } else {
      fmt::print("{}", command(name_)->help(app_->get_name()));
    }
    return kExitOk;
  }

 private:
  /// The command called `name`, or nullptr.
  const CLI::App* command(const std::string& name) const {
    for (const CLI::App* sub : app_->get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == name) return sub;
    }
    return nullptr;
  }

  /// "" when `name` is a command; otherwise the message CLI11 prints as the usage error.
  std::string unknown_command(const std::string& name) const {
    if (command(name) != nullptr) return "";
    std::vector<std::string> names;
    for (const CLI::App* sub : app_->get_subcommands([](const CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    return fmt::format("no command {} (the commands are {})", name, fmt::join(names, ", "));
  }

  CLI::App* app_ = nullptr;
  std::string name_;
};

}  // namespace

std::unique_ptr<Command> make_help_command() { return std::make_unique<HelpCommand>(); }

}  // namespace moestat::cli
