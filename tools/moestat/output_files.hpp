// The CLI's rules for the files and directories a command writes (docs/cli.md, "Output
// files"): checked before anything is written, never an input, and no trace of a failure.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace moestat::cli {

/// io::check_output_path on every non-empty path, so that a command with several outputs
/// fails before it writes the first; and moestat::Error when an output is one of `inputs`
/// (the same file: device and inode, so a hard link or another spelling counts too), which
/// writing it would destroy before or while it is read. Every command that writes calls it
/// with everything it reads.
void check_outputs(std::span<const std::filesystem::path> outputs,
                   std::span<const std::string> inputs = {});

/// Throws moestat::Error when `out` is one of `ins` (the same file: device and inode, so a
/// link or another spelling counts too), whatever `force`; and when `out` exists and `force`
/// is false, since a forgotten OUT makes the first input the output.
void refuse_overwriting(const std::filesystem::path& out, std::span<const std::string> ins,
                        bool force);

/// A directory a command writes into, created (with its missing parents) if missing. If the
/// command fails, the destructor removes what this object created, and only that: the
/// `files` it was told of, then the directories, deepest first, each only if empty.
class OutputDirectory {
 public:
  OutputDirectory(std::filesystem::path path, std::vector<std::string> files);
  OutputDirectory(const OutputDirectory&) = delete;
  OutputDirectory& operator=(const OutputDirectory&) = delete;
  ~OutputDirectory();

  const std::filesystem::path& path() const { return path_; }
  /// The command succeeded: keep everything.
  void keep() { created_.clear(); }

 private:
  void remove_created() noexcept;

  std::filesystem::path path_;
  std::vector<std::string> files_;
  std::vector<std::filesystem::path> created_;  // deepest first
};

/// The files a command writes, prepared before the first is written: each one's missing
/// parent directories created (as OutputDirectory makes --svg's and demo's), then
/// check_outputs on all. If the command fails, the destructor removes the directories it
/// created and the outputs written in them; directories that were there are left alone.
class OutputFiles {
 public:
  explicit OutputFiles(std::span<const std::filesystem::path> outputs,
                       std::span<const std::string> inputs = {});

  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;
  ~OutputFiles();

  /// The command succeeded: keep everything.
  void keep();

 private:
  // One per missing parent, outermost first, so that destruction removes the deepest first.
  std::vector<std::unique_ptr<OutputDirectory>> created_;
};

}  // namespace moestat::cli
