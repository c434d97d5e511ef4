// Whole-file reads with a size bound, and atomic writes: what every reader and writer uses.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace moestat::io {

/// The largest file moestat reads (every reader reads whole files): 4 GiB, about 40 times a
/// 1000-pass snapshot of DeepSeek-V3, or a per-token trace of 2 million DeepSeek-V3 tokens.
inline constexpr std::uint64_t kMaxFileBytes = std::uint64_t(4) << 30;

/// Reads a whole file; moestat::Error naming the path (and why) when it cannot be read, is
/// not a regular file (a FIFO or a device such as /dev/zero), or is larger than kMaxFileBytes.
std::string read_text_file(const std::filesystem::path& path);
/// Writes `contents` to a temporary file beside `path` (same directory), fsyncs it and
/// renames it over `path`, so readers see the old file or the new one, never a partial one.
/// New files get mode 0666 less the umask. An unwritable path is a moestat::Error naming it,
/// and leaves nothing behind (the temporary file is removed on every failure). The directory
/// is opened once, name by name, and the file created and renamed relative to it: a symbolic
/// link as the file's name, or a link on the way that the checks of io::check_output_path
/// (io/output_file.hpp) refuse, is never written through.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace moestat::io
