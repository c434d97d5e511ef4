#include <algorithm>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/placement.hpp>

namespace moestat {

Placement::Placement(std::int64_t num_layers, std::int64_t num_physical_experts,
                     std::int64_t num_logical_experts,
                     std::vector<std::int32_t> physical_to_logical, std::uint64_t version)
    : num_layers_(num_layers),
      num_physical_(num_physical_experts),
      num_logical_(num_logical_experts),
      version_(version),
      physical_to_logical_(std::move(physical_to_logical)) {
  MOESTAT_CHECK(num_layers_ > 0, "placement: num_layers must be positive, got {}", num_layers_);
  MOESTAT_CHECK(num_logical_ > 0 && num_logical_ <= std::numeric_limits<std::int32_t>::max(),
                "placement: num_logical_experts must be in [1, 2^31), got {}", num_logical_);
  MOESTAT_CHECK(
      num_physical_ >= num_logical_ && num_physical_ <= std::numeric_limits<std::int32_t>::max(),
      "placement: num_physical_experts ({}) must be at least num_logical_experts ({})",
      num_physical_, num_logical_);
  MOESTAT_CHECK(std::int64_t(physical_to_logical_.size()) == num_layers_ * num_physical_,
                "placement: physical_to_logical has {} entries, expected {} layers x {} slots",
                physical_to_logical_.size(), num_layers_, num_physical_);

  replica_counts_.assign(std::size_t(num_layers_ * num_logical_), 0);
  for (std::int64_t layer = 0; layer < num_layers_; ++layer) {
    for (std::int64_t slot = 0; slot < num_physical_; ++slot) {
      const std::int32_t logical = logical_of(layer, slot);
      MOESTAT_CHECK(logical >= 0 && logical < num_logical_,
                    "placement: layer {} slot {} holds logical expert {}, outside [0, {})", layer,
                    slot, logical, num_logical_);
      ++replica_counts_[std::size_t(layer * num_logical_ + logical)];
    }
    for (std::int64_t expert = 0; expert < num_logical_; ++expert) {
      const std::int32_t replicas = replica_counts_[std::size_t(layer * num_logical_ + expert)];
      MOESTAT_CHECK(replicas > 0, "placement: layer {} leaves logical expert {} without a replica",
                    layer, expert);
      max_replicas_ = std::max<std::int64_t>(max_replicas_, replicas);
    }
  }

  logical_to_physical_.assign(std::size_t(num_layers_ * num_logical_ * max_replicas_), -1);
  std::vector<std::int32_t> filled(static_cast<std::size_t>(num_logical_));
  for (std::int64_t layer = 0; layer < num_layers_; ++layer) {
    std::fill(filled.begin(), filled.end(), 0);
    for (std::int64_t slot = 0; slot < num_physical_; ++slot) {
      const std::int32_t logical = logical_of(layer, slot);
      const std::int64_t row = layer * num_logical_ + logical;
      logical_to_physical_[std::size_t(row * max_replicas_ + filled[std::size_t(logical)]++)] =
          std::int32_t(slot);
    }
  }
}

Placement Placement::trivial(std::int64_t num_layers, std::int64_t num_physical_experts,
                             std::int64_t num_logical_experts, std::uint64_t version) {
  MOESTAT_CHECK(num_layers > 0 && num_logical_experts > 0 && num_physical_experts > 0,
                "placement: trivial needs positive sizes, got L={} P={} E={}", num_layers,
                num_physical_experts, num_logical_experts);
  std::vector<std::int32_t> map(std::size_t(num_layers * num_physical_experts));
  for (std::int64_t layer = 0; layer < num_layers; ++layer) {
    for (std::int64_t slot = 0; slot < num_physical_experts; ++slot) {
      map[std::size_t(layer * num_physical_experts + slot)] =
          std::int32_t(slot % num_logical_experts);
    }
  }
  return Placement(num_layers, num_physical_experts, num_logical_experts, std::move(map), version);
}

}  // namespace moestat
