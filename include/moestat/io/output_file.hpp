// What io::write_file_atomically (io/files.hpp) does around the write itself: the checks a
// command runs on every output before it writes any, and the temporary files it leaves
// nowhere, even when the process is interrupted.
#pragma once

#include <chrono>
#include <filesystem>

namespace moestat::io {

/// Throws moestat::Error naming `path` unless write_file_atomically(path) can succeed as far
/// as can be known before writing: the path names a regular file or nothing yet (not a
/// directory, a FIFO, a device or a symbolic link) in a directory that exists and is
/// writable, reached without following a symbolic link that a sticky directory anyone may
/// write to (/tmp) holds for another user (the kernel's protected_symlinks rule: such a link
/// is followed only when it is this process's or the directory owner's). Commands with several
/// outputs check them all first, so that an error writes none of them.
void check_output_path(const std::filesystem::path& path);

/// For a file written where it lies as it grows (a trace file, which a reader may follow and
/// that cannot be renamed into place): opens `path` with `flags` | O_CREAT | O_NOFOLLOW, as
/// write_file_atomically reaches it (the same checks as check_output_path, the directory
/// walked with the same rule on links), and returns the descriptor, which the caller owns.
/// moestat::Error naming the path when it cannot.
int open_output_in_place(const std::filesystem::path& path, int flags);

/// How old a temporary file of an interrupted write must be before the next write of the same
/// target removes it. A file whose writer (the process id in its name) is no longer alive on
/// this machine waits kStaleTemporaryAgeOfDeadWriter, so that a writer on another machine
/// sharing the file system is not robbed of its file while it writes; any other waits
/// kStaleTemporaryAge (a live process id may be a reused one).
inline constexpr std::chrono::seconds kStaleTemporaryAgeOfDeadWriter{60};
inline constexpr std::chrono::hours kStaleTemporaryAge{24};

/// Removes the temporary files this process is writing (a write interrupted by a signal
/// leaves nothing behind when the handler calls this before the process ends).
/// Async-signal-safe: it only reads a fixed table and calls unlink.
void remove_temporary_files() noexcept;

}  // namespace moestat::io
