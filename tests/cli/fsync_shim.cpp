// A test-only LD_PRELOAD library for the moestat binary: makes fsync(2) of a regular file
// stop the process or fail, so a test can interrupt or break a write at a known point.
//   MOESTAT_TEST_FSYNC=stop          raise(SIGSTOP) before the fsync (the temporary file
//                                    exists, fully written, not yet renamed)
//   MOESTAT_TEST_FSYNC=fail-after-N  the first N succeed, every later one fails with EIO
#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

extern "C" int fsync(int fd) {
  using Fsync = int (*)(int);
  static const auto real = reinterpret_cast<Fsync>(::dlsym(RTLD_NEXT, "fsync"));
  static int calls = 0;
  struct stat status {};
  const char* mode = std::getenv("MOESTAT_TEST_FSYNC");
  if (mode != nullptr && ::fstat(fd, &status) == 0 && S_ISREG(status.st_mode)) {
    if (std::strcmp(mode, "stop") == 0) std::raise(SIGSTOP);
    constexpr const char* kFailAfter = "fail-after-";
    if (std::strncmp(mode, kFailAfter, std::strlen(kFailAfter)) == 0 &&
        calls++ >= std::atoi(mode + std::strlen(kFailAfter))) {
      errno = EIO;
      return -1;
    }
  }
  return real(fd);
}
