// Placements as JSON: SGLang's --init-expert-location file.
#pragma once

#include <cstdint>
#include <moestat/placement.hpp>
#include <string>
#include <string_view>

namespace moestat::io {

/// `{"physical_to_logical_map": [L][P]}`, exactly what SGLang's --init-expert-location takes.
/// The placement's version is not part of that format and is not written.
std::string placement_to_json(const Placement& placement);
/// Parses `{"physical_to_logical_map": [L][P]}` (other keys are ignored). E is taken as
/// max id + 1 (a valid map holds every logical expert) unless `num_logical_experts` > 0 is
/// given. The result has version `version`. moestat::Error on malformed input or a map that
/// is not a valid placement (an id out of range, an expert without a replica).
Placement placement_from_json(std::string_view text, std::int64_t num_logical_experts = 0,
                              std::uint64_t version = 0);

}  // namespace moestat::io
