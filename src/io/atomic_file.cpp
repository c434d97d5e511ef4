// write_file_atomically: temporary file in the target's directory, write, fsync, rename.
// POSIX calls rather than iostreams, because fsync, fchmod and an exclusive create need the fd.
//
// Around it: the target's directory opened name by name (links checked as the kernel's
// protected_symlinks does; open_output_in_place, for files written where they lie, shares
// it), the checks a command runs on its outputs before writing any, a table of the temporary
// files being written (so a signal handler can remove them), and a sweep of the temporary
// files an interrupted write of the same target left behind.
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
#include <climits>
#include <cstring>
#include <deque>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/output_file.hpp>
#include <optional>
#include <utility>

namespace moestat::io {
namespace {

/// Owns a file descriptor and closes it when dropped.
class OwnedFd {
 public:
  explicit OwnedFd(int fd = -1) noexcept : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept {
    std::swap(fd_, other.fd_);  // `other` closes what this held
    return *this;
  }
  ~OwnedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// ---- The output's directory, resolved one name at a time ----
//
// Resolved by the kernel, a path follows every symbolic link in it: a link another user
// planted in /tmp (say /tmp/sticky/dirlink -> /etc) sent root's `moestat convert ...
// /tmp/sticky/dirlink/file.json` into the link's target (issue 39, item 10). So the
// directory is opened name by name with O_NOFOLLOW, each link checked before it is followed,
// and everything after (the temporary file, the rename, the sweep) is relative to that
// directory's descriptor, so a link swapped in meanwhile changes nothing.

constexpr int kMaxLinksFollowed = 40;  // the kernel's MAXSYMLINKS

/// The kernel's protected_symlinks rule: a link in a sticky directory anyone may write to
/// (/tmp) is followed only when it is the follower's or the directory owner's. Applied
/// whatever the sysctl says, since the writer may be root.
bool may_follow(const struct stat& holder, uid_t link_owner) {
  const bool shared_sticky = (holder.st_mode & S_ISVTX) != 0 && (holder.st_mode & S_IWOTH) != 0;
  return !shared_sticky || link_owner == ::geteuid() || link_owner == holder.st_uid;
}

/// The names of `path` (past its root), in order, put in front of `names`.
void push_front_names(std::deque<std::string>& names, const std::filesystem::path& path) {
  const std::filesystem::path relative = path.relative_path();
  names.insert(names.begin(), relative.begin(), relative.end());
}

/// A directory reached so far: its descriptor (O_PATH) and its path as walked, for messages.
struct WalkedDirectory {
  OwnedFd fd;
  std::filesystem::path path;

