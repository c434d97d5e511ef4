// Statistics, placements and masks in any format, by extension on writing and by contents
// on reading: the format picks a codec (codec.hpp), which does the rest.
#include <algorithm>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/statistics.hpp>
#include <optional>
#include <string_view>

#include "codec.hpp"

namespace moestat::io {
namespace {

/// PROTO and a protocol torch.save used: a .pt file from before torch 1.6 (or saved with
/// _use_new_zipfile_serialization=False), a bare pickle without the zip around it.
bool is_legacy_torch_file(std::string_view bytes) {
  return bytes.size() >= 2 && bytes[0] == '\x80' && bytes[1] >= 2 && bytes[1] <= 5;
}

/// safetensors' u64 header size then '{'. The size must be binary, a byte no JSON text
/// holds (a size below 2^56 ends in a zero byte), so JSON with '{' at byte 8 is not taken
/// for it; whether the size fits the file is for the safetensors reader to say.
bool is_safetensors(std::string_view bytes) {
  if (bytes.size() < 9 || bytes[8] != '{') return false;
  return std::any_of(bytes.begin(), bytes.begin() + 8, [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r';
  });
}

/// The trace header's byte-order mark (0x01020304 little-endian at offset 12), which a
/// trace whose magic was damaged still carries.
bool has_trace_byte_order_mark(std::string_view bytes) {
  return bytes.size() >= 16 && bytes.compare(12, 4, "\x04\x03\x02\x01") == 0;
}

/// JSON text starts with an object or array (after an optional UTF-8 byte-order mark and
/// white space); moestat's JSON files are all objects.
bool starts_like_json(std::string_view bytes) {
  if (bytes.starts_with("\xef\xbb\xbf")) bytes.remove_prefix(3);
  const std::size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && (bytes[first] == '{' || bytes[first] == '[');
}

/// The format an extension names, when it names one (traces have none of their own, but
/// moestat's tests and examples call them .trace).
std::optional<FileFormat> format_named_by(const std::filesystem::path& path) {
  const std::string extension = path.extension().string();
  if (extension == ".json") return FileFormat::kJson;
  if (extension == ".pt" || extension == ".pth") return FileFormat::kPt;
  if (extension == ".safetensors") return FileFormat::kSafetensors;
  if (extension == ".trace" || extension == ".moetrace") return FileFormat::kTrace;
  return std::nullopt;
}

/// A file's format: its signature first (so a misnamed file still reads), then its
/// extension (so a damaged file is refused by its own format's reader, which says what is
/// wrong, rather than by the JSON parser), then the shape of its first bytes. moestat::Error
/// naming `path` when none fits.
FileFormat detect(const std::filesystem::path& path, std::string_view bytes) {
  if (bytes.starts_with("PK\x03\x04")) return FileFormat::kPt;
  if (bytes.starts_with("MOETRACE")) return FileFormat::kTrace;
  if (is_safetensors(bytes)) return FileFormat::kSafetensors;
  if (const auto named = format_named_by(path)) return *named;
  if (is_legacy_torch_file(bytes)) return FileFormat::kPt;
  if (has_trace_byte_order_mark(bytes)) return FileFormat::kTrace;
  if (starts_like_json(bytes)) return FileFormat::kJson;
  MOESTAT_CHECK(!bytes.empty(), "{}: the file is empty", path.string());
  MOESTAT_FAIL(
      "{}: not a file moestat reads: no .pt (zip), safetensors or trace signature, and not "
      "JSON (it starts with \"{}\"; name it .json, .pt, .safetensors or .trace to have that "
      "format's reader say what is wrong)",
      path.string(), bytes.substr(0, 16));
}

/// Runs `body`, prefixing its errors with the path unless they already start with it.
template <typename Body>
auto naming(const std::filesystem::path& path, Body&& body) {
  try {
    return body();
  } catch (const Error& error) {
    if (error.message().starts_with(printable(path.string()))) throw;
    throw error.with_context(path.string());
  }
}

/// The payload `kind` (any, when none is given) from the file at `path`.
StatisticsFile read_payload(const std::filesystem::path& path, std::optional<StatisticsKind> kind,
                            const detail::ReadOptions& options = {}) {
  const std::string bytes = read_text_file(path);
  return naming(path, [&] {
    const detail::Codec& codec = detail::codec_for(detect(path, bytes));
    const std::string name = path.string();
    return codec.read(bytes, name, kind ? *kind : codec.kind_of(bytes, name), options);
  });
}

}  // namespace

std::string_view file_format_name(FileFormat format) noexcept {
  switch (format) {
    case FileFormat::kJson:
      return "json";
    case FileFormat::kPt:
      return "pt";
    case FileFormat::kSafetensors:
      return "safetensors";
    case FileFormat::kTrace:
      return "trace";
  }
  return "unknown";
}

FileFormat detect_file_format(const std::filesystem::path& path) {
  return detect(path, read_text_file(path));
}

FileFormat format_of_extension(const std::filesystem::path& path) {
  const std::string extension = path.extension().string();
  if (extension == ".json") return FileFormat::kJson;
  if (extension == ".pt" || extension == ".pth") return FileFormat::kPt;
  if (extension == ".safetensors") return FileFormat::kSafetensors;
  MOESTAT_FAIL("{}: unknown extension \"{}\" (want .json, .pt, .pth or .safetensors)",
               path.string(), extension);
}

CountWindow read_counts(const std::filesystem::path& path, Fractions fractions) {
  return std::get<CountWindow>(
      read_payload(path, StatisticsKind::kLogicalCounts, {.fractions = fractions}));
}

void write_counts(const std::filesystem::path& path, const CountWindow& counts) {
  write_statistics_file(path, counts);
}

Placement read_placement(const std::filesystem::path& path, std::int64_t num_logical_experts,
                         std::uint64_t version) {
  return std::get<Placement>(
      read_payload(path, StatisticsKind::kPlacement,
                   {.num_logical_experts = num_logical_experts, .version = version}));
}

void write_placement(const std::filesystem::path& path, const Placement& placement) {
  write_statistics_file(path, placement);
}

ExpertMask read_expert_mask(const std::filesystem::path& path) {
  return std::get<ExpertMask>(read_payload(path, StatisticsKind::kExpertMask));
}

void write_expert_mask(const std::filesystem::path& path, const ExpertMask& mask) {
  write_statistics_file(path, mask);
}

std::string_view statistics_kind_name(StatisticsKind kind) noexcept {
  switch (kind) {
    case StatisticsKind::kLogicalCounts:
      return "logical_count";
    case StatisticsKind::kPlacement:
      return "placement";
    case StatisticsKind::kExpertMask:
      return "expert_mask";
  }
  return "unknown";
}

StatisticsKind statistics_kind(const StatisticsFile& file) noexcept {
  return static_cast<StatisticsKind>(file.index());
}

StatisticsFile read_statistics_file(const std::filesystem::path& path) {
  return read_payload(path, std::nullopt);
}

void write_statistics_file(const std::filesystem::path& path, const StatisticsFile& file) {
  write_file_atomically(path, detail::codec_for(format_of_extension(path)).write(file));
}

}  // namespace moestat::io
