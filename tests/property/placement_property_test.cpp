// Property tests: Placement's derived maps for random maps with replicas, and the trivial
// map, against a naive reference.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <moestat/error.hpp>
#include <moestat/placement.hpp>
#include <vector>

namespace moestat {
namespace {

// ---- Naive reference ----

/// For each (layer, expert): the slots holding it, found by scanning all slots in order.
std::vector<std::vector<std::int32_t>> reference_slots(std::int64_t num_layers,
                                                       std::int64_t num_physical,
                                                       std::int64_t num_logical,
                                                       const std::vector<std::int32_t>& map) {
  std::vector<std::vector<std::int32_t>> slots;
  for (std::int64_t l = 0; l < num_layers; ++l) {
    for (std::int64_t e = 0; e < num_logical; ++e) {
      std::vector<std::int32_t> found;
      for (std::int64_t p = 0; p < num_physical; ++p) {
        if (map[std::size_t(l * num_physical + p)] == e) found.push_back(std::int32_t(p));
      }
      slots.push_back(found);
    }
  }
  return slots;
}

void check_against_reference(const Placement& placement, const std::vector<std::int32_t>& map) {
  const auto slots = reference_slots(placement.num_layers(), placement.num_physical_experts(),
                                     placement.num_logical_experts(), map);
  std::size_t max_replicas = 0;
  for (const auto& s : slots) max_replicas = std::max(max_replicas, s.size());
  RC_ASSERT(placement.max_replicas() == std::int64_t(max_replicas));
  RC_ASSERT(std::vector<std::int32_t>(placement.physical_to_logical().begin(),
                                      placement.physical_to_logical().end()) == map);
  const auto l2p = placement.logical_to_physical();
  const auto counts = placement.replica_counts();
  RC_ASSERT(l2p.size() == slots.size() * max_replicas);
  RC_ASSERT(counts.size() == slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    RC_ASSERT(counts[i] == std::int32_t(slots[i].size()));
    for (std::size_t r = 0; r < max_replicas; ++r) {
      RC_ASSERT(l2p[i * max_replicas + r] == (r < slots[i].size() ? slots[i][r] : -1));
    }
  }
}

RC_GTEST_PROP(PlacementProperty, DerivedMapsMatchReference, ()) {
  const auto num_layers = *rc::gen::inRange<std::int64_t>(1, 5);
  const auto num_logical = *rc::gen::inRange<std::int64_t>(1, 10);
  const auto num_physical = num_logical + *rc::gen::inRange<std::int64_t>(0, 10);
  std::vector<std::int32_t> map;
  for (std::int64_t l = 0; l < num_layers; ++l) {
    // Every expert once, the rest random, then shuffled.
    std::vector<std::int32_t> layer;
    for (std::int64_t p = 0; p < num_physical; ++p) {
      layer.push_back(p < num_logical
                          ? std::int32_t(p)
                          : *rc::gen::inRange<std::int32_t>(0, std::int32_t(num_logical)));
    }
    for (std::size_t i = 0; i + 1 < layer.size(); ++i) {
      std::swap(layer[i], layer[*rc::gen::inRange<std::size_t>(i, layer.size())]);
    }
    map.insert(map.end(), layer.begin(), layer.end());
  }
  const auto version = *rc::gen::arbitrary<std::uint64_t>();
  const Placement placement(num_layers, num_physical, num_logical, map, version);
  RC_ASSERT(placement.version() == version);
  check_against_reference(placement, map);
  for (std::int64_t l = 0; l < num_layers; ++l) {
    for (std::int64_t p = 0; p < num_physical; ++p) {
      RC_ASSERT(placement.logical_of(l, p) == map[std::size_t(l * num_physical + p)]);
    }
  }
}

RC_GTEST_PROP(PlacementProperty, MapMissingAnExpertIsRejected, ()) {
  const auto num_layers = *rc::gen::inRange<std::int64_t>(1, 4);
  const auto num_logical = *rc::gen::inRange<std::int64_t>(2, 8);
  const auto num_physical = num_logical + *rc::gen::inRange<std::int64_t>(0, 6);
  const auto bad_layer = *rc::gen::inRange<std::int64_t>(0, num_layers);
  const auto missing = *rc::gen::inRange<std::int32_t>(0, std::int32_t(num_logical));
  std::vector<std::int32_t> map;
  for (std::int64_t l = 0; l < num_layers; ++l) {
    for (std::int64_t p = 0; p < num_physical; ++p) {
      auto expert = std::int32_t(p % num_logical);
      if (l == bad_layer && expert == missing) expert = (missing + 1) % std::int32_t(num_logical);
      map.push_back(expert);
    }
  }
  RC_ASSERT_THROWS_AS(Placement(num_layers, num_physical, num_logical, map), Error);
}

RC_GTEST_PROP(PlacementProperty, TrivialIsSlotModuloExperts, ()) {
  const auto num_layers = *rc::gen::inRange<std::int64_t>(1, 5);
  const auto num_logical = *rc::gen::inRange<std::int64_t>(1, 20);
  const auto num_physical = num_logical + *rc::gen::inRange<std::int64_t>(0, 30);
  const Placement placement = Placement::trivial(num_layers, num_physical, num_logical);
  std::vector<std::int32_t> map;
  for (std::int64_t l = 0; l < num_layers; ++l)
    for (std::int64_t p = 0; p < num_physical; ++p) map.push_back(std::int32_t(p % num_logical));
  check_against_reference(placement, map);
  RC_ASSERT(placement.max_replicas() == (num_physical + num_logical - 1) / num_logical);
}

}  // namespace
}  // namespace moestat
