// Property tests of the planners on random loads and deployments: every plan is a valid
// placement that keeps the deployment's rules, moestat's plan is never worse than the
// reference's in-sample, layer by layer, and neither beats the balancedness bound.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <moestat/plan/bound.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/metrics.hpp>
#include <numeric>
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
    std::vector<std::int64_t> replicas(static_cast<std::size_t>(E), 0);
    for (std::int64_t p = 0; p < P; ++p) ++replicas[std::size_t(placement.logical_of(l, p))];
    for (std::int64_t e = 0; e < E; ++e) RC_ASSERT(replicas[std::size_t(e)] >= 1);
    if (!c.config.hierarchical()) continue;
    // Every replica of every expert of a group lies on one node.
    const std::int64_t group_size = E / c.config.num_groups;
    const std::int64_t slots_per_node = P / c.config.num_nodes;
    std::vector<std::int64_t> node_of_group(static_cast<std::size_t>(c.config.num_groups), -1);
    for (std::int64_t p = 0; p < P; ++p) {
      const std::int64_t group = placement.logical_of(l, p) / group_size;
      std::int64_t& node = node_of_group[std::size_t(group)];
      if (node < 0) node = p / slots_per_node;
      RC_ASSERT(node == p / slots_per_node);
    }
  }
}

// ---- eplb.py written plainly: the oracle of plan_deepseek's tie order ----

/// Items heaviest first as PyTorch's CPU sort leaves them (std::sort on (value, index) pairs
/// with a value-only comparison), each into the lightest pack with room, lowest index first.
void plain_packing(const std::vector<float>& weight, std::int64_t num_packs,
                   std::vector<std::int64_t>& pack_of, std::vector<std::int64_t>& rank) {
  const auto n = std::int64_t(weight.size());
  const std::int64_t capacity = n / num_packs;
  pack_of.assign(weight.size(), 0);
  rank.assign(weight.size(), 0);
  if (capacity == 1) {
    std::iota(pack_of.begin(), pack_of.end(), 0);
    return;
  }
  std::vector<std::pair<float, std::int64_t>> order;
  for (std::int64_t i = 0; i < n; ++i) order.emplace_back(weight[std::size_t(i)], i);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<float> load(static_cast<std::size_t>(num_packs), 0.0F);
  std::vector<std::int64_t> items(static_cast<std::size_t>(num_packs), 0);
  for (const auto& [value, i] : order) {
    std::int64_t best = -1;
    for (std::int64_t p = 0; p < num_packs; ++p) {
      if (items[std::size_t(p)] < capacity &&
          (best < 0 || load[std::size_t(p)] < load[std::size_t(best)])) {
        best = p;
      }
    }
    pack_of[std::size_t(i)] = best;
    rank[std::size_t(i)] = items[std::size_t(best)]++;
    load[std::size_t(best)] += value;
  }
}

/// One layer of eplb.py: the physical_to_logical row. Group sums are exact here (small
/// integer loads), so their order does not matter.
std::vector<std::int32_t> plain_eplb_layer(const std::vector<float>& w, const plan::EplbConfig& c) {
  const auto E = std::int64_t(w.size());
  const std::int64_t G = c.hierarchical() ? c.num_groups : 1;
  const std::int64_t N = c.hierarchical() ? c.num_nodes : 1;
  const std::int64_t group_size = E / G, experts_per_node = E / N;
  const std::int64_t slots_per_node = c.num_replicas / N, slots_per_gpu = c.slots_per_gpu();
  std::vector<float> group(static_cast<std::size_t>(G), 0.0F);
  for (std::int64_t e = 0; e < E; ++e) group[std::size_t(e / group_size)] += w[std::size_t(e)];
  std::vector<std::int64_t> pack_of, rank;
  plain_packing(group, N, pack_of, rank);
  std::vector<std::int64_t> mlog2log(static_cast<std::size_t>(E));
  for (std::int64_t g = 0; g < G; ++g) {
    const std::int64_t first =
        (pack_of[std::size_t(g)] * (G / N) + rank[std::size_t(g)]) * group_size;
    for (std::int64_t k = 0; k < group_size; ++k)
      mlog2log[std::size_t(first + k)] = g * group_size + k;
  }
  std::vector<std::int32_t> row(static_cast<std::size_t>(c.num_replicas));
  for (std::int64_t node = 0; node < N; ++node) {
    std::vector<float> load(static_cast<std::size_t>(experts_per_node));
    for (std::int64_t j = 0; j < experts_per_node; ++j) {
      load[std::size_t(j)] = w[std::size_t(mlog2log[std::size_t(node * experts_per_node + j)])];
    }
    std::vector<std::int64_t> phy2mlog(static_cast<std::size_t>(slots_per_node));
    std::vector<std::int64_t> count(static_cast<std::size_t>(experts_per_node), 1);
    std::iota(phy2mlog.begin(), phy2mlog.begin() + experts_per_node, 0);
    for (std::int64_t slot = experts_per_node; slot < slots_per_node; ++slot) {
      std::int64_t best = 0;  // the largest load / replicas, lowest index among equals
      for (std::int64_t j = 1; j < experts_per_node; ++j) {
        if (load[std::size_t(j)] / float(count[std::size_t(j)]) >
            load[std::size_t(best)] / float(count[std::size_t(best)])) {
          best = j;
        }
      }
      phy2mlog[std::size_t(slot)] = best;
      ++count[std::size_t(best)];
    }
    std::vector<float> replica_load(static_cast<std::size_t>(slots_per_node));
    for (std::int64_t i = 0; i < slots_per_node; ++i) {
      const std::int64_t m = phy2mlog[std::size_t(i)];
      replica_load[std::size_t(i)] = load[std::size_t(m)] / float(count[std::size_t(m)]);
    }
    plain_packing(replica_load, c.num_gpus / N, pack_of, rank);
    for (std::int64_t i = 0; i < slots_per_node; ++i) {
      const std::int64_t slot = pack_of[std::size_t(i)] * slots_per_gpu + rank[std::size_t(i)];
      row[std::size_t(node * slots_per_node + slot)] =
          std::int32_t(mlog2log[std::size_t(node * experts_per_node + phy2mlog[std::size_t(i)])]);
    }
  }
  return row;
}

