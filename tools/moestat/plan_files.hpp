// The files `moestat plan`, `eval`, `advise`, `hot-experts` and `report` read and write
// besides counts (which all read through io::read_counts), each kind through one function (the
// io module's loading by format underneath), so every command that takes a kind of file takes
// it in every format.
#pragma once

#include <filesystem>
#include <moestat/expert_mask.hpp>
#include <moestat/placement.hpp>

namespace moestat::cli {

/// What --stats of plan, eval and hot-experts takes: io::read_counts, fractional loads kept.
inline constexpr const char* kStatsFileHelp =
    "Load file: JSON with logical_count [L][E] or [W][L][E] (SGLang, moestat snapshots) or "
    "expert_popularity [L][E]; an SGLang .pt dump; .safetensors with a logical_count tensor; "
    "llama.cpp's imatrix .gguf (llama-imatrix's per-expert counts)";

/// A placement file (`{"physical_to_logical_map": [L][P]}`) for `num_logical_experts`
/// experts, from `.json`, `.pt` or `.safetensors`: what every --placement and --previous
/// takes. Errors name the path.
Placement read_placement_file(const std::filesystem::path& path, std::int64_t num_logical_experts);

/// Writes exactly `{"physical_to_logical_map": [L][P]}` (SGLang's --init-expert-location
/// refuses other keys) as `.json` or `.pt` by extension, atomically.
void write_placement_file(const std::filesystem::path& path, const Placement& placement);

/// Writes the mask by extension (io::write_expert_mask: .json `{"gpu_experts_masks": [L][E]}`,
/// .pt a bool tensor, .safetensors), atomically.
void write_mask_file(const std::filesystem::path& path, const ExpertMask& mask);

}  // namespace moestat::cli
