// The format registry: every file format moestat knows, with its name, description,
// extensions and codec (its detectors, reader and writer). A new format is registered here.
#include <algorithm>
#include <array>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/formats.hpp>
#include <optional>
#include <vector>

#include "codec.hpp"

namespace moestat::io {
namespace {

struct FormatEntry {
  FileFormatInfo info;
  const detail::Codec& (*codec)();
};

constexpr std::array<std::string_view, 2> kPtExtensions{".pt", ".pth"};
constexpr std::array<std::string_view, 2> kTraceExtensions{".trace", ".moetrace"};
constexpr std::array<std::string_view, 1> kSafetensorsExtensions{".safetensors"};
constexpr std::array<std::string_view, 1> kJsonExtensions{".json"};
constexpr std::array<std::string_view, 1> kGgufExtensions{".gguf"};

// In the order detection tries them: signatures are exclusive, but of the shapes a bare
// pickle or a trace's byte-order mark says more than a '{'. Traces have no extension of
// their own, but moestat's tests and examples call them .trace.
constexpr std::array<FormatEntry, 5> kFormats{{
    {{FileFormat::kPt, "pt", "torch .pt (zip + pickle)", kPtExtensions, true}, detail::pt_codec},
    {{FileFormat::kTrace, "trace", "moestat per-token trace", kTraceExtensions, false},
     detail::trace_codec},
    {{FileFormat::kSafetensors, "safetensors", "safetensors", kSafetensorsExtensions, true},
     detail::safetensors_codec},
    {{FileFormat::kGguf, "gguf", "GGUF (llama.cpp; imatrix counts are read)", kGgufExtensions,
      false},
     detail::gguf_codec},
    {{FileFormat::kJson, "json", "JSON", kJsonExtensions, true}, detail::json_codec},
}};

constexpr std::array<FileFormatInfo, kFormats.size()> kInfos = [] {
  std::array<FileFormatInfo, kFormats.size()> out{};
  std::transform(kFormats.begin(), kFormats.end(), out.begin(),
                 [](const FormatEntry& entry) { return entry.info; });
  return out;
}();

/// Where `format` is in kFormats (and kInfos); nullopt for a value outside the enumeration.
std::optional<std::size_t> index_of(FileFormat format) noexcept {
  const auto* entry = std::find_if(kFormats.begin(), kFormats.end(),
                                   [&](const FormatEntry& e) { return e.info.format == format; });
  if (entry == kFormats.end()) return std::nullopt;
  return std::size_t(entry - kFormats.begin());
}

std::size_t checked_index_of(FileFormat format) {
  const std::optional<std::size_t> index = index_of(format);
  MOESTAT_CHECK(index.has_value(), "internal: no entry for file format {}", int(format));
  return *index;
}

/// The format an extension names, when it names one.
std::optional<FileFormat> format_named_by(const std::filesystem::path& path) {
  const std::string extension = path.extension().string();
  for (const FormatEntry& entry : kFormats) {
    const auto& names = entry.info.extensions;
    if (std::find(names.begin(), names.end(), extension) != names.end()) return entry.info.format;
  }
  return std::nullopt;
}

/// A file's format: a signature first (so a misnamed file still reads), then its extension
/// (so a damaged file is refused by its own format's reader, which says what is wrong, rather
/// than by the JSON parser), then the shape of its first bytes. moestat::Error naming `path`
/// when none fits.
FileFormat detect(const std::filesystem::path& path, std::string_view bytes) {
  for (const FormatEntry& entry : kFormats) {
    if (entry.codec().has_signature(bytes)) return entry.info.format;
  }
  if (const auto named = format_named_by(path)) return *named;
  for (const FormatEntry& entry : kFormats) {
    if (entry.codec().starts_like(bytes)) return entry.info.format;
  }
  MOESTAT_CHECK(!bytes.empty(), "{}: the file is empty", path.string());
  MOESTAT_FAIL(
      "{}: not a file moestat reads: no .pt (zip), safetensors, trace or GGUF signature, and not "
      "JSON (it starts with \"{}\"; name it .json, .pt, .safetensors or .trace to have that "
      "format's reader say what is wrong)",
      path.string(), bytes.substr(0, 16));
}

}  // namespace

std::span<const FileFormatInfo> file_formats() noexcept { return kInfos; }

const FileFormatInfo& file_format_info(FileFormat format) {
  return kInfos[checked_index_of(format)];
}

std::string_view file_format_name(FileFormat format) noexcept {
  const std::optional<std::size_t> index = index_of(format);
  return index ? kInfos[*index].name : "unknown";
}

std::string written_extensions_text() {
  // In the enumeration's order (JSON first), not detection's.
  std::vector<FileFormatInfo> written;
  std::copy_if(kInfos.begin(), kInfos.end(), std::back_inserter(written),
               [](const FileFormatInfo& info) { return info.writes_statistics; });
  std::sort(written.begin(), written.end(),
            [](const FileFormatInfo& a, const FileFormatInfo& b) { return a.format < b.format; });
  std::vector<std::string_view> names;
  for (const FileFormatInfo& info : written) {
    names.insert(names.end(), info.extensions.begin(), info.extensions.end());
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

FileFormat detect_file_format(const std::filesystem::path& path) {
  return read_detected_file(path).format;
}

FileFormat format_of_extension(const std::filesystem::path& path) {
  const std::optional<FileFormat> named = format_named_by(path);
  MOESTAT_CHECK(named && file_format_info(*named).writes_statistics,
                "{}: unknown extension \"{}\" (want {})", path.string(), path.extension().string(),
                written_extensions_text());
  return *named;
}

DetectedFile read_detected_file(const std::filesystem::path& path) {
  std::string bytes = read_text_file(path);
  const FileFormat format = detect(path, bytes);
  return {.path = path, .bytes = std::move(bytes), .format = format};
}

namespace detail {

const Codec& codec_for(FileFormat format) { return kFormats[checked_index_of(format)].codec(); }

}  // namespace detail
}  // namespace moestat::io
