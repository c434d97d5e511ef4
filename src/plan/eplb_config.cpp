#include <moestat/error.hpp>
#include <moestat/plan/eplb.hpp>

namespace moestat::plan {

void EplbConfig::validate(std::int64_t num_experts) const {
  MOESTAT_CHECK(num_experts > 0, "plan: need at least one logical expert, got {}", num_experts);
  MOESTAT_CHECK(num_replicas > 0 && num_groups > 0 && num_nodes > 0 && num_gpus > 0,
                "plan: replicas, groups, nodes and gpus must be positive, got P={} G={} N={} R={}",
                num_replicas, num_groups, num_nodes, num_gpus);
  MOESTAT_CHECK(num_replicas <= kMaxReplicas,
                "plan: {} replicas per layer is more than moestat plans for (at most {}, 14 "
                "times DeepSeek-V3's 288)",
                num_replicas, kMaxReplicas);
  MOESTAT_CHECK(num_replicas >= num_experts,
                "plan: {} replicas cannot hold {} logical experts (need replicas >= experts)",
                num_replicas, num_experts);
  MOESTAT_CHECK(num_replicas % num_gpus == 0, "plan: {} replicas do not divide evenly over {} GPUs",
                num_replicas, num_gpus);
  MOESTAT_CHECK(num_gpus % num_nodes == 0, "plan: {} GPUs do not divide evenly over {} nodes",
                num_gpus, num_nodes);
  if (hierarchical()) {
    MOESTAT_CHECK(num_experts % num_groups == 0,
                  "plan: {} experts do not divide into {} groups (hierarchical policy)",
                  num_experts, num_groups);
    MOESTAT_CHECK(num_replicas / num_nodes >= num_experts / num_nodes,
                  "plan: a node's {} slots cannot hold its {} experts", num_replicas / num_nodes,
                  num_experts / num_nodes);
  }
}

}  // namespace moestat::plan
