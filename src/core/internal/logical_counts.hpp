// Physical -> logical conversion of per-pass counts, shared by the recorder backends.
#pragma once

#include <cstdint>
#include <map>
#include <moestat/placement.hpp>
#include <span>
#include <vector>

namespace moestat::detail {

/// Adds one pass's physical counts [L, P] to logical counts [L, E] under `placement`.
void add_logical_counts(const Placement& placement, const std::int64_t* physical,
                        std::int64_t* logical);

/// Converts [W, L, P] physical counts to [W, L, E] logical counts, pass w with the
/// placement of version versions[w] (which `placements` must hold).
std::vector<std::int64_t> logical_counts_by_pass(
    std::span<const std::int64_t> physical, std::span<const std::uint64_t> versions,
    const std::map<std::uint64_t, Placement>& placements);

}  // namespace moestat::detail