  std::string shown() const { return path.empty() ? "." : path.string(); }
};

WalkedDirectory open_start(const std::filesystem::path& target, bool absolute) {
  const char* start = absolute ? "/" : ".";
  OwnedFd fd(::open(start, O_PATH | O_DIRECTORY | O_CLOEXEC));
  MOESTAT_CHECK(fd.get() >= 0, "cannot write {}: directory {}: {}", target.string(), start,
                std::strerror(errno));
  return {std::move(fd), absolute ? "/" : ""};
}

/// What the link `link` (an O_PATH, O_NOFOLLOW descriptor) points to.
std::string read_link(const std::filesystem::path& target, const WalkedDirectory& link) {
  std::array<char, PATH_MAX> buffer{};
  const ssize_t size = ::readlinkat(link.fd.get(), "", buffer.data(), buffer.size());
  MOESTAT_CHECK(size >= 0 && std::size_t(size) < buffer.size(), "cannot write {}: link {}: {}",
                target.string(), link.shown(),
                size < 0 ? std::strerror(errno) : "its target is too long");
  return std::string(buffer.data(), std::size_t(size));
}

/// Follows the link `link` found in `directory`, if the rule allows: its target's names go in
/// front of those left, and the walk restarts from the root for an absolute target.
void follow_link(const std::filesystem::path& target, WalkedDirectory& directory,
                 const WalkedDirectory& link, const struct stat& link_status,
                 std::deque<std::string>& names) {
  struct stat holder {};
  MOESTAT_CHECK(::fstat(directory.fd.get(), &holder) == 0, "cannot write {}: directory {}: {}",
                target.string(), directory.shown(), std::strerror(errno));
  const std::string destination = read_link(target, link);
  MOESTAT_CHECK(may_follow(holder, link_status.st_uid),
                "cannot write {}: {} is a symbolic link (to {}) owned by user {} in {}, a sticky "
                "directory anyone may write to; moestat follows such a link only when it is "
                "yours or the directory owner's (as the kernel's protected_symlinks does): name "
                "the directory it points to, if you trust it",
                target.string(), link.shown(), destination, link_status.st_uid, directory.shown());
  if (std::filesystem::path(destination).is_absolute()) {
    directory = open_start(target, true);
  }
  push_front_names(names, destination);
}

/// Opens the directory `target` goes in, following only the links the rule allows.
WalkedDirectory open_directory_of(const std::filesystem::path& target) {
  const std::filesystem::path parent = target.has_parent_path() ? target.parent_path() : ".";
  WalkedDirectory directory = open_start(target, parent.is_absolute());
  std::deque<std::string> names;
  push_front_names(names, parent);
  int links_followed = 0;
  while (!names.empty()) {
    const std::string name = std::move(names.front());
    names.pop_front();
    if (name.empty() || name == ".") continue;  // "a//b", "a/./b", a trailing "/"
    WalkedDirectory next{
        OwnedFd(::openat(directory.fd.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC)),
        directory.path / name};
    struct stat status {};
    MOESTAT_CHECK(next.fd.get() >= 0 && ::fstat(next.fd.get(), &status) == 0,
                  "cannot write {}: directory {}: {}", target.string(), next.shown(),
                  std::strerror(errno));
    if (S_ISDIR(status.st_mode)) {
      directory = std::move(next);
      continue;
    }
    MOESTAT_CHECK(S_ISLNK(status.st_mode), "cannot write {}: {} is not a directory",
                  target.string(), next.shown());
    MOESTAT_CHECK(++links_followed <= kMaxLinksFollowed,
                  "cannot write {}: more than {} symbolic links on the way to its directory",
                  target.string(), kMaxLinksFollowed);
    follow_link(target, directory, next, status, names);
  }
  return directory;
}

/// Where an output file goes: its directory, opened by open_directory_of, and its name there.
struct OutputLocation {
  WalkedDirectory directory;
  std::string name;
};

// ---- The temporary files being written, for remove_temporary_files ----

/// One entry of the table: kFree, then kClaimed while its name is copied in, then kInUse.
/// NOTE: a signal handler reads the table, so it is fixed storage with lock-free atomics,
/// never allocated or locked.
struct TemporarySlot {
  static constexpr int kFree = 0, kClaimed = 1, kInUse = 2;
  static constexpr std::size_t kNameBytes = 4096;
  std::atomic<int> state{kFree};
  int directory = -1;  // the output's directory, which outlives the entry
  std::array<char, kNameBytes> name{};
};
static_assert(std::atomic<int>::is_always_lock_free);

std::array<TemporarySlot, 64> temporary_slots;

/// Enters `name` in `directory` into the table; returns its slot, or -1 when the table is
/// full or the name too long (that write is then not cleaned up on a signal, only swept
/// later).
int register_temporary(int directory, const std::string& name) noexcept {
  if (name.size() >= TemporarySlot::kNameBytes) return -1;
  for (std::size_t i = 0; i < temporary_slots.size(); ++i) {
    TemporarySlot& slot = temporary_slots[i];
    int expected = TemporarySlot::kFree;
    if (!slot.state.compare_exchange_strong(expected, TemporarySlot::kClaimed)) continue;
    slot.directory = directory;
    std::memcpy(slot.name.data(), name.c_str(), name.size() + 1);
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
  /// `directory`: the output's, which must outlive this. `slot`: where register_temporary
  /// entered `name`, before the file is created, so that a signal between the two still
  /// finds it.
  TemporaryFile(int directory, std::string name, int slot)
      : directory_(directory), name_(std::move(name)), slot_(slot) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlinkat(directory_, name_.c_str(), 0);
    unregister_temporary(slot_);
  }

  /// Creates the file with O_EXCL, so a name in use (a link included) is never reused; -1
  /// with errno set.
  int create() noexcept {
    // 0666 less the umask, as any new file.
    fd_ = ::openat(directory_, name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    return fd_;
  }
  int fd() const noexcept { return fd_; }
  const std::string& name() const noexcept { return name_; }
  /// Closes the descriptor, reporting the error close() may carry (delayed write errors).
  int close() noexcept {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }
  void mark_renamed() noexcept { renamed_ = true; }

 private:
  int directory_;
  std::string name_;
  int slot_;
  int fd_ = -1;
  bool renamed_ = false;
};

// ---- Names of temporary files ----

std::string temporary_prefix(const std::string& target_name) {
  // NOTE: fmt rather than string concatenation, which trips GCC 12's -Wrestrict.
  return fmt::format(".{}.tmp-", target_name);
}

/// A name no other writer uses: process id, a per-process counter and the clock.
std::string temporary_name(const std::string& target_name) {
  static std::atomic<std::uint64_t> counter{0};
  const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
  return fmt::format("{}{}-{}-{:x}", temporary_prefix(target_name), ::getpid(),
                     counter.fetch_add(1), std::uint64_t(ticks) & 0xffffff);
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

/// Removes the temporary files of the output that an interrupted write left (a crash, kill
/// -9, power loss) and that are stale by the rules of kStaleTemporaryAge*. Best effort: any
/// failure leaves the file for a later write.
void sweep_stale_temporaries(const OutputLocation& output) {
  const int listing = ::openat(output.directory.fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing < 0) return;
  DIR* dir = ::fdopendir(listing);
  if (dir == nullptr) {
    ::close(listing);
    return;
  }
  const std::string prefix = temporary_prefix(output.name);
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

/// The mode bits of the output's file, when there is one: an overwrite keeps them.
std::optional<mode_t> existing_mode(const OutputLocation& output) {
  struct stat status {};
  if (::fstatat(output.directory.fd.get(), output.name.c_str(), &status, AT_SYMLINK_NOFOLLOW) !=
      0) {
    return std::nullopt;
  }
  return status.st_mode & 07777;
}

/// Opens the directory of `path` and runs on the file's name there the checks of
/// check_output_path.
OutputLocation open_output(const std::filesystem::path& path) {
  MOESTAT_CHECK(!path.empty() && path.has_filename(), "cannot write \"{}\": not a file path",
                path.string());
  OutputLocation output{open_directory_of(path), path.filename().string()};
  const int directory = output.directory.fd.get();
  const std::string name = path.string();
  struct stat status {};
  if (::fstatat(directory, output.name.c_str(), &status, AT_SYMLINK_NOFOLLOW) == 0) {
    // Written through, a link would let a command replace whatever it points to (a system
    // file, run as root); replaced, a link someone keeps would silently become a file.
    if (S_ISLNK(status.st_mode)) {
      std::array<char, PATH_MAX> target{};
      const ssize_t size =
          ::readlinkat(directory, output.name.c_str(), target.data(), target.size());
      MOESTAT_FAIL(
          "cannot write {}: it is a symbolic link{}; moestat neither writes through "
          "links nor replaces them: name the file itself, or remove the link",
          name,
          size < 0 || std::size_t(size) == target.size()
              ? std::string()
              : fmt::format(" (to {})", std::string_view(target.data(), std::size_t(size))));
    }
    MOESTAT_CHECK(!S_ISDIR(status.st_mode), "cannot write {}: it is a directory", name);
    // rename(2) would replace a FIFO or a device node rather than write into it.
    MOESTAT_CHECK(S_ISREG(status.st_mode), "cannot write {}: not a regular file", name);
  }
  MOESTAT_CHECK(::faccessat(directory, ".", W_OK | X_OK, 0) == 0,
                "cannot write {}: directory {}: {}", name, output.directory.shown(),
                std::strerror(errno));
  return output;
}

}  // namespace

void check_output_path(const std::filesystem::path& path) { open_output(path); }

int open_output_in_place(const std::filesystem::path& path, int flags) {
  const OutputLocation output = open_output(path);
  // O_NOFOLLOW: a link put in place of the name after the checks above is not written through.
  const int fd = ::openat(output.directory.fd.get(), output.name.c_str(),
                          flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  MOESTAT_CHECK(fd >= 0, "cannot write {}: {}", path.string(), std::strerror(errno));
  return fd;
}

void remove_temporary_files() noexcept {
  for (TemporarySlot& slot : temporary_slots) {
    if (slot.state.load() == TemporarySlot::kInUse) {
      ::unlinkat(slot.directory, slot.name.data(), 0);
    }
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  // Declared first, so that the temporary file (which uses its descriptor) goes before it.
  const OutputLocation output = open_output(path);
  const int directory = output.directory.fd.get();
  sweep_stale_temporaries(output);
  const std::optional<mode_t> mode = existing_mode(output);

  std::optional<TemporaryFile> file;
  for (int attempt = 0;; ++attempt) {
    std::string temporary = temporary_name(output.name);
    const int slot = register_temporary(directory, temporary);
    file.emplace(directory, std::move(temporary), slot);
    if (file->create() >= 0) break;
    const int error = errno;
    file.reset();
    if (error != EEXIST || attempt == 100) {
      MOESTAT_FAIL("cannot write {}: cannot create a file in {}: {}", path.string(),
                   output.directory.shown(), std::strerror(error));
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
  MOESTAT_CHECK(::renameat(directory, file->name().c_str(), directory, output.name.c_str()) == 0,
                "cannot write {}: {}", path.string(), std::strerror(errno));
  file->mark_renamed();
  // Make the rename itself durable; best effort, as some file systems refuse fsync on a
  // directory and the data is already safely in place. (The O_PATH descriptor cannot be
  // fsynced: the directory is opened again, through it.)
  const OwnedFd synced(::openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (synced.get() >= 0) ::fsync(synced.get());
}

}  // namespace moestat::io
