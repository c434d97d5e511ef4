// Which logical expert each physical expert slot holds, per layer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moestat {

/// An expert placement: `physical_to_logical[l][p]` is the logical expert whose weights sit
/// in physical slot p of layer l (SGLang's `physical_to_logical_map`). Immutable once built;
/// derived maps are computed at construction.
///
/// Invariants (checked at construction, moestat::Error otherwise): every id is in [0, E),
/// and in every layer every logical expert has at least one replica.
class Placement {
 public:
  /// `physical_to_logical`: row-major [num_layers, num_physical_experts].
  /// `version` tags the placement so recordings can say which one was in force.
  Placement(std::int64_t num_layers, std::int64_t num_physical_experts,
            std::int64_t num_logical_experts, std::vector<std::int32_t> physical_to_logical,
            std::uint64_t version = 0);

  /// Slot p holds logical expert p % E in every layer (SGLang's `trivial`).
  static Placement trivial(std::int64_t num_layers, std::int64_t num_physical_experts,
                           std::int64_t num_logical_experts, std::uint64_t version = 0);

  std::int64_t num_layers() const noexcept { return num_layers_; }
  std::int64_t num_physical_experts() const noexcept { return num_physical_; }
  std::int64_t num_logical_experts() const noexcept { return num_logical_; }
  std::uint64_t version() const noexcept { return version_; }
  /// The largest replica count of any (layer, expert): the last axis of logical_to_physical.
  std::int64_t max_replicas() const noexcept { return max_replicas_; }

  /// [L, P] row-major.
  std::span<const std::int32_t> physical_to_logical() const noexcept {
    return physical_to_logical_;
  }
  /// [L, E, max_replicas] row-major; a logical expert's slots in ascending order, -1 padded.
  std::span<const std::int32_t> logical_to_physical() const noexcept {
    return logical_to_physical_;
  }
  /// [L, E] row-major: replicas of each logical expert.
  std::span<const std::int32_t> replica_counts() const noexcept { return replica_counts_; }

  std::int32_t logical_of(std::int64_t layer, std::int64_t physical) const noexcept {
    return physical_to_logical_[std::size_t(layer * num_physical_ + physical)];
  }

  /// Same maps, ignoring the version.
  bool same_maps(const Placement& other) const noexcept {
    return num_logical_ == other.num_logical_ && num_physical_ == other.num_physical_ &&
           physical_to_logical_ == other.physical_to_logical_;
  }

 private:
  std::int64_t num_layers_;
  std::int64_t num_physical_;
  std::int64_t num_logical_;
  std::uint64_t version_;
  std::int64_t max_replicas_ = 0;
  std::vector<std::int32_t> physical_to_logical_;
  std::vector<std::int32_t> logical_to_physical_;
  std::vector<std::int32_t> replica_counts_;
};

}  // namespace moestat
