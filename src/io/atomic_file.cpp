// write_file_atomically: temporary file in the target's directory, write, fsync, rename.
// POSIX calls rather than iostreams, because fsync and an exclusive create need the fd.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <moestat/error.hpp>
#include <moestat/io/json.hpp>

namespace moestat::io {
namespace {

/// Owns the temporary file until it is renamed: closes and unlinks it on every failure.
class TemporaryFile {
 public:
  TemporaryFile(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
  }

  int fd() const noexcept { return fd_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  /// Closes the descriptor, reporting the error close() may carry (delayed write errors).
  int close() noexcept {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }
  void mark_renamed() noexcept { renamed_ = true; }

 private:
  std::filesystem::path path_;
  int fd_;
  bool renamed_ = false;
};

/// A name no other writer uses: process id, a per-process counter and the clock.
std::filesystem::path temporary_name(const std::filesystem::path& target) {
  static std::atomic<std::uint64_t> counter{0};
  const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
  std::filesystem::path name = target;
  name.replace_filename(fmt::format(".{}.tmp-{}-{}-{:x}", target.filename().string(), ::getpid(),
                                    counter.fetch_add(1), std::uint64_t(ticks) & 0xffffff));
  return name;
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  MOESTAT_CHECK(!path.empty() && path.has_filename(), "cannot write \"{}\": not a file path",
                path.string());
  int fd = -1;
  std::filesystem::path temporary;
  for (int attempt = 0; fd < 0; ++attempt) {
    temporary = temporary_name(path);
    // 0666 less the umask, as any new file; O_EXCL so a stale name is never reused.
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 100)) {
      MOESTAT_FAIL("cannot write {}: cannot create a file in {}: {}", path.string(),
                   path.has_parent_path() ? path.parent_path().string() : std::string("."),
                   std::strerror(errno));
    }
  }
  TemporaryFile file(temporary, fd);
  const char* data = contents.data();
  std::size_t left = contents.size();
  while (left > 0) {
    const ssize_t wrote = ::write(file.fd(), data, left);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      MOESTAT_FAIL("cannot write {}: {}", path.string(), std::strerror(errno));
    }
    data += wrote;
    left -= std::size_t(wrote);
  }
  MOESTAT_CHECK(::fsync(file.fd()) == 0, "cannot write {}: fsync failed: {}", path.string(),
                std::strerror(errno));
  MOESTAT_CHECK(file.close() == 0, "cannot write {}: {}", path.string(), std::strerror(errno));
  MOESTAT_CHECK(::rename(file.path().c_str(), path.c_str()) == 0, "cannot write {}: {}",
                path.string(), std::strerror(errno));
  file.mark_renamed();
  // Make the rename itself durable; best effort, as some file systems refuse fsync on a
  // directory and the data is already safely in place.
  const std::filesystem::path directory = path.has_parent_path() ? path.parent_path() : ".";
  if (const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace moestat::io
