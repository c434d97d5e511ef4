// The files `moestat plan`, `eval`, `advise`, `hot-experts` and `report` read and write
// besides counts (which all read through io::read_counts), each kind through one function (the
// io module's loading by format underneath), so every command that takes a kind of file takes
// it in every format.
#pragma once

#include <cstdint>
#include <filesystem>
#include <moestat/expert_mask.hpp>
#include <moestat/placement.hpp>
#include <string>

namespace moestat::cli {

/// What --stats of plan, eval and hot-experts takes: io::read_counts, fractional loads kept.
inline constexpr const char* kStatsFileHelp =
    "Load file: JSON with logical_count [L][E] or [W][L][E] (SGLang, moestat snapshots) or "
    "expert_popularity [L][E]; an SGLang .pt dump; .safetensors with a logical_count tensor; "
    "llama.cpp's imatrix .gguf (llama-imatrix's per-expert counts)";

/// How many scenarios `plan` makes of one file's window (--max-scenarios), and so `eval`'s
/// expected balancedness over them.
inline constexpr std::int64_t kDefaultMaxScenarios = 4;

/// The model a placement must fit: the layers and experts of the loads it is judged or
/// planned on, and the file those came from (named when the shapes differ).
struct ModelShape {
  std::int64_t num_layers = 0;
  std::int64_t num_experts = 0;
  std::string loads_file;
};

/// A placement file (`{"physical_to_logical_map": [L][P]}`) for `model`, from `.json`, `.pt`
/// or `.safetensors`: what every --placement and --previous takes. A placement of another
/// model (other layers, or experts numbered to another count) is refused saying both shapes.
/// Errors name the path.
Placement read_placement_file(const std::filesystem::path& path, const ModelShape& model);

/// Writes exactly `{"physical_to_logical_map": [L][P]}` (SGLang's --init-expert-location
/// refuses other keys) as `.json` or `.pt` by extension, atomically.
void write_placement_file(const std::filesystem::path& path, const Placement& placement);

/// Writes the mask by extension (io::write_expert_mask: .json `{"gpu_experts_masks": [L][E]}`,
/// .pt a bool tensor, .safetensors), atomically.
void write_mask_file(const std::filesystem::path& path, const ExpertMask& mask);

}  // namespace moestat::cli
