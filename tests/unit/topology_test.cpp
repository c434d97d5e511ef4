// ModelTopology: the uniform factory, derived counts, and one error per inconsistent field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <moestat/topology.hpp>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

// ---- Naive reference ----

/// A valid topology with a dense first layer, replicas and several ranks.
ModelTopology reference_topology() {
  ModelTopology topology;
  topology.num_layers = 4;
  topology.moe_layers = std::vector<bool>{false, true, true, true};
  topology.num_logical_experts = 8;
  topology.num_physical_experts = 12;
  topology.top_k = 2;
  topology.ep_size = 4;
  topology.num_nodes = 2;
  topology.num_groups = 4;
  topology.num_shared_expert_slots = 1;
  return topology;
}

std::int64_t reference_num_moe_layers(const ModelTopology& topology) {
  std::int64_t count = 0;
  for (bool moe : topology.moe_layers) count += moe ? 1 : 0;
  return count;
}

// ---- valid topologies ----

TEST(Topology, ReferenceTopologyIsValid) {
  const ModelTopology topology = reference_topology();
  EXPECT_NO_THROW(topology.validate());
  EXPECT_EQ(topology.num_local_experts(), 3);
  EXPECT_EQ(topology.num_moe_layers(), reference_num_moe_layers(topology));
  EXPECT_EQ(topology.num_moe_layers(), 3);
}

TEST(Topology, IsMoeFollowsTheMaskAndRejectsOutOfRange) {
  const ModelTopology topology = reference_topology();
  EXPECT_FALSE(topology.is_moe(0));
  EXPECT_TRUE(topology.is_moe(1));
  EXPECT_TRUE(topology.is_moe(3));
  EXPECT_FALSE(topology.is_moe(4));
  EXPECT_FALSE(topology.is_moe(-1));
  EXPECT_FALSE(topology.is_moe(1000));
}

TEST(Topology, UniformMarksEveryLayerMoe) {
  const ModelTopology topology = ModelTopology::uniform(5, 16, 4);
  EXPECT_EQ(topology.num_layers, 5);
  EXPECT_EQ(topology.moe_layers, std::vector<bool>(5, true));
  EXPECT_EQ(topology.num_logical_experts, 16);
  EXPECT_EQ(topology.num_physical_experts, 16);
  EXPECT_EQ(topology.top_k, 4);
  EXPECT_EQ(topology.ep_size, 1);
  EXPECT_EQ(topology.num_nodes, 1);
  EXPECT_EQ(topology.num_groups, 1);
  EXPECT_EQ(topology.num_shared_expert_slots, 0);
  EXPECT_EQ(topology.num_local_experts(), 16);
  EXPECT_EQ(topology.num_moe_layers(), 5);
}

TEST(Topology, UniformValidates) {
  EXPECT_MOESTAT_ERROR(ModelTopology::uniform(0, 4, 1), "num_layers must be positive, got 0");
  EXPECT_MOESTAT_ERROR(ModelTopology::uniform(-2, 4, 1), "num_layers must be positive, got -2");
  EXPECT_MOESTAT_ERROR(ModelTopology::uniform(2, 0, 1), "num_logical_experts must be positive");
  EXPECT_MOESTAT_ERROR(ModelTopology::uniform(2, 4, 5), "top_k must be in [1, num_logical");
}

TEST(Topology, EqualityComparesEveryField) {
  const ModelTopology base = reference_topology();
  ModelTopology other = base;
  EXPECT_EQ(base, other);
  other.num_shared_expert_slots = 0;
  EXPECT_NE(base, other);
  other = base;
  other.moe_layers[0] = true;
  EXPECT_NE(base, other);
}

TEST(Topology, TopKMayEqualExpertCountAndPhysicalMayEqualLogical) {
  ModelTopology topology = reference_topology();
  topology.top_k = topology.num_logical_experts;
  topology.num_physical_experts = topology.num_logical_experts;
  EXPECT_NO_THROW(topology.validate());
}

// ---- one error per field ----

TEST(Topology, RejectsMoreLayerSlotsThanTheBound) {
  EXPECT_EQ(ModelTopology::uniform(std::int64_t(1) << 19, 32, 1).num_layers, 1 << 19);  // 2^24
  EXPECT_MOESTAT_ERROR(ModelTopology::uniform((std::int64_t(1) << 19) + 1, 32, 1),
                       "524289 layers x 32 physical experts is more than moestat takes");
}

