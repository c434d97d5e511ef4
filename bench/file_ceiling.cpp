// The ceiling a file system puts on the per-token trace writer: how fast one file in a
// directory takes 40 writes of 15.2 MB (one DeepSeek-V3-sized pass of 8192 tokens each),
// through one thread's pwrite (what TraceWriter does) and through 1-16 threads copying into
// a shared mapping (the fastest way to fill one file from several threads); then the same
// into a file whose blocks were allocated beforehand (fallocate), where a write only copies.
// Prints one JSON document. Usage: moestat_bench_file_ceiling [DIRECTORY] (default /dev/shm).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kPassBytes = 15'204'352;  // 8192 tokens x 58 layers x 8 ids x 4 bytes
constexpr std::size_t kPasses = 40;
constexpr std::size_t kTotalBytes = kPassBytes * kPasses;

/// An open file that is removed when the guard goes.
class ScratchFile {
 public:
  explicit ScratchFile(std::filesystem::path path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot create " + path_.string());
  }
  ~ScratchFile() {
    ::close(fd_);
    std::filesystem::remove(path_);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  int fd() const { return fd_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Allocates the file's blocks past its end (outside the timed part), as a trace writer can
/// ahead of its chunks: the size stays 0 until written, so readers see no zeros.
void preallocate(const ScratchFile& file, const std::filesystem::path& path) {
  if (::fallocate(file.fd(), FALLOC_FL_KEEP_SIZE, 0, off_t(kTotalBytes)) != 0) {
    throw std::runtime_error("cannot allocate " + path.string());
  }
}

/// Each pass written by `threads` threads, each one pwrite of its share at its offset.
double pwrite_gb_per_s(const std::filesystem::path& path, const std::vector<char>& pass,
                       unsigned threads, bool preallocated) {
  ScratchFile file(path);
  if (preallocated) preallocate(file, path);
  const auto start = std::chrono::steady_clock::now();
  const std::size_t share = kPassBytes / threads;
  for (std::size_t i = 0; i < kPasses; ++i) {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::size_t begin = t * share;
        const std::size_t length = t + 1 == threads ? kPassBytes - begin : share;
        if (::pwrite(file.fd(), pass.data() + begin, length, off_t(i * kPassBytes + begin)) !=
            off_t(length)) {
          throw std::runtime_error("short write to " + path.string());
        }
      });
    }
    for (std::thread& thread : pool) thread.join();
  }
  return double(kTotalBytes) / seconds_since(start) / 1e9;
}

double mapped_gb_per_s(const std::filesystem::path& path, const std::vector<char>& pass,
                       unsigned threads, bool preallocated) {
  ScratchFile file(path);
  void* map = MAP_FAILED;
  if (preallocated) {  // blocks allocated and mapped in before the clock starts
    preallocate(file, path);
    if (::ftruncate(file.fd(), off_t(kTotalBytes)) != 0) {
      throw std::runtime_error("cannot size " + path.string());
    }
    map = ::mmap(nullptr, kTotalBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, file.fd(),
                 0);
  }
  const auto start = std::chrono::steady_clock::now();
  if (!preallocated) {
    if (::ftruncate(file.fd(), off_t(kTotalBytes)) != 0) {
      throw std::runtime_error("cannot size " + path.string());
    }
    map = ::mmap(nullptr, kTotalBytes, PROT_READ | PROT_WRITE, MAP_SHARED, file.fd(), 0);
  }
  if (map == MAP_FAILED) throw std::runtime_error("cannot map " + path.string());
  char* bytes = static_cast<char*>(map);
  for (std::size_t i = 0; i < kPasses; ++i) {
    std::vector<std::thread> pool;
    const std::size_t share = kPassBytes / threads;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::size_t begin = t * share;
        const std::size_t length = t + 1 == threads ? kPassBytes - begin : share;
        std::memcpy(bytes + i * kPassBytes + begin, pass.data() + begin, length);
      });
    }
    for (std::thread& thread : pool) thread.join();
  }
  const double rate = double(kTotalBytes) / seconds_since(start) / 1e9;
  ::munmap(map, kTotalBytes);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path directory = argc > 1 ? argv[1] : "/dev/shm";
  const auto path = directory / "moestat-file-ceiling.bin";
  const std::vector<char> pass(kPassBytes, 7);
  std::printf("{\n  \"directory\": \"%s\",\n  \"pass_mbytes\": %.2f,\n  \"passes\": %zu,\n",
              directory.c_str(), double(kPassBytes) / 1e6, kPasses);
  std::printf("  \"pwrite_one_thread_gb_per_s\": %.2f,\n", pwrite_gb_per_s(path, pass, 1, false));
  const auto series = [&](const char* name, auto rate, const char* end) {
    std::printf("  \"%s\": {", name);
    const char* separator = "";
    for (unsigned threads : {1u, 2u, 4u, 8u, 16u}) {
      std::printf("%s\"%u\": %.2f", separator, threads, rate(threads));
      separator = ", ";
    }
    std::printf("}%s\n", end);
  };
  series(
      "mapped_gb_per_s", [&](unsigned n) { return mapped_gb_per_s(path, pass, n, false); }, ",");
  series(
      "preallocated_pwrite_gb_per_s",
      [&](unsigned n) { return pwrite_gb_per_s(path, pass, n, true); }, ",");
  series(
      "preallocated_mapped_gb_per_s",
      [&](unsigned n) { return mapped_gb_per_s(path, pass, n, true); }, "");
  std::printf("}\n");
  return 0;
}
