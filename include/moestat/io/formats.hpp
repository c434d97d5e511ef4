// The file formats moestat knows, in one registry (src/io/format_registry.cpp): each format's
// name, what it is, the extensions that name it, and its codec, which recognises its bytes and
// reads and writes statistics in it. Whatever picks a format goes through here: by a file's
// contents (io::read_*, `moestat inspect`, Python's moestat.file_format) or by a name
// (io::write_*, `moestat convert`).
//
//   const io::DetectedFile file = io::read_detected_file("dump.pt");  // read once
//   fmt::print("{}\n", io::file_format_info(file.format).description);
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace moestat::io {

/// What a file holds, detected from its first bytes, then its name (detect_file_format).
enum class FileFormat : std::uint8_t { kJson, kPt, kSafetensors, kTrace, kGguf };

/// What moestat knows of one format.
struct FileFormatInfo {
  FileFormat format;
  std::string_view name;         ///< "pt": what moestat.file_format and inspect --json say.
  std::string_view description;  ///< "torch .pt (zip + pickle)": what inspect prints.
  /// The extensions that name it, the one moestat writes first (".pt", ".pth").
  std::span<const std::string_view> extensions;
  /// Statistics (counts, placements, masks) are written in it: io::write_*, convert.
  bool writes_statistics;
};

/// Every format, in the order detection tries their signatures.
std::span<const FileFormatInfo> file_formats() noexcept;
const FileFormatInfo& file_format_info(FileFormat format);
/// "json", "pt", "safetensors", "trace" or "gguf".
std::string_view file_format_name(FileFormat format) noexcept;
/// The extensions statistics are written under, for help texts and errors: ".json, .pt,
/// .pth or .safetensors".
std::string written_extensions_text();

/// A signature first (a zip is .pt, "MOETRACE" a trace, a binary little-endian size then
/// '{' safetensors, "GGUF" llama.cpp's GGUF), then the extension (.json, .pt / .pth,
/// .safetensors, .trace / .moetrace, .gguf), then the first bytes (a bare pickle is a
/// legacy .pt, a trace's byte-order mark a trace, '{' or '[' JSON); docs/formats.md says why
/// in that order. moestat::Error naming the path when it cannot be read, is empty, or is none
/// of these.
FileFormat detect_file_format(const std::filesystem::path& path);
/// The format a path's extension names among those statistics are written in (.json,
/// .pt / .pth, .safetensors); moestat::Error naming the path for any other extension.
FileFormat format_of_extension(const std::filesystem::path& path);

/// A file read whole, once, with its format detected: what a caller that reads one file
/// in more than one way (`moestat inspect`) hands each reader.
struct DetectedFile {
  std::filesystem::path path;
  std::string bytes;
  FileFormat format;

  std::span<const std::byte> data() const noexcept { return std::as_bytes(std::span(bytes)); }
};
/// Reads `path` and detects its format as detect_file_format does (with its errors).
DetectedFile read_detected_file(const std::filesystem::path& path);

}  // namespace moestat::io