/// plan_deepseek against the plain port, layer by layer.
void check_matches_plain_port(const plan::ExpertLoads& loads, const plan::EplbConfig& config) {
  const Placement ours = plan::plan_deepseek(loads, config);
  for (std::int64_t l = 0; l < loads.num_layers; ++l) {
    std::vector<float> w(static_cast<std::size_t>(loads.num_experts));
    for (std::int64_t e = 0; e < loads.num_experts; ++e) w[std::size_t(e)] = float(loads.at(l, e));
    const std::vector<std::int32_t> want = plain_eplb_layer(w, config);
    const auto row = ours.physical_to_logical().subspan(std::size_t(l * config.num_replicas),
                                                        std::size_t(config.num_replicas));
    RC_ASSERT(std::ranges::equal(row, want));
  }
}

RC_GTEST_PROP(PlanProperty, DeepseekEqualsAPlainPortOfTheReference, ()) {
  const Case c = *random_case();
  check_matches_plain_port(c.loads, c.config);
}

// DeepSeek-V3's shape with loads in 0..max: hundreds of equal values between different
// experts, where introsort's order of ties differs from a stable sort's.
RC_GTEST_PROP(PlanProperty, DeepseekKeepsTheReferencesTieOrderAtDeepseekShape, ()) {
  plan::ExpertLoads loads{2, 256, {}};
  const auto max_load = *rc::gen::element<std::int64_t>(1, 3, 20, 1000000);
  for (std::int64_t i = 0; i < loads.num_layers * loads.num_experts; ++i) {
    loads.values.push_back(double(*rc::gen::inRange<std::int64_t>(0, max_load + 1)));
  }
  const auto config =
      *rc::gen::element(plan::EplbConfig{288, 8, 4, 32}, plan::EplbConfig{288, 1, 1, 72},
                        plan::EplbConfig{256, 1, 1, 8});
  check_matches_plain_port(loads, config);
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

// The bound over every assignment of groups to nodes is at least the bound with moestat's
// nodes, which is at least moestat's balancedness; the reference stays under the first.
RC_GTEST_PROP(PlanProperty, NoPlanBeatsTheBound, ()) {
  const Case c = *random_case();
  const Placement reference = plan::plan_deepseek(c.loads, c.config);
  const Placement ours = plan::plan_moestat({&c.loads, 1}, c.config);
  const auto bound = plan::balancedness_bound(c.loads, c.config).layer_balancedness;
  const auto given_nodes = plan::balancedness_bound(c.loads, c.config, ours).layer_balancedness;
  const auto r = plan::evaluate_placement(c.loads, reference, c.config.num_gpus);
  const auto o = plan::evaluate_placement(c.loads, ours, c.config.num_gpus);
  constexpr double kSlack = 1.0 + 1e-12;
  for (std::size_t l = 0; l < bound.size(); ++l) {
    RC_ASSERT(r.layer_balancedness[l] <= bound[l] * kSlack);
    RC_ASSERT(o.layer_balancedness[l] <= given_nodes[l] * kSlack);
    RC_ASSERT(given_nodes[l] <= bound[l] * kSlack);
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
