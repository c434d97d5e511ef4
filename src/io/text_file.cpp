// Reading a whole file, with errors that name the path and the reason.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>

namespace moestat::io {
namespace {

/// What a path is, for a refusal: "a FIFO", "a character device", ...
const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// A regular file that reports size 0 but has content is a pseudo-file (procfs, sysfs), which
// may go on without end: it is read up to this much, far more than any of them holds.
constexpr std::uint64_t kMaxSizelessFileBytes = std::uint64_t(16) << 20;

}  // namespace

std::string read_text_file(const std::filesystem::path& path) {
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer before it is refused.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  MOESTAT_CHECK(fd >= 0, "cannot read {}: {}", path.string(), std::strerror(errno));
  std::string out;
  struct stat info {};
  const auto fail = [&](const std::string& why) {
    ::close(fd);
    MOESTAT_FAIL("cannot read {}: {}", path.string(), why);
  };
  if (::fstat(fd, &info) != 0) fail(std::strerror(errno));
  if (S_ISDIR(info.st_mode)) fail(std::strerror(EISDIR));
  // A device or a FIFO may never end (/dev/zero) or never start (a FIFO without a writer).
  if (!S_ISREG(info.st_mode)) fail(fmt::format("{}, not a regular file", kind_of(info.st_mode)));
  if (std::uint64_t(info.st_size) > kMaxFileBytes) {
    fail(
        fmt::format("{} bytes, more than moestat reads ({} = 4 GiB)", info.st_size, kMaxFileBytes));
  }
  try {
    out.reserve(std::size_t(info.st_size));
  } catch (const std::bad_alloc&) {
    fail(fmt::format("not enough memory for its {} bytes", info.st_size));
  }
  const std::uint64_t limit = info.st_size == 0 ? kMaxSizelessFileBytes : kMaxFileBytes;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(std::strerror(errno));
    }
    // A file that grows while it is read (a log being written) is held to the same bound.
    if (out.size() + std::size_t(got) > limit) {
      fail(info.st_size == 0 ? fmt::format("it reports size 0 (a procfs or sysfs file?) but "
                                           "holds more than {} MiB: not a file moestat reads",
                                           kMaxSizelessFileBytes >> 20)
                             : std::string("it grew past 4 GiB while read"));
    }
    out.append(buffer, std::size_t(got));
  }
  ::close(fd);
  return out;
}

}  // namespace moestat::io
