// Statistics, placements and masks in any format, by extension on writing and by contents
// on reading (the format registry, io/formats.hpp): the format picks a codec (codec.hpp),
// which does the rest.
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/statistics.hpp>
#include <optional>
#include <string_view>

#include "codec.hpp"

namespace moestat::io {
namespace {

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

/// The payload `kind` (any, when none is given) from `file`.
StatisticsFile read_payload(const DetectedFile& file, std::optional<StatisticsKind> kind,
                            const detail::ReadOptions& options = {}) {
  return naming(file.path, [&] {
    const detail::Codec& codec = detail::codec_for(file.format);
    const std::string name = file.path.string();
    return codec.read(file.bytes, name, kind ? *kind : codec.kind_of(file.bytes, name), options);
  });
}

/// As above, of the file at `path`; its detection errors name the path.
StatisticsFile read_payload(const std::filesystem::path& path, std::optional<StatisticsKind> kind,
                            const detail::ReadOptions& options = {}) {
  return read_payload(read_detected_file(path), kind, options);
}

}  // namespace

CountWindow read_counts(const std::filesystem::path& path, Fractions fractions) {
  return read_counts(read_detected_file(path), fractions);
}

CountWindow read_counts(const DetectedFile& file, Fractions fractions) {
  return std::get<CountWindow>(
      read_payload(file, StatisticsKind::kLogicalCounts, {.fractions = fractions}));
}

void write_counts(const std::filesystem::path& path, const CountWindow& counts) {
  write_statistics_file(path, counts);
}

void write_counts(const std::filesystem::path& path, const CountWindow& counts,
                  std::string_view json_members) {
  MOESTAT_CHECK(format_of_extension(path) == FileFormat::kJson,
                "{}: counts metadata is written only to a .json file", path.string());
  write_file_atomically(path, logical_counts_to_json(counts, json_members));
}

Placement read_placement(const std::filesystem::path& path, std::int64_t num_logical_experts,
                         std::uint64_t version, std::int64_t num_layers,
                         std::int64_t num_physical_experts) {
  MOESTAT_CHECK(num_layers >= 0 && num_physical_experts >= 0,
                "read_placement: the shape required is [{}, {}], expected sizes >= 0 (0: any)",
                num_layers, num_physical_experts);
  return std::get<Placement>(read_payload(path, StatisticsKind::kPlacement,
                                          {.num_logical_experts = num_logical_experts,
                                           .version = version,
                                           .num_layers = num_layers,
                                           .num_physical_experts = num_physical_experts}));
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
  return read_statistics_file(read_detected_file(path));
}

StatisticsFile read_statistics_file(const DetectedFile& file) {
  return read_payload(file, std::nullopt);
}

void write_statistics_file(const std::filesystem::path& path, const StatisticsFile& file) {
  write_file_atomically(path, detail::codec_for(format_of_extension(path)).write(file));
}

}  // namespace moestat::io
