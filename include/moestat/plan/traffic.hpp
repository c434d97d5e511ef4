// Synthetic traffic for the rebalance simulator: a scenario is a sequence of phases, each a
// workload's per-expert distribution from which forward passes are drawn with noise.
//
//   plan::TrafficPhase decode = plan::make_phase("decode", loads, {.num_passes = 3000});
//   plan::TrafficScenario s{.name = "steady", .phases = {decode}};
//   plan::TrafficSampler sampler(s, /*seed=*/1);
//   plan::ExpertLoads pass;
//   while (sampler.next(pass)) { /* pass: [L, E] whole token assignments of one pass */ }
#pragma once

#include <cstdint>
#include <moestat/plan/loads.hpp>
#include <moestat/rng.hpp>
#include <string>
#include <vector>

namespace moestat::plan {

/// How passes of a phase are drawn from its distribution.
struct PassShape {
  std::int64_t num_passes = 1000;       ///< Passes the phase lasts.
  std::int64_t tokens_per_pass = 8192;  ///< Tokens of one pass (the whole deployment's batch).
  std::int64_t top_k = 8;               ///< Experts each token is routed to.
  /// Per pass, each expert's share is multiplied by exp(jitter z - jitter^2 / 2), z standard
  /// normal (then renormalised): popularity that drifts from pass to pass beyond the
  /// sampling noise of a finite batch.
  double jitter = 0.05;
};

/// One stretch of stationary traffic: `shares` [L, E] sums to 1 on every loaded layer (0 on
/// dense layers, which stay empty).
struct TrafficPhase {
  std::string name{};
  ExpertLoads shares{};
  PassShape shape{};
};

/// `loads` (any non-negative [L, E], e.g. a statistics file's counts) normalised per layer
/// into a phase. moestat::Error on invalid loads or a shape with a size below 1 or a
/// negative or non-finite jitter.
TrafficPhase make_phase(std::string name, const ExpertLoads& loads, const PassShape& shape);

/// Phases replayed in order; all of one [L, E] shape.
struct TrafficScenario {
  std::string name{};
  std::string description{};
  std::vector<TrafficPhase> phases{};

  std::int64_t num_passes() const;
  /// moestat::Error unless there is at least one phase and all share one shape.
  void validate() const;
};

/// Standard normal draws from a seeded Rng (Box-Muller, both of each pair used), the same
/// sequence for a seed with any standard library.
class NormalDraws {
 public:
  explicit NormalDraws(std::uint64_t seed) noexcept : rng_(seed) {}
  double next();

 private:
  Rng rng_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

/// Draws a scenario's passes in order, deterministically for a seed. A pass's counts of a
/// layer with `n = tokens_per_pass * top_k` assignments: with p the jittered share, each
/// expert gets round(max(0, n p + sqrt(n p (1 - p)) z)), the normal approximation of a
/// multinomial draw (n p is in the hundreds for real batches, where it is close).
class TrafficSampler {
 public:
  TrafficSampler(const TrafficScenario& scenario, std::uint64_t seed);

  /// Writes the next pass into `pass` ([L, E], resized as needed) and returns true; false
  /// once the scenario is over.
  bool next(ExpertLoads& pass);
  /// Passes drawn so far.
  std::int64_t passes_drawn() const noexcept { return drawn_; }
  /// Index of the phase the last drawn pass came from.
  std::int64_t phase_index() const noexcept { return phase_; }

 private:
  const TrafficScenario& scenario_;
  NormalDraws normal_;
  std::int64_t drawn_ = 0, phase_ = 0, drawn_in_phase_ = 0;
  std::vector<double> jittered_;
};

}  // namespace moestat::plan
