// Reading a whole file, with errors that name the path and the reason.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <moestat/error.hpp>
#include <moestat/io/json.hpp>

namespace moestat::io {

std::string read_text_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MOESTAT_CHECK(fd >= 0, "cannot read {}: {}", path.string(), std::strerror(errno));
  std::string out;
  struct stat info {};
  if (::fstat(fd, &info) != 0 || S_ISDIR(info.st_mode)) {
    const int error = S_ISDIR(info.st_mode) ? EISDIR : errno;
    ::close(fd);
    MOESTAT_FAIL("cannot read {}: {}", path.string(), std::strerror(error));
  }
  if (S_ISREG(info.st_mode)) out.reserve(std::size_t(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      MOESTAT_FAIL("cannot read {}: {}", path.string(), std::strerror(error));
    }
    out.append(buffer, std::size_t(got));
  }
  ::close(fd);
  return out;
}

}  // namespace moestat::io
