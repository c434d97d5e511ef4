// Running the `moestat` binary (MOESTAT_CLI_PATH) from a test: exit code, stdout, stderr.
#pragma once

#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/test_support.hpp"

namespace moestat::test {

struct CliRun {
  int code = -1;
  std::string out, err;
};

/// Whether `needle` occurs in `text`.
inline bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

inline std::string read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Runs the CLI with `args` (shell syntax), capturing stdout, stderr and the exit code.
inline CliRun run_cli(const std::string& args) {
  ScratchDir dir;
  // NOTE: fmt rather than string concatenation, which trips GCC 12's -Wrestrict.
  const std::string command =
      fmt::format("'{}' {} >'{}' 2>'{}'", MOESTAT_CLI_PATH, args, (dir.path() / "out").string(),
                  (dir.path() / "err").string());
  const int status = std::system(command.c_str());
  CliRun run;
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = read_whole_file(dir.path() / "out");
  run.err = read_whole_file(dir.path() / "err");
  return run;
}

inline std::string quoted(const std::filesystem::path& path) {
  return fmt::format("'{}'", path.string());
}

}  // namespace moestat::test
