// Internal: per-GPU loads and balancedness of a placement, for the reports.
// NOTE: a STAND-IN for moestat::plan's metrics (include/moestat/plan/metrics.hpp, built on
// another branch); at merge these functions should call that module instead. Definitions
// follow it: an expert's load is split evenly over its replicas, physical slot p sits on
// GPU p / (P / num_gpus), balancedness = mean over layers with load of mean / max GPU load.
#pragma once

#include <cstdint>
#include <moestat/placement.hpp>
#include <span>
#include <vector>

namespace moestat::report::detail {

/// [L, num_gpus] loads per GPU of `loads` ([L, E] logical) under `placement`.
std::vector<double> gpu_loads(std::span<const std::int64_t> loads, const Placement& placement,
                              std::int64_t num_gpus);

/// [L] mean / max GPU load of each layer; -1 for layers without load.
std::vector<double> layer_balancedness(std::span<const double> gpu_loads, std::int64_t num_layers,
                                       std::int64_t num_gpus);

/// Mean of the non-negative entries of `layer_balancedness`; 1 when there are none.
double balancedness(std::span<const double> layer_balancedness);

/// Expert e of every layer on its own slot e, so on GPU e / (E / num_gpus).
Placement identity_placement(std::int64_t num_layers, std::int64_t num_experts);

}  // namespace moestat::report::detail
