// Synthetic routing workloads: what a MoE router would hand the recorder, deterministic per
// seed, for the CLI demo, tests and benchmarks.
#pragma once

#include <cstdint>
#include <moestat/placement.hpp>
#include <moestat/topology.hpp>
#include <span>
#include <vector>

namespace moestat::workload {

/// xoshiro256** seeded through SplitMix64. Used instead of <random>'s distributions, whose
/// output differs between standard libraries, so a seed gives the same workload everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) noexcept;
  std::uint64_t next() noexcept;
  /// Uniform in [0, bound); bound must be positive.
  std::uint64_t below(std::uint64_t bound) noexcept;
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept;

 private:
  std::uint64_t state_[4];
};

/// DeepSeek-V3-like: 61 decoder layers of which the first 3 are dense, 256 experts on 288
/// physical slots (32 redundant) over 32 ranks of 9 slots, top-8.
ModelTopology deepseek_like_topology();

struct SyntheticOptions {
  std::uint64_t seed = 1;
  std::int64_t num_passes = 64;
  /// Share of passes that are prefill batches; the rest are decode batches.
  double prefill_fraction = 0.25;
  std::int64_t min_decode_tokens = 1;
  std::int64_t max_decode_tokens = 64;
  std::int64_t min_prefill_tokens = 512;
  std::int64_t max_prefill_tokens = 4096;
  /// Per-layer Zipf exponents are drawn from [min, max]; 0.3-0.7 gives hottest experts of
  /// about 4-14x the mean load at top-8 of 256, the range seen in DeepSeek-V3 production.
  double min_zipf_exponent = 0.3;
  double max_zipf_exponent = 0.7;
  /// Probability that an id of a real token is -1 (a dropped entry).
  double minus_one_rate = 1e-5;
  /// Probability that an id of a real token is >= P (a fused shared-expert column, say).
  double out_of_range_rate = 1e-5;

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

/// A skewed routing workload: per-layer Zipf-like expert popularity with a different hot set
/// in every layer, mixed decode and prefill batches padded to graph sizes, top-k distinct
/// experts per token mapped to one of their physical replicas, and a few -1 and
/// out-of-range ids. Every batch and every layer's ids depend only on (seed, pass, layer),
/// so they can be generated in any order, or twice, with the same result.
class SyntheticWorkload {
 public:
  /// Throws moestat::Error on an invalid topology or options.
  SyntheticWorkload(ModelTopology topology, SyntheticOptions options);

  const ModelTopology& topology() const noexcept { return topology_; }
  const SyntheticOptions& options() const noexcept { return options_; }
  /// [L, E] probability that a token's draw picks each logical expert; zero for dense layers.
  std::span<const double> popularity() const noexcept { return popularity_; }
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
  std::vector<double> popularity_;  // [L, E]
  // Walker alias tables per layer, [L, E]: O(1) draws.
  std::vector<double> alias_probability_;
  std::vector<std::int32_t> alias_index_;
  Placement placement_;
  std::vector<std::int32_t> replica_offsets_;  // [L, E + 1] into replica_slots_ of the layer
  std::vector<std::int32_t> replica_slots_;    // [L, P] physical slots grouped by logical expert
};

}  // namespace moestat::workload
