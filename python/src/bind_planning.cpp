// Planners, balance metrics and hot-expert masks on numpy (or torch CPU) load matrices.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <moestat/error.hpp>
#include <moestat/gpu_loads.hpp>
#include <moestat/plan/advisor.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/hot_experts.hpp>
#include <moestat/plan/loads.hpp>
#include <moestat/plan/metrics.hpp>

#include "arrays.hpp"
#include "bindings.hpp"

namespace moestat::python {

using namespace nb::literals;

namespace {

/// [L, E] loads from any CPU array of numbers.
plan::ExpertLoads loads_of(const AnyArray& array, std::string_view what) {
  std::vector<std::int64_t> shape;
  plan::ExpertLoads loads;
  loads.values = doubles_of(array, what, shape);
  MOESTAT_CHECK(shape.size() == 2, "{}: expected [layers, experts], got {} axes", what,
                shape.size());
  loads.num_layers = shape[0];
  loads.num_experts = shape[1];
  loads.validate();
  return loads;
}

/// One [L, E] matrix or a stack [S, L, E] of scenarios.
std::vector<plan::ExpertLoads> scenarios_of(const AnyArray& array) {
  std::vector<std::int64_t> shape;
  const std::vector<double> values = doubles_of(array, "loads", shape);
  MOESTAT_CHECK(shape.size() == 2 || shape.size() == 3,
                "loads: expected [layers, experts] or [scenarios, layers, experts], got {} axes",
                shape.size());
  const bool stacked = shape.size() == 3;
  const std::int64_t num_scenarios = stacked ? shape[0] : 1;
  const std::int64_t num_layers = shape[stacked ? 1 : 0];
  const std::int64_t num_experts = shape[stacked ? 2 : 1];
  const auto size = std::size_t(num_layers * num_experts);
  MOESTAT_CHECK(num_scenarios > 0 && size > 0, "loads: no scenario");
  std::vector<plan::ExpertLoads> out;
  for (std::size_t first = 0; first < values.size(); first += size) {
    out.push_back({num_layers, num_experts,
                   std::vector<double>(values.begin() + std::ptrdiff_t(first),
                                       values.begin() + std::ptrdiff_t(first + size))});
    out.back().validate();
  }
  return out;
}

/// `shape` with its last axis `last` (and as numpy wants it).
std::vector<std::size_t> with_last_axis(const std::vector<std::int64_t>& shape, std::int64_t last) {
  std::vector<std::size_t> out(shape.begin(), shape.end());
  out.back() = std::size_t(last);
  return out;
}

/// [..., L, G] GPU loads, at least two axes.
std::vector<double> gpu_loads_array(const AnyArray& array, std::vector<std::int64_t>& shape) {
  std::vector<double> loads = doubles_of(array, "gpu_loads", shape);
  MOESTAT_CHECK(shape.size() >= 2, "gpu_loads: expected [..., layers, gpus], got {} axes",
                shape.size());
  return loads;
}

plan::EplbConfig config_of(std::int64_t num_replicas, std::int64_t num_groups,
                           std::int64_t num_nodes, std::int64_t num_gpus) {
  return {.num_replicas = num_replicas,
          .num_groups = num_groups,
          .num_nodes = num_nodes,
          .num_gpus = num_gpus};
}

nb::dict report_dict(const plan::BalanceReport& report) {
  nb::dict result;
  result["num_loaded_layers"] = report.num_loaded_layers;
  result["balancedness"] = report.balancedness;
  result["balancedness_sum_ratio"] = report.balancedness_sum_ratio;
  result["imbalance"] = report.imbalance;
  result["worst_layer"] = report.worst_layer;
  result["worst_balancedness"] = report.worst_balancedness;
  result["layer_balancedness"] =
      to_numpy(report.layer_balancedness, {report.layer_balancedness.size()});
  return result;
}

/// A recent window [passes, layers, experts] of any non-negative numbers, kept as loads (the
/// advisor weighs passes by them, whole or not).
CountWindow window_of(const AnyArray& array) {
  std::vector<std::int64_t> shape;
  CountWindow window{.has_window_axis = true};
  window.fractional_counts = doubles_of(array, "counts", shape);
  MOESTAT_CHECK(shape.size() == 3, "counts: expected [passes, layers, experts], got {} axes",
                shape.size());
  window.window_size = shape[0];
  window.num_layers = shape[1];
  window.num_experts = shape[2];
  return window;
}

nb::dict estimate_dict(const plan::Estimate& estimate) {
  nb::dict result;
  result["value"] = estimate.value;
  result["low"] = estimate.low;
  result["high"] = estimate.high;
  return result;
}

nb::dict advice_dict(plan::RebalanceAdvice& advice) {
  nb::list candidates;
  for (plan::RebalanceCandidate& c : advice.candidates) {
    nb::dict candidate;
    candidate["target_balancedness"] = c.target_balancedness;
    candidate["placement"] = std::move(c.placement);
    candidate["moved_experts"] = c.moved_experts;
    candidate["max_moved_per_gpu"] = c.max_moved_per_gpu;
    candidate["balancedness_after"] = estimate_dict(c.balancedness_after);
    candidate["gain_seconds"] = estimate_dict(c.gain_seconds);
    candidate["move_seconds"] = c.move_seconds;
    candidate["net_gain_seconds"] = estimate_dict(c.net_gain_seconds);
    candidates.append(candidate);
  }
  std::vector<std::int64_t> moves;
  for (const plan::SlotMove& m : advice.moves)
    moves.insert(moves.end(), {m.layer, m.slot, m.from, m.to});
  const std::size_t num_moves = advice.moves.size();
  nb::dict result;
  result["rebalance"] = advice.rebalance;
  result["reason"] = advice.reason;
  result["balancedness_now"] = estimate_dict(advice.balancedness_now);
  result["best"] = advice.best;
  result["placement"] = std::move(advice.placement);
  result["moves"] = to_numpy(std::move(moves), {num_moves, 4});
  result["candidates"] = candidates;
  result["num_planning_passes"] = advice.num_planning_passes;
  result["num_evaluation_passes"] = advice.num_evaluation_passes;
  result["traffic_first_pass"] = advice.traffic_first_pass;
  result["traffic_regimes"] = advice.traffic_regimes;
  result["traffic_recurs"] = advice.traffic_recurs;
  return result;
}

}  // namespace

void bind_planning(nb::module_& module) {
  module.def(
      "plan_deepseek",
      [](const AnyArray& loads, std::int64_t num_replicas, std::int64_t num_groups,
         std::int64_t num_nodes, std::int64_t num_gpus) {
        const plan::ExpertLoads matrix = loads_of(loads, "loads");
        nb::gil_scoped_release unlocked;
        return plan::plan_deepseek(matrix,
                                   config_of(num_replicas, num_groups, num_nodes, num_gpus));
      },
      "loads"_a, "num_replicas"_a, "num_groups"_a, "num_nodes"_a, "num_gpus"_a,
      "DeepSeek's EPLB (eplb.py rebalance_experts), reproduced exactly, on [layers, experts] "
      "loads; returns a Placement. num_replicas: physical slots per layer (a multiple of "
      "num_gpus); num_groups divides the experts; num_nodes divides num_gpus. Hierarchical "
      "when num_groups % num_nodes == 0, else global, as eplb.py decides.");
  module.def(
      "plan_moestat",
      [](const AnyArray& loads, std::int64_t num_replicas, std::int64_t num_groups,
         std::int64_t num_nodes, std::int64_t num_gpus, const std::string& objective,
         std::int64_t max_moves_per_layer) {
        const std::vector<plan::ExpertLoads> scenarios = scenarios_of(loads);
        MOESTAT_CHECK(objective == "expected" || objective == "worst_case",
                      "objective: '{}' is neither 'expected' nor 'worst_case'", objective);
        const plan::MoestatPlanOptions options{
            .objective = objective == "expected" ? plan::ScenarioObjective::kExpected
                                                 : plan::ScenarioObjective::kWorstCase,
            .max_moves_per_layer = max_moves_per_layer};
        nb::gil_scoped_release unlocked;
        return plan::plan_moestat(
            scenarios, config_of(num_replicas, num_groups, num_nodes, num_gpus), options);
      },
      "loads"_a, "num_replicas"_a, "num_groups"_a, "num_nodes"_a, "num_gpus"_a, nb::kw_only(),
      "objective"_a = "expected", "max_moves_per_layer"_a = 0,
      "moestat's planner: the same constraints as plan_deepseek, never worse in-sample on one "
      "[layers, experts] matrix; a stack [scenarios, layers, experts] is planned for all "
      "of them (objective 'expected' or 'worst_case'). Returns a Placement.");
  module.def(
      "evaluate_placement",
      [](const AnyArray& loads, const Placement& placement, std::int64_t num_gpus) {
        return report_dict(plan::evaluate_placement(loads_of(loads, "loads"), placement, num_gpus));
      },
      "loads"_a, "placement"_a, "num_gpus"_a,
      "Balance of placement under [layers, experts] loads over num_gpus GPUs: a dict of "
      "balancedness (SGLang's mean/max), balancedness_sum_ratio (vLLM's), imbalance "
      "(TensorRT-LLM's), worst_layer, worst_balancedness and layer_balancedness [L]. Layers "
      "without load are left out of the means.");
  module.def(
      "gpu_loads",
      [](const AnyArray& physical_counts, std::int64_t num_gpus) {
        std::vector<std::int64_t> shape;
        const std::vector<std::int64_t> counts =
            counts_of_array(physical_counts, "physical_counts", shape);
        MOESTAT_CHECK(!shape.empty(), "physical_counts: expected [..., slots], got a scalar");
        return to_numpy(gpu_loads_of_counts(counts, shape.back(), num_gpus),
                        with_last_axis(shape, num_gpus));
      },
      "physical_counts"_a, "num_gpus"_a,
      "[..., slots] counts -> [..., num_gpus] int64 loads: slot p is on GPU p / (slots / "
      "num_gpus), as SGLang and vLLM place them. Raises moestat.Error unless num_gpus divides "
      "the slots.");
  module.def(
      "placement_gpu_loads",
      [](const AnyArray& loads, const Placement& placement, std::int64_t num_gpus) {
        const plan::ExpertLoads matrix = loads_of(loads, "loads");
        return to_numpy(plan::gpu_loads(matrix, placement, num_gpus),
                        {std::size_t(matrix.num_layers), std::size_t(num_gpus)});
      },
      "loads"_a, "placement"_a, "num_gpus"_a,
      "[layers, num_gpus] float64: each GPU's load under placement, an expert's load split "
      "evenly over its replicas (vLLM's rank loads).");
  module.def(
      "balancedness_sum_ratio",
      [](const AnyArray& gpu_loads) -> nb::object {
        std::vector<std::int64_t> shape;
        const std::vector<double> loads = gpu_loads_array(gpu_loads, shape);
        const std::int64_t num_gpus = shape.back();
        const std::int64_t pass_size = shape[shape.size() - 2] * num_gpus;
        MOESTAT_CHECK(pass_size > 0, "gpu_loads: no layer or no GPU (shape ends {} x {})",
                      shape[shape.size() - 2], num_gpus);
        std::vector<double> values;
        for (std::size_t first = 0; first < loads.size(); first += std::size_t(pass_size)) {
          values.push_back(plan::balancedness_sum_ratio(
              std::span(loads).subspan(first, std::size_t(pass_size)), num_gpus));
        }
        if (shape.size() == 2) return nb::float_(values.front());
        return to_numpy(std::move(values),
                        std::vector<std::size_t>(shape.begin(), shape.end() - 2));
      },
      "gpu_loads"_a,
      "vLLM's balancedness of [..., layers, gpus] loads: the sum over layers of the mean GPU "
      "load over the sum over layers of the max, 0 without load; a float for [layers, gpus], "
      "float64 [...] for more axes.");
  module.def(
      "expert_gini",
      [](const AnyArray& loads) { return plan::mean_expert_gini(loads_of(loads, "loads")); },
      "loads"_a, "Mean over loaded layers of the Gini coefficient of the experts' loads.");
  module.def(
      "hot_expert_mask",
      [](const AnyArray& loads, std::int64_t per_layer, const std::string& strategy,
         std::uint64_t seed) {
        const plan::ExpertLoads matrix = loads_of(loads, "loads");
        const ExpertMask mask = plan::choose_hot_experts(
            matrix, plan::hot_expert_budget_per_layer(matrix, per_layer),
            {.strategy = plan::parse_hot_expert_strategy(strategy), .seed = seed});
        return to_numpy_bool(mask.on_gpu,
                             {std::size_t(mask.num_layers), std::size_t(mask.num_experts)});
      },
      "loads"_a, "gpu_experts_per_layer"_a, nb::kw_only(), "strategy"_a = "layer-balanced",
      "seed"_a = 0,
      "Which experts live on the GPU in CPU/GPU hybrid inference: [layers, experts] bool, "
      "True = GPU, with gpu_experts_per_layer x MoE layers GPU experts in all. strategy: "
      "'uniform', 'front-loading', 'random', 'frequency' (KTransformers') or "
      "'layer-balanced'.");
  module.def(
      "hot_expert_hit_rate",
      [](const AnyArray& loads, const AnyArray& mask) {
        std::vector<std::int64_t> shape;
        const std::vector<double> values = doubles_of(mask, "mask", shape);
        std::vector<std::uint8_t> on_gpu(values.size());
        for (std::size_t i = 0; i < values.size(); ++i) on_gpu[i] = values[i] != 0.0;
        return plan::hot_expert_hit_rate(loads_of(loads, "loads"), on_gpu);
      },
      "loads"_a, "mask"_a, "Share of the assignments served by experts the mask puts on the GPU.");
  module.def(
      "advise_rebalance",
      [](const Placement& current, const AnyArray& counts, std::int64_t num_gpus,
         double seconds_per_balanced_pass, std::int64_t horizon_passes, std::int64_t num_groups,
         std::int64_t num_nodes, double bytes_per_expert, double link_bytes_per_second,
         double seconds_per_expert, std::vector<double> targets, std::int64_t num_bootstrap,
         double confidence, std::uint64_t seed, bool require_confident_gain,
         double min_balancedness_gain, std::int64_t min_evaluation_passes, bool follow_regimes,
         std::int64_t max_scenarios) {
        const CountWindow window = window_of(counts);
        const plan::AdvisorOptions options{
            .seconds_per_balanced_pass = seconds_per_balanced_pass,
            .horizon_passes = horizon_passes,
            .move_cost = {.bytes_per_expert = bytes_per_expert,
                          .link_bytes_per_second = link_bytes_per_second,
                          .seconds_per_expert = seconds_per_expert},
            .targets = std::move(targets),
            .num_bootstrap = num_bootstrap,
            .confidence = confidence,
            .seed = seed,
            .require_confident_gain = require_confident_gain,
            .min_balancedness_gain = min_balancedness_gain,
            .min_evaluation_passes = min_evaluation_passes,
            .follow_regimes = follow_regimes,
            .regimes = {},
            .max_scenarios = max_scenarios,
            .planner = {}};
        plan::RebalanceAdvice advice = [&] {
          nb::gil_scoped_release unlocked;
          return plan::advise_rebalance(
              current, window,
              config_of(current.num_physical_experts(), num_groups, num_nodes, num_gpus), options);
        }();
        return advice_dict(advice);
      },
      "placement"_a, "counts"_a, "num_gpus"_a, nb::kw_only(), "seconds_per_balanced_pass"_a,
      "horizon_passes"_a, "num_groups"_a = 1, "num_nodes"_a = 1, "bytes_per_expert"_a = 0.0,
      "link_bytes_per_second"_a = 0.0, "seconds_per_expert"_a = 0.0,
      "targets"_a = plan::AdvisorOptions{}.targets,
      "num_bootstrap"_a = plan::AdvisorOptions{}.num_bootstrap,
      "confidence"_a = plan::AdvisorOptions{}.confidence, "seed"_a = 0,
      "require_confident_gain"_a = false,
      "min_balancedness_gain"_a = plan::AdvisorOptions{}.min_balancedness_gain,
      "min_evaluation_passes"_a = plan::AdvisorOptions{}.min_evaluation_passes,
      "follow_regimes"_a = true, "max_scenarios"_a = plan::AdvisorOptions{}.max_scenarios,
      "Whether rebalancing the placement in force pays for the expert weights it moves, from "
      "recent counts [passes, layers, experts] (at least 2 passes with load). A pass's MoE "
      "time is seconds_per_balanced_pass / served balancedness; a plan's gain is that time "
      "saved over horizon_passes, its cost bytes_per_expert x (most slots one GPU refills) / "
      "link_bytes_per_second + seconds_per_expert x slots refilled. Candidates: one "
      "movement-aware replan per target. The traffic planned for is the regime running now, "
      "or every regime since the current one first ran when it returns (follow_regimes; "
      "False: the whole window). Estimates are planned on the older half of its passes and "
      "judged on the newer, with a seeded bootstrap interval over passes; fewer than "
      "min_evaluation_passes to judge on, or a lift in balancedness below "
      "min_balancedness_gain, keeps the placement. Returns a dict: rebalance, reason, "
      "balancedness_now {value, low, high}, best, placement (to run), moves [M, 4] int64 "
      "(layer, slot, from expert, to expert), candidates (dicts), num_planning_passes, "
      "num_evaluation_passes, traffic_first_pass, traffic_regimes, traffic_recurs. See "
      "docs/placement.md.");
}

}  // namespace moestat::python
