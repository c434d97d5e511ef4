// write_file_atomically: temporary file in the target's directory, write, fsync, rename.
// POSIX calls rather than iostreams, because fsync, fchmod and an exclusive create need the fd.
//
// Around it: the checks a command runs on its outputs before writing any, a table of the
// temporary files being written (so a signal handler can remove them), and a sweep of the
// temporary files an interrupted write of the same target left behind.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/output_file.hpp>
#include <optional>

namespace moestat::io {
namespace {

// ---- The temporary files being written, for remove_temporary_files ----

/// One entry of the table: kFree, then kClaimed while its path is copied in, then kInUse.
/// NOTE: a signal handler reads the table, so it is fixed storage with lock-free atomics,
/// never allocated or locked.
struct TemporarySlot {
  static constexpr int kFree = 0, kClaimed = 1, kInUse = 2;
  static constexpr std::size_t kPathBytes = 4096;  // PATH_MAX on Linux
  std::atomic<int> state{kFree};
  std::array<char, kPathBytes> path{};
};
static_assert(std::atomic<int>::is_always_lock_free);

std::array<TemporarySlot, 64> temporary_slots;

/// Enters `path` into the table; returns its slot, or -1 when the table is full or the path
/// too long (that write is then not cleaned up on a signal, only swept later).
int register_temporary(const std::filesystem::path& path) noexcept {
  const std::string& text = path.native();
  if (text.size() >= TemporarySlot::kPathBytes) return -1;
  for (std::size_t i = 0; i < temporary_slots.size(); ++i) {
    TemporarySlot& slot = temporary_slots[i];
    int expected = TemporarySlot::kFree;
    if (!slot.state.compare_exchange_strong(expected, TemporarySlot::kClaimed)) continue;
    std::memcpy(slot.path.data(), text.c_str(), text.size() + 1);
    slot.state.store(TemporarySlot::kInUse);
    return int(i);
  }
  return -1;
}

void unregister_temporary(int index) noexcept {
  if (index >= 0) temporary_slots[std::size_t(index)].state.store(TemporarySlot::kFree);
}

/// Owns the temporary file until it is renamed: closes and unlinks it on every failure.
class TemporaryFile {
 public:
  /// `slot`: where register_temporary entered `path`, before the file is created, so that a
  /// signal between the two still finds it.
  TemporaryFile(std::filesystem::path path, int slot) : path_(std::move(path)), slot_(slot) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
    unregister_temporary(slot_);
  }

  /// open(2) of the path with O_EXCL, so a name in use is never reused; -1 with errno set.
  int create() noexcept {
    // 0666 less the umask, as any new file.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    return fd_;
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
  int slot_;
  int fd_ = -1;
  bool renamed_ = false;
};

// ---- Names of temporary files ----

std::string temporary_prefix(const std::filesystem::path& target) {
  // NOTE: fmt rather than string concatenation, which trips GCC 12's -Wrestrict.
  return fmt::format(".{}.tmp-", target.filename().string());
}

/// A name no other writer uses: process id, a per-process counter and the clock.
std::filesystem::path temporary_name(const std::filesystem::path& target) {
  static std::atomic<std::uint64_t> counter{0};
  const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
  std::filesystem::path name = target;
  name.replace_filename(fmt::format("{}{}-{}-{:x}", temporary_prefix(target), ::getpid(),
                                    counter.fetch_add(1), std::uint64_t(ticks) & 0xffffff));
  return name;
}

/// Reads a number of `base` from the front of `text` and drops it; false when there is none.
template <typename T>
bool take_number(std::string_view& text, T& value, int base = 10) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (error != std::errc() || end == text.data()) return false;
  text.remove_prefix(std::size_t(end - text.data()));
  return true;
}

/// The writer's process id when `name` is exactly a temporary name of `target` (prefix, then
/// decimal pid, decimal counter and hex clock joined by '-'); 0 otherwise.
pid_t writer_of_temporary(std::string_view name, const std::string& prefix) {
  if (!name.starts_with(prefix)) return 0;
  name.remove_prefix(prefix.size());
  pid_t pid = 0;
  std::uint64_t counter = 0, ticks = 0;
  const auto take_dash = [&name] {
    if (!name.starts_with('-')) return false;
    name.remove_prefix(1);
    return true;
  };
  const bool whole = take_number(name, pid) && take_dash() && take_number(name, counter) &&
                     take_dash() && take_number(name, ticks, 16) && name.empty();
  return whole && pid > 0 ? pid : 0;
}

bool process_is_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

/// Removes the temporary files of `target` that an interrupted write left (a crash, kill -9,
/// power loss) and that are stale by the rules of kStaleTemporaryAge*. Best effort: any
/// failure leaves the file for a later write.
void sweep_stale_temporaries(const std::filesystem::path& target) {
  const std::filesystem::path directory = target.has_parent_path() ? target.parent_path() : ".";
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) return;
  const std::string prefix = temporary_prefix(target);
  const auto now = std::chrono::system_clock::now();
  while (const dirent* entry = ::readdir(dir)) {
    const pid_t writer = writer_of_temporary(entry->d_name, prefix);
    if (writer == 0) continue;
    struct stat status {};
    // Never follow a link: only a regular file this scheme could have made is removed.
    if (::fstatat(::dirfd(dir), entry->d_name, &status, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(status.st_mode)) {
      continue;
    }
    const auto modified = std::chrono::system_clock::from_time_t(status.st_mtim.tv_sec);
    const auto age = now - modified;
    const bool stale = age > kStaleTemporaryAge ||
                       (age > kStaleTemporaryAgeOfDeadWriter && !process_is_alive(writer));
    if (stale) ::unlinkat(::dirfd(dir), entry->d_name, 0);
  }
  ::closedir(dir);
}

/// The mode bits of the file at `target`, when there is one: an overwrite keeps them.
std::optional<mode_t> existing_mode(const std::filesystem::path& target) {
  struct stat status {};
  if (::stat(target.c_str(), &status) != 0) return std::nullopt;
  return status.st_mode & 07777;
}

}  // namespace

