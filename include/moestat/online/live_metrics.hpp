// Live metrics of a running recorder: per-pass GPU balancedness and its rolling means, GPU
// loads per layer, hottest experts, dropped ids and passes, and a check that every MoE layer
// was counted in every pass.
//
//   moestat::online::LiveMetrics metrics(recorder, {.layer_names = names});
//   moestat::online::MetricValues values = metrics.update();  // any thread, any time
//   fmt::print("{}\n", values.balancedness_means[0].value);   // last 10 passes
#pragma once

#include <cstdint>
#include <deque>
#include <moestat/gpu_loads.hpp>
#include <moestat/recorder.hpp>
#include <mutex>
#include <string>
#include <vector>

namespace moestat::online {

/// Lengths of the rolling means of per-pass balancedness, as SGLang keeps them.
inline constexpr std::int64_t kBalancednessWindows[] = {10, 100, 1000};

struct LiveMetricsOptions {
  /// GPUs the physical slots are spread over (slot p on GPU p / (P / num_gpus));
  /// 0 takes the topology's ep_size. Must divide P.
  std::int64_t num_gpus = 0;
  /// How many (layer, expert) pairs `hottest_experts` lists.
  std::int64_t num_hottest_experts = 10;
  /// [L] names for the `layer` label and the coverage report (a module path, say);
  /// empty: the decimal layer index.
  std::vector<std::string> layer_names = {};
};

/// One logical expert of one layer and the assignments it got over the recorder's window.
struct HotExpert {
  std::int64_t layer = 0;
  std::int64_t expert = 0;
  std::int64_t assignments = 0;
  friend bool operator==(const HotExpert&, const HotExpert&) = default;
};

/// The mean balancedness of the last `window` passes (fewer while fewer were observed).
struct BalancednessMean {
  std::int64_t window = 0;      ///< Passes the mean is over at most (10, 100, 1000).
  std::int64_t num_passes = 0;  ///< Passes it is over now: min(window, passes observed).
  double value = 0.0;           ///< 0 before any pass.
};

/// What one update of LiveMetrics reads. Its own counters (passes observed and unobserved,
/// GPU assignments, uncovered passes) only grow while the LiveMetrics lives; the recorder's
/// (passes recorded and dropped, dropped ids) restart with the recorder; the gauges describe
/// the latest observed pass.
struct MetricValues {
  std::int64_t num_layers = 0;           ///< L, dense layers included.
  std::int64_t num_gpus = 0;             ///< G.
  std::vector<std::string> layer_names;  ///< [L]
  std::vector<bool> moe_layers;          ///< [L]

  std::int64_t passes_recorded = 0;    ///< Passes the recorder holds since its start().
  std::int64_t passes_observed = 0;    ///< Passes folded into these metrics.
  std::int64_t passes_unobserved = 0;  ///< Passes that left the window before an update.
  std::int64_t passes_dropped = 0;     ///< Passes the recorder lost (its dropped_passes).
  std::int64_t dropped_ids = 0;        ///< Ids outside [0, P) the recorder ignored.

  /// The latest observed pass: its id, its balancedness, its GPU loads [L, G] (token
  /// assignments; zero before any pass).
  std::int64_t last_pass_id = -1;
  double last_pass_balancedness = 0.0;
  std::vector<std::int64_t> last_pass_gpu_loads;
  /// [L, G] assignments summed over every observed pass.
  std::vector<std::int64_t> gpu_assignments_total;
  /// One per kBalancednessWindows entry, in that order.
  std::vector<BalancednessMean> balancedness_means;
  /// [L] observed passes in which the MoE layer counted nothing while another layer counted
  /// something (a hook that was skipped); 0 for dense layers.
  std::vector<std::int64_t> uncovered_passes;
  /// The most assigned (layer, logical expert) pairs over every observed pass, most first
  /// (ties: lower layer, then lower expert); experts without assignments are left out.
  std::vector<HotExpert> hottest_experts;

  /// Names of the layers with uncovered passes, in layer order.
  std::vector<std::string> uncovered_layers() const;
};

/// Per-pass balancedness as SGLang computes it (moestat/gpu_loads.hpp), where live metrics
/// have always named it.
using moestat::pass_balancedness;

/// Live metrics of one recorder: each update reads the passes recorded since the previous one
/// (Recorder::gpu_loads_since: only those, already reduced to GPU loads, balancedness and
/// logical totals) and folds them into the rolling state, so its cost follows the new passes,
/// not the window. Needs a pass-window mode (stat, stat_approx, per_pass). The recording stream
/// is never synchronised (the CUDA recorder reduces the new passes on the device and copies
/// the result on a stream of its own); passes that leave the window between two updates are
/// counted in `passes_unobserved`, so update at least once per window of passes.
///
/// Thread-safe: update() may be called from any thread (an HTTP server's, say) while the
/// recorder's passes run. The recorder must outlive this object.
class LiveMetrics {
 public:
  /// moestat::Error when the recorder keeps no pass window, num_gpus does not divide P,
  /// layer_names is not empty and not of length L, or num_hottest_experts is negative.
  explicit LiveMetrics(const Recorder& recorder, LiveMetricsOptions options = {});

  /// Folds the passes recorded since the last update and returns the metrics.
  /// After a restart of the recorder (start(), reset()) every pass it holds is new.
  MetricValues update();

 private:
  /// Folds one pass: its id, its GPU loads [L, G] and its balancedness.
  void fold_pass(std::int64_t pass_id, const std::int64_t* gpu_loads, double balancedness);

  const Recorder& recorder_;
  std::int64_t num_hottest_experts_;
  std::mutex mutex_;
  std::uint64_t generation_ = 0;              ///< The recorder's generation at the last update.
  std::int64_t next_arrival_ = 0;             ///< Arrival of the first pass not read yet.
  std::deque<double> history_;                ///< Balancedness of the latest passes, oldest first.
  std::vector<std::int64_t> logical_totals_;  ///< [L, E] over every observed pass.
  MetricValues values_;
};

}  // namespace moestat::online
