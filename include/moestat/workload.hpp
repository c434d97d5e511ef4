// Synthetic routing workloads: what a MoE router would hand the recorder, deterministic per
// seed, for the CLI demo, tests and benchmarks.
#pragma once

#include <cstdint>
#include <memory>
#include <moestat/placement.hpp>
#include <moestat/topology.hpp>
#include <span>
#include <string_view>
#include <vector>

namespace moestat::workload {

namespace detail {
struct LayerLaw;
}  // namespace detail

/// DeepSeek-V3-like: 61 decoder layers of which the first 3 are dense, 256 experts on 288
/// physical slots (32 redundant) over 32 ranks of 9 slots, top-8, 8 expert groups.
ModelTopology deepseek_like_topology();

/// How expert popularity is drawn: a log-normal law per layer with a depth profile, expert
/// groups, a few hot experts, different prefill and decode popularity, and drift over time.
/// For MoE layer l at depth fraction f in [0, 1] (over MoE layers), expert e of group g:
///   log weight = sigma_l * (sqrt(group_share) * z[g] + sqrt(1 - group_share) * z[e])
///                + hot_boost * [e is one of the layer's num_hot hot experts]
///   sigma_l    = interpolate(sigma_knots, f) * exp(sigma_jitter * N(0, 1))
///   z          = sqrt(phase_correlation) * shared + sqrt(1 - phase_correlation) * phase part
/// where `shared` and each phase's part are standard normal vectors that drift: anchors
/// every `drift_passes` passes form a chain whose neighbours correlate `drift_correlation`,
/// interpolated in between. The defaults are a plain log-normal law that neither drifts nor
/// differs by phase; presets() holds the laws fitted to real traffic (docs/workload.md).
struct PopularityModel {
  /// Spread (standard deviation of log weight) at evenly spaced depths, first to last MoE
  /// layer; at least one knot.
  std::vector<double> sigma_knots = {0.6};
  double sigma_jitter = 0.0;  ///< Per-layer log-normal jitter of the spread.
  double group_share = 0.0;   ///< Share of log-weight variance common to an expert group.
  /// Groups a token may route to (DeepSeek's topk_group); 0 = no limit.
  std::int64_t group_limit = 0;
  std::int64_t num_hot = 0;        ///< Hot experts per layer (fixed over time and phase).
  double hot_boost = 0.0;          ///< Added to a hot expert's log weight.
  double phase_correlation = 1.0;  ///< Of prefill and decode z at the same time.
  double drift_correlation = 1.0;  ///< Of z one drift period apart.

  /// Throws moestat::Error naming the bad field (for this topology's experts and groups).
  void validate(const ModelTopology& topology) const;
};

/// A built-in workload: a model's shape and its popularity law.
struct Preset {
  std::string_view name;         ///< "deepseek-v3", "mixtral-8x7b", "qwen3-moe".
  std::string_view description;  ///< One line: the model and where the law comes from.
  ModelTopology topology;
  PopularityModel popularity;
  /// The deployment a placement is planned for: expert groups (DeepSeek's n_group) and the
  /// nodes the topology's ep_size GPUs sit on; groups % nodes == 0 plans hierarchically.
  std::int64_t expert_groups = 1;
  std::int64_t nodes = 1;
};

/// Every built-in preset, in a fixed order.
std::span<const Preset> presets();
/// The preset called `name`; moestat::Error listing the known names otherwise.
const Preset& preset(std::string_view name);

struct SyntheticOptions {
  std::uint64_t seed = 1;
  std::int64_t num_passes = 64;
  /// Share of passes that are prefill batches; the rest are decode batches.
  double prefill_fraction = 0.25;
  std::int64_t min_decode_tokens = 1;
  std::int64_t max_decode_tokens = 64;
  std::int64_t min_prefill_tokens = 512;
  std::int64_t max_prefill_tokens = 4096;
  /// Probability that an id of a real token is -1 (a dropped entry).
  double minus_one_rate = 1e-5;
  /// Probability that an id of a real token is >= P (a fused shared-expert column, say).
  double out_of_range_rate = 1e-5;
  /// Passes per drift period (PopularityModel::drift_correlation). 1000 is SGLang's default
  /// rebalance interval: a planner that rebalances that often sees this much change. The
  /// generator keeps num_passes / drift_passes + 2 anchors of E + G doubles per MoE layer
  /// and phase.
  std::int64_t drift_passes = 1000;

