// Loading and saving statistics, placements and masks in any format moestat knows, chosen
// by the file name's extension: what the planners, the report and the CLI call.
//
//   CountWindow counts = io::read_counts("expert_distribution_recorder_1.0.pt");
//   io::write_placement("placement.json", placement);   // or .pt, for --init-expert-location
#pragma once

#include <cstdint>
#include <filesystem>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/formats.hpp>
#include <moestat/io/sglang.hpp>
#include <moestat/placement.hpp>
#include <string_view>
#include <variant>

namespace moestat::io {

/// The one reader of counts files, for every command, the report and Python. Counts
/// [W, L, E] (W = 1 and has_window_axis = false for an [L, E] file) from:
///  - .json: a moestat snapshot (its window, with its pass metadata), {"logical_count": ...}
///    as SGLang writes, or fiddler's {"expert_popularity": [L][E]};
///  - .pt: an SGLang stat, per-pass or per-token dump (logical_counts_from_pt);
///  - .safetensors: a tensor "logical_count", integer, [L, E] or [W, L, E].
/// The format is detected from the contents; errors start with the path. Non-whole JSON
/// entries are refused unless `fractions` is kKeep (CountWindow says why).
CountWindow read_counts(const std::filesystem::path& path,
                        Fractions fractions = Fractions::kRefuse);
/// As above, of a file already read (errors start with its path).
CountWindow read_counts(const DetectedFile& file, Fractions fractions = Fractions::kRefuse);
/// Writes counts by extension: .json {"logical_count"}, .pt an SGLang stat dump (rank 0,
/// no utilisation rate), .safetensors a tensor "logical_count" (int32, int64 if a count
/// needs it) with metadata {"format": "moestat.logical_count"}. Whole counts only; pass
/// metadata is not written (none of these formats has it). Atomic.
void write_counts(const std::filesystem::path& path, const CountWindow& counts);
/// As above to a .json path, the counts followed by the members of `json_members`, a JSON
/// object's text (logical_counts_to_json); moestat::Error for another extension, whose
/// formats have no place for them.
void write_counts(const std::filesystem::path& path, const CountWindow& counts,
                  std::string_view json_members);

/// A placement from .json, .pt ({"physical_to_logical_map"}) or .safetensors (a tensor
/// "physical_to_logical_map"); E and version as placement_from_json. `num_layers` and
/// `num_physical_experts` (0: any) are the map's shape required, what an engine's model
/// takes: a JSON map is refused at the first row or id that breaks it, unread beyond.
Placement read_placement(const std::filesystem::path& path, std::int64_t num_logical_experts = 0,
                         std::uint64_t version = 0, std::int64_t num_layers = 0,
                         std::int64_t num_physical_experts = 0);
/// Writes {"physical_to_logical_map": [L, P]} by extension (.json, .pt, .safetensors).
void write_placement(const std::filesystem::path& path, const Placement& placement);

/// An expert mask from .json ({"gpu_experts_masks": [[bool]]}), .pt (a bool tensor, bare or
/// under "gpu_experts_masks") or .safetensors (tensor "gpu_experts_masks").
ExpertMask read_expert_mask(const std::filesystem::path& path);
/// Writes a mask by extension: .pt a bare bool tensor [L, E], .json and .safetensors under
/// "gpu_experts_masks".
void write_expert_mask(const std::filesystem::path& path, const ExpertMask& mask);

/// Whatever statistics file a path holds; the alternative index follows StatisticsKind.
using StatisticsFile = std::variant<CountWindow, Placement, ExpertMask>;
enum class StatisticsKind : std::uint8_t { kLogicalCounts, kPlacement, kExpertMask };
/// "logical_count", "placement" or "expert_mask".
std::string_view statistics_kind_name(StatisticsKind kind) noexcept;
StatisticsKind statistics_kind(const StatisticsFile& file) noexcept;

/// Reads any of the files above, the format detected from the contents and the kind from
/// the keys: "physical_to_logical_map" is a placement, "gpu_experts_masks" (or a bare bool
/// tensor in a .pt) a mask, anything else is read as counts (read_counts, whole counts
/// only). Errors start with the path.
StatisticsFile read_statistics_file(const std::filesystem::path& path);
/// As above, of a file already read (errors start with its path).
StatisticsFile read_statistics_file(const DetectedFile& file);
/// Writes it in the format of the path's extension, as the write_* functions above.
void write_statistics_file(const std::filesystem::path& path, const StatisticsFile& file);

}  // namespace moestat::io
