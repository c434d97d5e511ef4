// Per-pass GPU loads of a recorder's new passes, reduced where the counts are: what a live
// reader of a running recorder needs (Recorder::gpu_loads_since), without the passes'
// [L, P] rows.
//
//   moestat::GpuLoadsSince loads;  // generation 0, arrival 0: from the first pass
//   for (;;) {
//     loads = recorder.gpu_loads_since(loads.generation, loads.next_arrival(), 8);
//     use(loads.balancedness);  // loads.size() passes; loads.gpu_loads holds [n, L, 8]
//   }
#pragma once

#include <cstdint>
#include <moestat/snapshot.hpp>
#include <span>
#include <vector>

namespace moestat {

/// The passes that reached a recorder's pass window from a given arrival on (as in
/// PassesSince: the same arrivals, generation, rows and tallies), each reduced to its GPU loads
/// and balancedness, with their logical counts summed. Physical slot p is on GPU p / (P / G).
struct GpuLoadsSince : PassRows, RecordTallies, ArrivalRange {
  std::int64_t num_layers = 0;           ///< L
  std::int64_t num_logical_experts = 0;  ///< E
  std::int64_t num_gpus = 0;             ///< G

  /// [n, L, G] gpu_loads[(i * L + l) * G + g] means the token assignments of pass i's layer l
  /// to the slots on GPU g.
  std::vector<std::int64_t> gpu_loads;
  /// [n] pass_balancedness of each pass's [L, G] loads.
  std::vector<double> balancedness;
  /// [L, E] logical counts summed over the n passes (each pass under the placement in force
  /// for it); zeros when n is 0.
  std::vector<std::int64_t> logical_totals;

  /// Passes read (n).
  std::int64_t size() const noexcept { return std::int64_t(pass_ids.size()); }
  /// Arrival number of the next pass: the one to ask for next time.
  std::int64_t next_arrival() const noexcept { return first_arrival + size(); }

  friend bool operator==(const GpuLoadsSince&, const GpuLoadsSince&) = default;
};

/// Physical slots per GPU (P / G) when `num_gpus` GPUs share `num_physical_experts` slots.
/// moestat::Error unless num_gpus >= 1 divides num_physical_experts.
std::int64_t slots_per_gpu(std::int64_t num_physical_experts, std::int64_t num_gpus);

/// Rows of slot counts summed by GPU: `physical_counts` holds rows of `num_physical_experts`
/// (a pass's layers, or passes' [n, L, P]); the result holds rows of `num_gpus`, row r's
/// GPU g the sum of row r's slots [g * P / G, (g + 1) * P / G). Checked as slots_per_gpu, and
/// the counts must fill whole rows.
std::vector<std::int64_t> gpu_loads_of_counts(std::span<const std::int64_t> physical_counts,
                                              std::int64_t num_physical_experts,
                                              std::int64_t num_gpus);

/// Per-pass balancedness as SGLang computes it: for each of the L layers of `gpu_loads`
/// ([L, G]), (mean + 1e-5) / (max + 1e-5) of its GPU loads, averaged over all layers (a layer
/// without load, dense ones included, scores 1).
double pass_balancedness(std::span<const std::int64_t> gpu_loads, std::int64_t num_gpus);

/// The rows of `passes` reduced on the host for `num_gpus` GPUs (checked as slots_per_gpu):
/// what Recorder::gpu_loads_since returns for the same read.
GpuLoadsSince gpu_loads_of(const PassesSince& passes, std::int64_t num_gpus);

}  // namespace moestat