TEST(Topology, RejectsNonPositiveLayerCount) {
  ModelTopology topology = reference_topology();
  topology.num_layers = 0;
  topology.moe_layers.clear();
  EXPECT_MOESTAT_ERROR(topology.validate(), "num_layers must be positive, got 0");
}

TEST(Topology, RejectsMaskOfWrongLength) {
  ModelTopology topology = reference_topology();
  topology.moe_layers.push_back(true);
  EXPECT_MOESTAT_ERROR(topology.validate(), "moe_layers has 5 entries but num_layers is 4");
  topology.moe_layers.resize(2);
  EXPECT_MOESTAT_ERROR(topology.validate(), "moe_layers has 2 entries but num_layers is 4");
}

TEST(Topology, RejectsAllDenseLayers) {
  ModelTopology topology = reference_topology();
  std::fill(topology.moe_layers.begin(), topology.moe_layers.end(), false);
  EXPECT_MOESTAT_ERROR(topology.validate(), "no layer is marked MoE");
}

TEST(Topology, RejectsNonPositiveLogicalExperts) {
  ModelTopology topology = reference_topology();
  topology.num_logical_experts = 0;
  EXPECT_MOESTAT_ERROR(topology.validate(), "num_logical_experts must be positive, got 0");
  topology.num_logical_experts = -8;
  EXPECT_MOESTAT_ERROR(topology.validate(), "num_logical_experts must be positive, got -8");
}

TEST(Topology, RejectsFewerPhysicalThanLogical) {
  ModelTopology topology = reference_topology();
  topology.num_physical_experts = 4;
  EXPECT_MOESTAT_ERROR(topology.validate(),
                       "num_physical_experts (4) must be at least num_logical_experts (8)");
}

TEST(Topology, RejectsTopKOutOfRange) {
  ModelTopology topology = reference_topology();
  topology.top_k = 0;
  EXPECT_MOESTAT_ERROR(topology.validate(), "top_k must be in [1, num_logical_experts = 8], got 0");
  topology.top_k = 9;
  EXPECT_MOESTAT_ERROR(topology.validate(), "got 9");
  topology.top_k = -1;
  EXPECT_MOESTAT_ERROR(topology.validate(), "got -1");
}

TEST(Topology, RejectsNonPositiveEpSize) {
  ModelTopology topology = reference_topology();
  topology.ep_size = 0;
  EXPECT_MOESTAT_ERROR(topology.validate(), "ep_size must be positive, got 0");
  topology.ep_size = -4;
  EXPECT_MOESTAT_ERROR(topology.validate(), "ep_size must be positive, got -4");
}

TEST(Topology, RejectsEpSizeNotDividingPhysical) {
  ModelTopology topology = reference_topology();
  topology.ep_size = 5;
  topology.num_nodes = 1;
  EXPECT_MOESTAT_ERROR(topology.validate(),
                       "num_physical_experts (12) must be divisible by ep_size (5)");
}

TEST(Topology, RejectsNodesNotDividingEpSize) {
  ModelTopology topology = reference_topology();
  topology.num_nodes = 3;
  EXPECT_MOESTAT_ERROR(topology.validate(),
                       "num_nodes (3) must be positive and divide ep_size (4)");
  topology.num_nodes = 0;
  EXPECT_MOESTAT_ERROR(topology.validate(), "num_nodes (0)");
  topology.num_nodes = -2;
  EXPECT_MOESTAT_ERROR(topology.validate(), "num_nodes (-2)");
}

TEST(Topology, RejectsGroupsNotDividingExperts) {
  ModelTopology topology = reference_topology();
  topology.num_groups = 3;
  EXPECT_MOESTAT_ERROR(topology.validate(),
                       "num_groups (3) must be positive and divide num_logical_experts (8)");
  topology.num_groups = 0;
  EXPECT_MOESTAT_ERROR(topology.validate(), "num_groups (0)");
  topology.num_groups = -4;
  EXPECT_MOESTAT_ERROR(topology.validate(), "num_groups (-4)");
}

TEST(Topology, RejectsNegativeSharedSlots) {
  ModelTopology topology = reference_topology();
  topology.num_shared_expert_slots = -1;
  EXPECT_MOESTAT_ERROR(topology.validate(), "num_shared_expert_slots must be non-negative, got -1");
}

}  // namespace
}  // namespace moestat
