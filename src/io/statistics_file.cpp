// Statistics, placements and masks in any format, by extension on writing and by contents
// on reading.
#include <algorithm>
#include <cstring>
#include <moestat/error.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/placement_json.hpp>
#include <moestat/io/safetensors.hpp>
#include <moestat/io/statistics.hpp>
#include <optional>
#include <string_view>

#include "json_support.hpp"
#include "readers.hpp"

namespace moestat::io {
namespace {

constexpr std::string_view kMaskKey = "gpu_experts_masks";

std::span<const std::byte> as_bytes(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

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

const HostTensor& require_tensor(const SafetensorsFile& file, std::string_view name) {
  const HostTensor* tensor = file.find(name);
  MOESTAT_CHECK(tensor != nullptr, "no tensor \"{}\" in the safetensors file", name);
  return *tensor;
}

PtValue as_pt_counts(const HostTensor& tensor) {
  return PtValue(PtDict{{PtValue("logical_count"), PtValue(tensor)}});
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
  const std::string bytes = read_text_file(path);
  return naming(path, [&]() -> CountWindow {
    switch (detect(path, bytes)) {
      case FileFormat::kPt:
        return logical_counts_from_pt(read_pt(as_bytes(bytes), path.string()));
      case FileFormat::kSafetensors:
        return logical_counts_from_pt(
            as_pt_counts(require_tensor(read_safetensors(as_bytes(bytes)), "logical_count")));
      case FileFormat::kTrace:
        MOESTAT_FAIL("a per-token trace holds no logical counts (it has physical ids)");
      case FileFormat::kJson:
        break;
    }
    // Detected as document_from_json detects documents, the counts read with `fractions`.
    const detail::Json document = detail::parse_json(bytes);
    const bool object = document.is_object();
    if (object && document.contains("format")) {
      return count_window_of(detail::snapshot_from_document(document));
    }
    if (object && !document.contains("physical_to_logical_map") && detail::holds_counts(document)) {
      return detail::logical_counts_from_document(document, fractions);
    }
    // Not counts: document_from_json says what it is instead, or why it is nothing.
    const Document other = document_from_json(bytes);
    MOESTAT_FAIL("holds a {}, not logical counts", document_kind_name(document_kind(other)));
  });
}

void write_counts(const std::filesystem::path& path, const CountWindow& counts) {
  switch (format_of_extension(path)) {
    case FileFormat::kJson:
      return write_file_atomically(path, logical_counts_to_json(counts));
    case FileFormat::kPt:
      return write_pt_file(path, sglang_stat_dump(counts));
    case FileFormat::kTrace:
      MOESTAT_FAIL("{}: a trace cannot be written here", path.string());
    case FileFormat::kSafetensors: {
      SafetensorsFile file;
      file.metadata["format"] = "moestat.logical_count";
      file.tensors.emplace_back("logical_count",
                                sglang_stat_dump(counts).at("logical_count").tensor());
      return write_safetensors_file(path, file);
    }
  }
}

Placement read_placement(const std::filesystem::path& path, std::int64_t num_logical_experts,
                         std::uint64_t version) {
  const std::string bytes = read_text_file(path);
  return naming(path, [&]() -> Placement {
    switch (detect(path, bytes)) {
      case FileFormat::kPt:
        return placement_from_pt(read_pt(as_bytes(bytes), path.string()), num_logical_experts,
                                 version);
      case FileFormat::kSafetensors: {
        const SafetensorsFile file = read_safetensors(as_bytes(bytes));
        return placement_from_pt(
            PtValue(PtDict{{PtValue("physical_to_logical_map"),
                            PtValue(require_tensor(file, "physical_to_logical_map"))}}),
            num_logical_experts, version);
      }
      case FileFormat::kTrace:
        MOESTAT_FAIL("a per-token trace holds no placement");
      case FileFormat::kJson:
        break;
    }
    return placement_from_json(bytes, num_logical_experts, version);
  });
}

void write_placement(const std::filesystem::path& path, const Placement& placement) {
  switch (format_of_extension(path)) {
    case FileFormat::kJson:
      return write_file_atomically(path, placement_to_json(placement));
    case FileFormat::kPt:
      return write_pt_file(path, placement_to_pt(placement));
    case FileFormat::kTrace:
      MOESTAT_FAIL("{}: a trace cannot be written here", path.string());
    case FileFormat::kSafetensors: {
      SafetensorsFile file;
      file.metadata["format"] = "moestat.placement";
      file.tensors.emplace_back("physical_to_logical_map",
                                placement_to_pt(placement).at("physical_to_logical_map").tensor());
      return write_safetensors_file(path, file);
    }
  }
}

ExpertMask read_expert_mask(const std::filesystem::path& path) {
  const std::string bytes = read_text_file(path);
  return naming(path, [&]() -> ExpertMask {
    switch (detect(path, bytes)) {
      case FileFormat::kPt: {
        const PtValue value = read_pt(as_bytes(bytes), path.string());
        const PtValue* keyed = value.find(kMaskKey);
        return expert_mask_from_tensor(keyed != nullptr ? keyed->tensor() : value.tensor());
      }
      case FileFormat::kSafetensors:
        return expert_mask_from_tensor(require_tensor(read_safetensors(as_bytes(bytes)), kMaskKey));
      case FileFormat::kTrace:
        MOESTAT_FAIL("a per-token trace holds no expert mask");
      case FileFormat::kJson:
        break;
    }
    const detail::Json document = detail::parse_json(bytes);
    detail::require_object(document, "an expert mask");
    std::vector<std::int64_t> shape{detail::kAnySize, detail::kAnySize};
    constexpr std::string_view kDims[] = {"layers", "experts"};
    const std::vector<std::uint8_t> flags = detail::read_nested<std::uint8_t>(
        detail::require_key(document, kMaskKey), kMaskKey, shape, kDims,
        [](const detail::Json& value, const std::string& where) {
          MOESTAT_CHECK(value.is_boolean(), "{} is {}, expected true or false", where,
                        detail::describe(value));
          return std::uint8_t(value.get<bool>() ? 1 : 0);
        });
    MOESTAT_CHECK(shape[0] > 0 && shape[1] > 0, "{} is empty", kMaskKey);
    return {shape[0], shape[1], flags};
  });
}

void write_expert_mask(const std::filesystem::path& path, const ExpertMask& mask) {
  const HostTensor tensor = expert_mask_tensor(mask);
  switch (format_of_extension(path)) {
    case FileFormat::kJson: {
      std::vector<bool> flags(mask.on_gpu.begin(), mask.on_gpu.end());
      detail::OrderedJson rows = detail::OrderedJson::array();
      for (std::int64_t l = 0; l < mask.num_layers; ++l) {
        rows.push_back(std::vector<bool>(flags.begin() + l * mask.num_experts,
                                         flags.begin() + (l + 1) * mask.num_experts));
      }
      detail::OrderedJson document = detail::OrderedJson::object();
      document[std::string(kMaskKey)] = std::move(rows);
      return write_file_atomically(path, detail::dump_document(document));
    }
    case FileFormat::kPt:
      return write_pt_file(path, PtValue(tensor));
    case FileFormat::kTrace:
      MOESTAT_FAIL("{}: a trace cannot be written here", path.string());
    case FileFormat::kSafetensors: {
      SafetensorsFile file;
      file.tensors.emplace_back(std::string(kMaskKey), tensor);
      return write_safetensors_file(path, file);
    }
  }
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
  const std::string bytes = read_text_file(path);
  const auto has = [&](std::string_view key) {
    // Cheap and sufficient: the key names appear verbatim in every format's bytes.
    return bytes.find(key) != std::string::npos;
  };
  switch (detect(path, bytes)) {
    case FileFormat::kTrace:
      MOESTAT_FAIL("{}: a per-token trace is not a statistics file", path.string());
    case FileFormat::kPt: {
      const PtValue value = naming(path, [&] { return read_pt(as_bytes(bytes), path.string()); });
      if (value.find("physical_to_logical_map") != nullptr) return read_placement(path);
      if (value.find(kMaskKey) != nullptr || value.kind() == PtValue::Kind::kTensor) {
        return read_expert_mask(path);
      }
      return read_counts(path);
    }
    case FileFormat::kSafetensors:
    case FileFormat::kJson:
      break;
  }
  if (has("\"physical_to_logical_map\"")) return read_placement(path);
  if (has(std::string("\"") + std::string(kMaskKey) + "\"")) return read_expert_mask(path);
  return read_counts(path);
}

void write_statistics_file(const std::filesystem::path& path, const StatisticsFile& file) {
  std::visit(
      [&](const auto& value) {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, CountWindow>) {
          write_counts(path, value);
        } else if constexpr (std::is_same_v<T, Placement>) {
          write_placement(path, value);
        } else {
          write_expert_mask(path, value);
        }
      },
      file);
}

}  // namespace moestat::io
