// The simulator's scenarios built from recorded workloads: a steady workload, one lasting
// shift, two workloads alternating, a tour of all of them, and the shift under heavy noise.
//
//   std::vector<plan::WorkloadScenario> s = plan::workload_scenarios(workloads, {});
//   Placement start = plan::initial_placement(s[0], config);
#pragma once

#include <cstdint>
#include <moestat/placement.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/traffic.hpp>
#include <span>
#include <string>
#include <vector>

namespace moestat::plan {

/// A recorded workload: [L, E] loads (a statistics file summed) and what to call it.
struct NamedLoads {
  std::string name{};
  ExpertLoads loads{};
};

struct ScenarioOptions {
  /// Passes of the steady and shift scenarios; the others last as long (their phases
  /// divide it).
  std::int64_t num_passes = 4000;
  PassShape shape{};  ///< Tokens, top-k and jitter of every phase but the noisy ones.
  PassShape noisy_shape{.tokens_per_pass = 1024, .jitter = 0.2};
  std::int64_t alternate_every = 500;  ///< Passes per phase of the alternating scenario.
};

/// Where a scenario's deployment starts.
enum class StartPlacement : std::uint8_t {
  kTrivial,         ///< Slot p holds expert p % E: a fresh deployment.
  kFirstPhasePlan,  ///< plan_moestat on the first phase: it profiled the traffic it starts with.
};

struct WorkloadScenario {
  TrafficScenario traffic{};
  StartPlacement start = StartPlacement::kFirstPhasePlan;
};

/// Five scenarios over `workloads` (at least two; a = the first, b = the one in the middle,
/// workloads[size / 2]):
/// - `steady`: a throughout, from the trivial placement (a fresh deployment);
/// - `shift`: a for half the passes, then b;
/// - `alternate`: a and b in turn every `alternate_every` passes;
/// - `tour`: every workload in order, an equal share of the passes each;
/// - `noisy-shift`: `shift` drawn with `noisy_shape` (small batches, strong jitter).
/// All but `steady` start from the moestat plan of their first phase (a deployment that
/// profiled the traffic it starts with). moestat::Error on fewer than two workloads, loads
/// of different shapes, or sizes below 1.
std::vector<WorkloadScenario> workload_scenarios(std::span<const NamedLoads> workloads,
                                                 const ScenarioOptions& options);

/// The placement `scenario` starts from under `config`. moestat::Error on an invalid config.
Placement initial_placement(const WorkloadScenario& scenario, const EplbConfig& config);

}  // namespace moestat::plan
