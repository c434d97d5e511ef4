// Property tests of the planners on random loads and deployments: every plan is a valid
// placement that keeps the deployment's rules, and moestat's plan is never worse than the
// reference's in-sample, layer by layer.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <moestat/plan/eplb.hpp>
#include <moestat/plan/metrics.hpp>
#include <vector>

namespace moestat {
namespace {

/// A random deployment and matching loads (with ties and empty layers now and then).
struct Case {
  plan::EplbConfig config;
  plan::ExpertLoads loads;
};

rc::Gen<Case> random_case() {
  return rc::gen::exec([] {
    Case c;
    const auto num_nodes = *rc::gen::element<std::int64_t>(1, 2, 4);
    const auto gpus_per_node = *rc::gen::inRange<std::int64_t>(1, 5);
    const bool hierarchical = *rc::gen::arbitrary<bool>();
    const auto groups_per_node = *rc::gen::inRange<std::int64_t>(1, 4);
    // Hierarchical: groups divide by nodes. Global: they do not (or there is one node).
    const std::int64_t num_groups = hierarchical
                                        ? num_nodes * groups_per_node
                                        : (num_nodes == 1 ? 1 : num_nodes * groups_per_node + 1);
    const auto group_size = *rc::gen::inRange<std::int64_t>(1, 7);
    const std::int64_t num_experts = num_groups * group_size;
    const std::int64_t num_gpus = num_nodes * gpus_per_node;
    const std::int64_t slots_per_gpu =
        (num_experts + num_gpus - 1) / num_gpus + *rc::gen::inRange<std::int64_t>(0, 3);
    c.config = {num_gpus * slots_per_gpu, num_groups, num_nodes, num_gpus};
    c.loads.num_layers = *rc::gen::inRange<std::int64_t>(1, 4);
    c.loads.num_experts = num_experts;
    // Small ranges make ties; a zero range makes an empty (dense) layer.
    const auto max_load = *rc::gen::element<std::int64_t>(0, 3, 1000, 1000000);
    for (std::int64_t i = 0; i < c.loads.num_layers * num_experts; ++i) {
      c.loads.values.push_back(double(*rc::gen::inRange<std::int64_t>(0, max_load + 1)));
    }
    return c;
  });
}

/// The rules of the deployment, checked on `placement` directly.
void check_valid(const Placement& placement, const Case& c) {
  RC_ASSERT(placement.num_layers() == c.loads.num_layers);
  RC_ASSERT(placement.num_physical_experts() == c.config.num_replicas);
  RC_ASSERT(placement.num_logical_experts() == c.loads.num_experts);
  const std::int64_t P = c.config.num_replicas;
  const std::int64_t E = c.loads.num_experts;
  for (std::int64_t l = 0; l < c.loads.num_layers; ++l) {
    std::vector<std::int64_t> replicas(std::size_t(E), 0);
    for (std::int64_t p = 0; p < P; ++p) ++replicas[std::size_t(placement.logical_of(l, p))];
    for (std::int64_t e = 0; e < E; ++e) RC_ASSERT(replicas[std::size_t(e)] >= 1);
    if (!c.config.hierarchical()) continue;
    // Every replica of every expert of a group lies on one node.
    const std::int64_t group_size = E / c.config.num_groups;
    const std::int64_t slots_per_node = P / c.config.num_nodes;
    std::vector<std::int64_t> node_of_group(std::size_t(c.config.num_groups), -1);
    for (std::int64_t p = 0; p < P; ++p) {
      const std::int64_t group = placement.logical_of(l, p) / group_size;
      std::int64_t& node = node_of_group[std::size_t(group)];
      if (node < 0) node = p / slots_per_node;
      RC_ASSERT(node == p / slots_per_node);
    }
  }
}

RC_GTEST_PROP(PlanProperty, DeepseekPlansAreValid, ()) {
  const Case c = *random_case();
  check_valid(plan::plan_deepseek(c.loads, c.config), c);
}

RC_GTEST_PROP(PlanProperty, MoestatPlansAreValidAndNeverWorseInSample, ()) {
  const Case c = *random_case();
  const Placement reference = plan::plan_deepseek(c.loads, c.config);
  const Placement ours = plan::plan_moestat({&c.loads, 1}, c.config);
  check_valid(ours, c);
  const auto r = plan::evaluate_placement(c.loads, reference, c.config.num_gpus);
  const auto o = plan::evaluate_placement(c.loads, ours, c.config.num_gpus);
  for (std::size_t l = 0; l < r.layer_balancedness.size(); ++l) {
    RC_ASSERT(o.layer_balancedness[l] >= r.layer_balancedness[l] * (1.0 - 1e-12));
  }
}

RC_GTEST_PROP(PlanProperty, MoestatPlansForSeveralScenariosAreValid, ()) {
  const Case c = *random_case();
  // A second scenario: the same experts, loads reversed within each layer.
  plan::ExpertLoads other = c.loads;
  for (std::int64_t l = 0; l < other.num_layers; ++l) {
    auto first = other.values.begin() + std::ptrdiff_t(l * other.num_experts);
    std::reverse(first, first + std::ptrdiff_t(other.num_experts));
  }
  const std::vector<plan::ExpertLoads> scenarios{c.loads, other};
  for (const auto objective :
       {plan::ScenarioObjective::kExpected, plan::ScenarioObjective::kWorstCase}) {
    check_valid(plan::plan_moestat(scenarios, c.config, {.objective = objective}), c);
  }
}

}  // namespace
}  // namespace moestat
