// The files `moestat plan`, `eval` and `hot-experts` read and write, each kind through one
// function, so a new format (torch .pt) plugs in at one place per kind.
#pragma once

#include <filesystem>
#include <moestat/placement.hpp>
#include <moestat/plan/hot_experts.hpp>
#include <moestat/plan/loads.hpp>

namespace moestat::cli {

/// Load matrices of a --stats file: JSON with `logical_count` [L][E] or [W][L][E] (SGLang's
/// files, moestat snapshots) or `expert_popularity` [L][E]. A `.pt` path is an error in
/// this build. Errors name the path.
plan::LoadWindow read_load_file(const std::filesystem::path& path);

/// A placement file (`{"physical_to_logical_map": [L][P]}`) for `num_logical_experts`
/// experts. A `.pt` path is an error in this build.
Placement read_placement_file(const std::filesystem::path& path, std::int64_t num_logical_experts);

/// Writes exactly `{"physical_to_logical_map": [L][P]}` (SGLang's --init-expert-location
/// refuses other keys), atomically. A `.pt` path is an error in this build.
void write_placement_file(const std::filesystem::path& path, const Placement& placement);

/// Writes `{"gpu_experts_mask": [L][E] of true/false}`, atomically.
void write_mask_file(const std::filesystem::path& path, const plan::HotExpertMask& mask);

}  // namespace moestat::cli
