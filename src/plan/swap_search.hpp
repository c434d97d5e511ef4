// Equal-cardinality packing under several load scenarios: a greedy start and a local search
// of pairwise swaps. The moestat planner packs expert groups onto nodes and replicas onto
// GPUs with it.
#pragma once

#include <cstdint>
#include <moestat/plan/eplb.hpp>
#include <span>
#include <vector>

namespace moestat::plan::detail {

/// Items to pack into bins of equal capacity. `weights` is item-major [num_items,
/// num_scenarios]: item i weighs weights[i * S + s] in scenario s.
struct PackingProblem {
  std::int32_t num_scenarios = 1;
  std::int32_t num_items = 0;
  std::int32_t num_bins = 1;  ///< num_items must be a multiple of num_bins.
  std::span<const double> weights;
  ScenarioObjective objective = ScenarioObjective::kWorstCase;

  std::int32_t capacity() const { return num_items / num_bins; }
};

/// What the search minimises: the objective over scenarios of the heaviest bin, then (to
/// move across plateaus) the sum of squared bin loads.
struct PackingScore {
  double objective = 0.0;
  double squares = 0.0;
  /// Strictly better, with a relative tolerance so rounding never counts as progress.
  bool better_than(const PackingScore& other) const;
};

/// Bin loads [num_bins, S] and the score of `bin_of` ([num_items] bin index per item).
PackingScore score_packing(const PackingProblem& problem, std::span<const std::int32_t> bin_of);

/// Heaviest item first (by its largest scenario weight), each into the bin with room whose
/// heaviest scenario load after adding it is smallest. Returns bin_of [num_items].
std::vector<std::int32_t> greedy_packing(const PackingProblem& problem);

/// Improves `bin_of` in place by swapping items between bins while the score drops: each
/// step takes, for the first (critical bin, partner bin) pair that admits one, the best swap
/// between a bin that is heaviest in some scenario and a partner, lightest partners first.
/// At most `max_moves` swaps. The score never rises.
void improve_by_swaps(const PackingProblem& problem, std::span<std::int32_t> bin_of,
                      std::int64_t max_moves);

}  // namespace moestat::plan::detail
