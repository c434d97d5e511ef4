// Placement: the trivial map, derived maps (logical_to_physical, replica counts) and every
// construction error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <moestat/placement.hpp>
#include <vector>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

// ---- Naive reference ----

struct ReferenceMaps {
  std::int64_t max_replicas = 0;
  std::vector<std::int32_t> logical_to_physical;  // [L, E, max_replicas], -1 padded
  std::vector<std::int32_t> replica_counts;       // [L, E]
};

/// Derives the maps by scanning each layer's slots once per logical expert, in slot order.
ReferenceMaps reference_maps(std::int64_t num_layers, std::int64_t num_physical,
                             std::int64_t num_logical, const std::vector<std::int32_t>& map) {
  ReferenceMaps out;
  using Slots = std::vector<std::vector<std::int32_t>>;  // [E][replica]
  std::vector<Slots> slots(static_cast<std::size_t>(num_layers),
                           Slots(static_cast<std::size_t>(num_logical)));
  for (std::int64_t l = 0; l < num_layers; ++l) {
    for (std::int64_t e = 0; e < num_logical; ++e) {
      for (std::int64_t p = 0; p < num_physical; ++p) {
        if (map[std::size_t(l * num_physical + p)] == e) {
          slots[std::size_t(l)][std::size_t(e)].push_back(std::int32_t(p));
        }
      }
      out.max_replicas =
          std::max(out.max_replicas, std::int64_t(slots[std::size_t(l)][std::size_t(e)].size()));
    }
  }
  for (const auto& layer : slots) {
    for (const auto& expert : layer) {
      out.replica_counts.push_back(std::int32_t(expert.size()));
      for (std::int64_t r = 0; r < out.max_replicas; ++r) {
        out.logical_to_physical.push_back(r < std::int64_t(expert.size()) ? expert[std::size_t(r)]
                                                                          : -1);
      }
    }
  }
  return out;
}

std::vector<std::int32_t> to_vector(std::span<const std::int32_t> span) {
  return {span.begin(), span.end()};
}

void expect_matches_reference(const Placement& placement,
                              const std::vector<std::int32_t>& physical_to_logical) {
  const ReferenceMaps expected =
      reference_maps(placement.num_layers(), placement.num_physical_experts(),
                     placement.num_logical_experts(), physical_to_logical);
  EXPECT_EQ(to_vector(placement.physical_to_logical()), physical_to_logical);
  EXPECT_EQ(placement.max_replicas(), expected.max_replicas);
  EXPECT_EQ(to_vector(placement.logical_to_physical()), expected.logical_to_physical);
  EXPECT_EQ(to_vector(placement.replica_counts()), expected.replica_counts);
  for (std::int64_t l = 0; l < placement.num_layers(); ++l) {
    for (std::int64_t p = 0; p < placement.num_physical_experts(); ++p) {
      EXPECT_EQ(placement.logical_of(l, p),
                physical_to_logical[std::size_t(l * placement.num_physical_experts() + p)]);
    }
  }
}

// ---- trivial ----

TEST(Placement, TrivialIsSlotModuloExperts) {
  const Placement placement = Placement::trivial(2, 7, 3, 5);
  EXPECT_EQ(placement.num_layers(), 2);
  EXPECT_EQ(placement.num_physical_experts(), 7);
  EXPECT_EQ(placement.num_logical_experts(), 3);
  EXPECT_EQ(placement.version(), 5u);
  std::vector<std::int32_t> expected;
  for (int l = 0; l < 2; ++l)
    for (int p = 0; p < 7; ++p) expected.push_back(p % 3);
  expect_matches_reference(placement, expected);
  // Expert 0 sits in slots 0, 3, 6; expert 2 in 2, 5 and is padded with -1.
  EXPECT_EQ(placement.max_replicas(), 3);
  const std::vector<std::int32_t> layer0(placement.logical_to_physical().begin(),
                                         placement.logical_to_physical().begin() + 9);
  EXPECT_EQ(layer0, (std::vector<std::int32_t>{0, 3, 6, 1, 4, -1, 2, 5, -1}));
  EXPECT_EQ(to_vector(placement.replica_counts()), (std::vector<std::int32_t>{3, 2, 2, 3, 2, 2}));
}

