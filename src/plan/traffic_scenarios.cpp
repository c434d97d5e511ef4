// The simulator's scenarios from recorded workloads.
#include <fmt/format.h>

#include <moestat/error.hpp>
#include <moestat/plan/traffic_scenarios.hpp>

namespace moestat::plan {
namespace {

PassShape lasting(PassShape shape, std::int64_t num_passes) {
  shape.num_passes = num_passes;
  return shape;
}

}  // namespace

std::vector<WorkloadScenario> workload_scenarios(std::span<const NamedLoads> workloads,
                                                 const ScenarioOptions& options) {
  MOESTAT_CHECK(workloads.size() >= 2, "the scenarios need at least two workloads, got {}",
                workloads.size());
  const std::int64_t n = options.num_passes, half = n / 2;
  MOESTAT_CHECK(
      half >= 1 && options.alternate_every >= 1 && n / std::int64_t(workloads.size()) >= 1,
      "the scenarios need at least {} passes and phases of at least one pass (got {} "
      "passes, alternating every {})",
      2 * workloads.size(), n, options.alternate_every);
  const NamedLoads& a = workloads.front();
  const NamedLoads& b = workloads[workloads.size() / 2];
  const PassShape& base = options.shape;
  std::vector<WorkloadScenario> scenarios;

  scenarios.push_back({{.name = "steady",
                        .description = a.name + " throughout, from the trivial placement",
                        .phases = {make_phase(a.name, a.loads, lasting(base, n))}},
                       StartPlacement::kTrivial});
  scenarios.push_back(
      {{.name = "shift",
        .description = fmt::format("{}, then {} from pass {}", a.name, b.name, half),
        .phases = {make_phase(a.name, a.loads, lasting(base, half)),
                   make_phase(b.name, b.loads, lasting(base, n - half))}}});

  TrafficScenario alternate{.name = "alternate",
                            .description = fmt::format("{} and {} in turn every {} passes", a.name,
                                                       b.name, options.alternate_every)};
  for (std::int64_t start = 0; start < n; start += options.alternate_every) {
    const NamedLoads& w = (start / options.alternate_every) % 2 == 0 ? a : b;
    alternate.phases.push_back(
        make_phase(w.name, w.loads, lasting(base, std::min(options.alternate_every, n - start))));
  }
  scenarios.push_back({std::move(alternate)});

  const std::int64_t share = n / std::int64_t(workloads.size());
  TrafficScenario tour{
      .name = "tour",
      .description = fmt::format("every workload in turn, {} passes each (the last {})", share,
                                 n - share * std::int64_t(workloads.size() - 1))};
  for (const NamedLoads& w : workloads) {
    const bool last = &w == &workloads.back();
    tour.phases.push_back(
        make_phase(w.name, w.loads,
                   lasting(base, last ? n - share * std::int64_t(workloads.size() - 1) : share)));
  }
  scenarios.push_back({std::move(tour)});

  scenarios.push_back(
      {{.name = "noisy-shift",
        .description = fmt::format("shift with {} tokens per pass and jitter {}",
                                   options.noisy_shape.tokens_per_pass, options.noisy_shape.jitter),
        .phases = {make_phase(a.name, a.loads, lasting(options.noisy_shape, half)),
                   make_phase(b.name, b.loads, lasting(options.noisy_shape, n - half))}}});
  for (const WorkloadScenario& s : scenarios) s.traffic.validate();
  return scenarios;
}

Placement initial_placement(const WorkloadScenario& scenario, const EplbConfig& config) {
  scenario.traffic.validate();
  const ExpertLoads& first = scenario.traffic.phases.front().shares;
  if (scenario.start == StartPlacement::kTrivial) {
    config.validate(first.num_experts);
    return Placement::trivial(first.num_layers, config.num_replicas, first.num_experts);
  }
  return plan_moestat({&first, 1}, config);
}

}  // namespace moestat::plan