void check_output_path(const std::filesystem::path& path) {
  MOESTAT_CHECK(!path.empty() && path.has_filename(), "cannot write \"{}\": not a file path",
                path.string());
  const std::string name = path.string();
  struct stat status {};
  if (::lstat(path.c_str(), &status) == 0) {
    // Written through, a link would let a command replace whatever it points to (a system
    // file, run as root); replaced, a link someone keeps would silently become a file.
    if (S_ISLNK(status.st_mode)) {
      std::error_code error;
      const std::filesystem::path target = std::filesystem::read_symlink(path, error);
      MOESTAT_FAIL(
          "cannot write {}: it is a symbolic link{}; moestat neither writes through "
          "links nor replaces them: name the file itself, or remove the link",
          name, error ? std::string() : fmt::format(" (to {})", target.string()));
    }
    MOESTAT_CHECK(!S_ISDIR(status.st_mode), "cannot write {}: it is a directory", name);
    // rename(2) would replace a FIFO or a device node rather than write into it.
    MOESTAT_CHECK(S_ISREG(status.st_mode), "cannot write {}: not a regular file", name);
  }
  const std::filesystem::path directory = path.has_parent_path() ? path.parent_path() : ".";
  MOESTAT_CHECK(::stat(directory.c_str(), &status) == 0, "cannot write {}: directory {}: {}", name,
                directory.string(), std::strerror(errno));
  MOESTAT_CHECK(S_ISDIR(status.st_mode), "cannot write {}: {} is not a directory", name,
                directory.string());
  MOESTAT_CHECK(::access(directory.c_str(), W_OK | X_OK) == 0, "cannot write {}: directory {}: {}",
                name, directory.string(), std::strerror(errno));
}

void remove_temporary_files() noexcept {
  for (TemporarySlot& slot : temporary_slots) {
    if (slot.state.load() == TemporarySlot::kInUse) ::unlink(slot.path.data());
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  check_output_path(path);
  sweep_stale_temporaries(path);
  const std::optional<mode_t> mode = existing_mode(path);

  std::optional<TemporaryFile> file;
  for (int attempt = 0;; ++attempt) {
    std::filesystem::path temporary = temporary_name(path);
    const int slot = register_temporary(temporary);
    file.emplace(std::move(temporary), slot);
    if (file->create() >= 0) break;
    const int error = errno;
    file.reset();
    if (error != EEXIST || attempt == 100) {
      MOESTAT_FAIL("cannot write {}: cannot create a file in {}: {}", path.string(),
                   path.has_parent_path() ? path.parent_path().string() : std::string("."),
                   std::strerror(error));
    }
  }
  const char* data = contents.data();
  std::size_t left = contents.size();
  while (left > 0) {
    const ssize_t wrote = ::write(file->fd(), data, left);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      MOESTAT_FAIL("cannot write {}: {}", path.string(), std::strerror(errno));
    }
    data += wrote;
    left -= std::size_t(wrote);
  }
  // An overwrite keeps the old file's permissions (owner and group are the writer's: only
  // root could keep those).
  if (mode) {
    MOESTAT_CHECK(::fchmod(file->fd(), *mode) == 0, "cannot write {}: fchmod failed: {}",
                  path.string(), std::strerror(errno));
  }
  MOESTAT_CHECK(::fsync(file->fd()) == 0, "cannot write {}: fsync failed: {}", path.string(),
                std::strerror(errno));
  MOESTAT_CHECK(file->close() == 0, "cannot write {}: {}", path.string(), std::strerror(errno));
  MOESTAT_CHECK(::rename(file->path().c_str(), path.c_str()) == 0, "cannot write {}: {}",
                path.string(), std::strerror(errno));
  file->mark_renamed();
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