TEST(Placement, TrivialWithoutReplicasIsIdentity) {
  const Placement placement = Placement::trivial(3, 4, 4);
  EXPECT_EQ(placement.version(), 0u);
  EXPECT_EQ(placement.max_replicas(), 1);
  for (std::int64_t l = 0; l < 3; ++l)
    for (std::int64_t p = 0; p < 4; ++p) EXPECT_EQ(placement.logical_of(l, p), p);
  EXPECT_EQ(to_vector(placement.logical_to_physical()),
            (std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
}

TEST(Placement, TrivialRejectsNonPositiveSizes) {
  EXPECT_MOESTAT_ERROR(Placement::trivial(0, 4, 4), "trivial needs positive sizes");
  EXPECT_MOESTAT_ERROR(Placement::trivial(2, 0, 4), "trivial needs positive sizes");
  EXPECT_MOESTAT_ERROR(Placement::trivial(2, 4, 0), "trivial needs positive sizes");
  EXPECT_MOESTAT_ERROR(Placement::trivial(2, 2, 4), "must be at least num_logical_experts");
}

// ---- explicit maps ----

TEST(Placement, ReplicasAreListedInAscendingSlotOrder) {
  // Layer 0: expert 2 holds slots 0, 2, 4 (listed ascending although scattered).
  // Layer 1: identity on 3 slots plus expert 0 replicated in slots 3 and 4.
  const std::vector<std::int32_t> map = {2, 0, 2, 1, 2,  //
                                         1, 0, 2, 0, 0};
  const Placement placement(2, 5, 3, map, 9);
  expect_matches_reference(placement, map);
  EXPECT_EQ(placement.version(), 9u);
  EXPECT_EQ(placement.max_replicas(), 3);
  EXPECT_EQ(to_vector(placement.logical_to_physical()),
            (std::vector<std::int32_t>{1, -1, -1, 3, -1, -1, 0, 2, 4,  //
                                       1, 3, 4, 0, -1, -1, 2, -1, -1}));
  EXPECT_EQ(to_vector(placement.replica_counts()), (std::vector<std::int32_t>{1, 1, 3, 3, 1, 1}));
}

TEST(Placement, MaxReplicasIsTakenOverAllLayers) {
  // Layer 0 has no replicas, layer 1 puts four copies of expert 1.
  const std::vector<std::int32_t> map = {0, 1, 0, 1, 0, 1,  //
                                         1, 1, 0, 1, 1, 0};
  const Placement placement(2, 6, 2, map);
  expect_matches_reference(placement, map);
  EXPECT_EQ(placement.max_replicas(), 4);
}

TEST(Placement, SameMapsIgnoresVersionOnly) {
  const Placement a = Placement::trivial(2, 6, 3, 1);
  const Placement b = Placement::trivial(2, 6, 3, 2);
  EXPECT_TRUE(a.same_maps(b));
  // The trivial map with the experts of layer 0's slots 0 and 1 swapped.
  const Placement c(2, 6, 3, {1, 0, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, 1);
  EXPECT_FALSE(a.same_maps(c));
  EXPECT_FALSE(a.same_maps(Placement::trivial(2, 6, 2, 1)));
  EXPECT_FALSE(a.same_maps(Placement::trivial(2, 3, 3, 1)));
}

// ---- errors ----

TEST(Placement, RejectsNonPositiveLayers) {
  EXPECT_MOESTAT_ERROR(Placement(0, 2, 2, {}), "num_layers must be positive, got 0");
  EXPECT_MOESTAT_ERROR(Placement(-1, 2, 2, {}), "num_layers must be positive, got -1");
}

TEST(Placement, RejectsNonPositiveLogicalExperts) {
  EXPECT_MOESTAT_ERROR(Placement(1, 2, 0, {0, 0}), "num_logical_experts must be in [1, 2^31)");
}

TEST(Placement, RejectsFewerPhysicalThanLogical) {
  EXPECT_MOESTAT_ERROR(Placement(1, 2, 3, {0, 1}),
                       "num_physical_experts (2) must be at least num_logical_experts (3)");
}

TEST(Placement, RejectsWrongMapSize) {
  EXPECT_MOESTAT_ERROR(Placement(2, 3, 3, {0, 1, 2, 0, 1}),
                       "physical_to_logical has 5 entries, expected 2 layers x 3 slots");
  EXPECT_MOESTAT_ERROR(Placement(2, 3, 3, {0, 1, 2, 0, 1, 2, 0}), "has 7 entries");
  EXPECT_MOESTAT_ERROR(Placement(1, 3, 3, {}), "has 0 entries");
}

TEST(Placement, RejectsOutOfRangeIds) {
  EXPECT_MOESTAT_ERROR(Placement(2, 3, 3, {0, 1, 2, 0, 3, 2}),
                       "layer 1 slot 1 holds logical expert 3, outside [0, 3)");
  EXPECT_MOESTAT_ERROR(Placement(1, 3, 3, {0, -1, 2}),
                       "layer 0 slot 1 holds logical expert -1, outside [0, 3)");
}

TEST(Placement, RejectsMissingReplica) {
  EXPECT_MOESTAT_ERROR(Placement(2, 4, 3, {0, 1, 2, 0, 0, 1, 1, 0}),
                       "layer 1 leaves logical expert 2 without a replica");
}

}  // namespace
}  // namespace moestat
