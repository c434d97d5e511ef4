// Each statistics payload (counts, placement, expert mask) as named tensors: the form a
// tensor container (safetensors) holds it in, and the tensors SGLang's .pt dicts hold.
// One file per payload (counts_tensors.cpp, placement_tensors.cpp, expert_mask_tensors.cpp);
// payload_mappings.cpp is the one table of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <moestat/io/named_tensors.hpp>
#include <moestat/io/statistics.hpp>
#include <span>
#include <string_view>
#include <vector>

namespace moestat::io::detail {

/// What a reader is asked for besides the payload's kind.
struct ReadOptions {
  Fractions fractions = Fractions::kRefuse;  ///< Counts: non-whole entries (JSON only).
  std::int64_t num_logical_experts = 0;      ///< Placements: E, or 0 for max id + 1.
  std::uint64_t version = 0;                 ///< Placements: the version given to the result.
};

/// One payload both ways.
struct PayloadMapping {
  /// The tensor the payload is read from; a container checks it is there (naming itself in
  /// the error) before calling from_tensors.
  std::string_view tensor_name;
  NamedTensors (*to_tensors)(const StatisticsFile& file);
  StatisticsFile (*from_tensors)(const NamedTensors& tensors, const ReadOptions& options);
};

/// The mapping of each kind.
const PayloadMapping& payload_mapping(StatisticsKind kind);

extern const PayloadMapping kCountsMapping;
extern const PayloadMapping kPlacementMapping;
extern const PayloadMapping kExpertMaskMapping;

// ---- the tensors themselves, shared with SGLang's .pt dicts (sglang_values.cpp) ----

/// An integer tensor of `dims` dimensions with every size positive, as int64; moestat::Error
/// naming `name` otherwise.
std::vector<std::int64_t> integer_tensor(const HostTensor& tensor, std::string_view name,
                                         std::size_t dims);

/// "logical_count" [W, L, E] (or [L, E] without a window axis), int32 when every count fits
/// (what SGLang writes), else int64. Whole counts only.
HostTensor logical_count_tensor(const CountWindow& counts);
/// Counts of `shape` as int32 when every value fits (what SGLang writes), else int64.
HostTensor count_tensor(std::vector<std::int64_t> shape, std::span<const std::int64_t> values);
/// Counts from an integer tensor [L, E] or [W, L, E].
CountWindow counts_from_tensor(const HostTensor& tensor);

/// "physical_to_logical_map" [L, P] int64.
HostTensor physical_to_logical_tensor(const Placement& placement);
/// A placement from an integer [L, P] map; E and version as placement_from_json.
Placement placement_from_tensor(const HostTensor& tensor, std::int64_t num_logical_experts,
                                std::uint64_t version);

}  // namespace moestat::io::detail
