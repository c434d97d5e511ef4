#include "logical_counts.hpp"

#include <moestat/checked_math.hpp>
#include <moestat/error.hpp>

namespace moestat::detail {

void add_logical_counts(const Placement& placement, const std::int64_t* physical,
                        std::int64_t* logical) {
  const std::int64_t num_physical = placement.num_physical_experts();
  const std::int64_t num_logical = placement.num_logical_experts();
  for (std::int64_t layer = 0; layer < placement.num_layers(); ++layer) {
    for (std::int64_t slot = 0; slot < num_physical; ++slot) {
      // Replicas of one expert add up, and a caller's counts may be as large as int64.
      std::int64_t& count = logical[layer * num_logical + placement.logical_of(layer, slot)];
      count = checked_add(count, physical[layer * num_physical + slot], "a logical count");
    }
  }
}

std::vector<std::int64_t> logical_counts_by_pass(
    std::span<const std::int64_t> physical, std::span<const std::uint64_t> versions,
    const std::map<std::uint64_t, Placement>& placements) {
  std::vector<std::int64_t> logical;
  if (versions.empty()) return logical;
  const std::size_t pass_size = physical.size() / versions.size();
  for (std::size_t pass = 0; pass < versions.size(); ++pass) {
    const auto found = placements.find(versions[pass]);
    MOESTAT_CHECK(found != placements.end(), "no placement of version {} is known", versions[pass]);
    const Placement& placement = found->second;
    const std::size_t logical_size =
        std::size_t(placement.num_layers() * placement.num_logical_experts());
    if (logical.empty()) logical.assign(versions.size() * logical_size, 0);
    add_logical_counts(placement, physical.data() + pass * pass_size,
                       logical.data() + pass * logical_size);
  }
  return logical;
}

}  // namespace moestat::detail