  /// Throws moestat::Error naming the bad option.
  void validate() const;
};

/// One forward pass: a topk tensor of `num_rows` rows of which the first `num_valid_tokens`
/// are real tokens; the rest pad the batch to a captured-graph size and hold garbage ids.
struct PassBatch {
  std::int64_t pass_id = 0;
  std::int64_t num_rows = 0;
  std::int64_t num_valid_tokens = 0;
  bool prefill = false;
};

/// Pass `pass`'s phase.
enum class Phase : std::uint8_t { kPrefill, kDecode };

/// A skewed routing workload: per-layer expert popularity drawn from a PopularityModel,
/// mixed decode and prefill batches padded to graph sizes, top-k distinct experts per
/// token (within `group_limit` expert groups) mapped to one of their physical replicas,
/// and a few -1 and out-of-range ids. Every batch and every layer's ids depend only on
/// (seed, pass, layer), so they can be generated in any order, or twice, with the same
/// result.
class SyntheticWorkload {
 public:
  /// Throws moestat::Error on an invalid topology, model or options.
  SyntheticWorkload(ModelTopology topology, PopularityModel popularity, SyntheticOptions options);
  /// The preset's topology and popularity law.
  SyntheticWorkload(const Preset& preset, SyntheticOptions options);

  const ModelTopology& topology() const noexcept { return topology_; }
  const SyntheticOptions& options() const noexcept { return options_; }
  const PopularityModel& popularity_model() const noexcept { return model_; }
  /// [L, E] the popularity at pass 0, prefill and decode averaged; zero for dense layers.
  /// The version-1 placement replicates by it.
  std::span<const double> popularity() const noexcept { return popularity_; }
  /// Writes [E] the probability that a draw of a `phase` token in pass `pass` picks each
  /// logical expert of MoE layer `layer` (before the distinct-experts and group rules).
  void popularity(std::int64_t pass, std::int64_t layer, Phase phase, std::span<double> out) const;
  /// Version 1: every layer's P - E redundant slots replicate its most popular experts
  /// (greedily by popularity / replicas), slots shuffled; dense layers are trivial.
  const Placement& placement() const noexcept { return placement_; }

  /// The shape of pass `pass` (0-based, < num_passes); its pass_id is `pass`.
  PassBatch batch(std::int64_t pass) const;

  /// Writes the router output of MoE layer `layer` in pass `pass`.
  /// `physical_ids`: [batch(pass).num_rows, top_k] int32 row-major, caller-owned: physical
  ///   slot ids of real tokens, -1 or ids >= P at the configured rates, garbage (any value in
  ///   [-1, P + 32)) in padding rows.
  /// `logical_ids`: empty, or the same shape: the logical expert each real-token entry was
  ///   drawn as before it was mapped to a replica; -1 for -1, out-of-range and padding entries.
  ///   This is the generator's own record, independent of the placement lookup.
  void fill_topk(std::int64_t pass, std::int64_t layer, std::span<std::int32_t> physical_ids,
                 std::span<std::int32_t> logical_ids = {}) const;

 private:
  ModelTopology topology_;
  SyntheticOptions options_;
  PopularityModel model_;
  /// Per layer (empty for dense layers); immutable and shared by copies.
  std::shared_ptr<const std::vector<detail::LayerLaw>> laws_;
  std::vector<double> popularity_;  // [L, E] at pass 0, phases averaged
  Placement placement_;
  std::vector<std::int32_t> replica_offsets_;  // [L, E + 1] into replica_slots_ of the layer
  std::vector<std::int32_t> replica_slots_;    // [L, P] physical slots grouped by logical expert
};

}  // namespace moestat::workload
