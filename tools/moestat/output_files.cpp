// Output checks shared by the subcommands.
#include "output_files.hpp"

#include <sys/stat.h>

#include <map>
#include <moestat/error.hpp>
#include <moestat/io/output_file.hpp>

namespace moestat::cli {

namespace {

/// Throws when `out` exists and is one of `ins`; returns whether `out` exists.
bool refuse_input_as_output(const std::filesystem::path& out, std::span<const std::string> ins) {
  struct stat written {};
  if (::stat(out.c_str(), &written) != 0) return false;  // nothing there to lose
  for (const std::string& in : ins) {
    struct stat read {};
    if (in.empty() || ::stat(in.c_str(), &read) != 0) continue;  // its reader names the problem
    MOESTAT_CHECK(read.st_dev != written.st_dev || read.st_ino != written.st_ino,
                  "{} is also an input ({}): the output must be another file", out.string(), in);
  }
  return true;
}

}  // namespace

void check_outputs(std::span<const std::filesystem::path> outputs,
                   std::span<const std::string> inputs) {
  for (const std::filesystem::path& path : outputs) {
    if (path.empty()) continue;
    io::check_output_path(path);
    refuse_input_as_output(path, inputs);
  }
}

void refuse_overwriting(const std::filesystem::path& out, std::span<const std::string> ins,
                        bool force) {
  if (!refuse_input_as_output(out, ins)) return;
  MOESTAT_CHECK(force,
                "{} exists; give --force to replace it (the output comes first: moestat merge "
                "OUT IN...)",
                out.string());
}

OutputDirectory::OutputDirectory(std::filesystem::path path, std::vector<std::string> files)
    : path_(std::move(path)), files_(std::move(files)) {
  // The missing directories, deepest first, before create_directories makes them.
  for (std::filesystem::path p = path_; !p.empty(); p = p.parent_path()) {
    std::error_code error;
    if (std::filesystem::exists(std::filesystem::symlink_status(p, error))) break;
    created_.push_back(p);
    if (p == p.parent_path()) break;
  }
  std::error_code error;
  std::filesystem::create_directories(path_, error);
  if (error) {
    remove_created();  // the parents it did make before failing
    MOESTAT_FAIL("cannot create directory {}: {}", path_.string(), error.message());
  }
}

OutputDirectory::~OutputDirectory() { remove_created(); }

void OutputDirectory::remove_created() noexcept {
  if (created_.empty()) return;  // kept, or the directory was there before
  std::error_code ignored;
  for (const std::string& file : files_) std::filesystem::remove(path_ / file, ignored);
  // remove() of a directory is rmdir(2): it fails, and so keeps it, unless it is empty.
  for (const std::filesystem::path& directory : created_) {
    std::filesystem::remove(directory, ignored);
  }
  created_.clear();
}

OutputFiles::OutputFiles(std::span<const std::filesystem::path> outputs,
                         std::span<const std::string> inputs) {
  // Outputs grouped by directory (std::map: a parent sorts before the folders in it), so a
  // directory made for several outputs removes all of them on failure.
  std::map<std::filesystem::path, std::vector<std::string>> by_directory;
  for (const std::filesystem::path& path : outputs) {
    if (path.empty() || path.parent_path().empty()) continue;
    by_directory[path.parent_path()].push_back(path.filename().string());
  }
  for (auto& [directory, files] : by_directory) {
    std::error_code error;
    if (std::filesystem::exists(std::filesystem::symlink_status(directory, error))) continue;
    created_.push_back(std::make_unique<OutputDirectory>(directory, std::move(files)));
  }
  check_outputs(outputs, inputs);
}

OutputFiles::~OutputFiles() {
  // Deepest first: a directory is removed only once the ones made inside it are gone.
  while (!created_.empty()) created_.pop_back();
}

void OutputFiles::keep() {
  for (const std::unique_ptr<OutputDirectory>& directory : created_) directory->keep();
}

}  // namespace moestat::cli
