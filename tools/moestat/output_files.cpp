// Output checks shared by the subcommands.
#include "output_files.hpp"

#include <sys/stat.h>

#include <moestat/error.hpp>
#include <moestat/io/output_file.hpp>

namespace moestat::cli {

void check_outputs(std::span<const std::filesystem::path> outputs) {
  for (const std::filesystem::path& path : outputs) {
    if (!path.empty()) io::check_output_path(path);
  }
}

void refuse_overwriting(const std::filesystem::path& out, std::span<const std::string> ins,
                        bool force) {
  struct stat written {};
  if (::stat(out.c_str(), &written) != 0) return;  // nothing there to lose
  for (const std::string& in : ins) {
    struct stat read {};
    if (::stat(in.c_str(), &read) != 0) continue;  // its reader names the problem
    MOESTAT_CHECK(read.st_dev != written.st_dev || read.st_ino != written.st_ino,
                  "{} is also an input ({}): the output must be another file", out.string(), in);
  }
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

}  // namespace moestat::cli
