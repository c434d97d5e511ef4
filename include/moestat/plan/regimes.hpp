// Traffic regimes in a window of counts: stretches of consecutive passes whose expert mix
// stays within the window's own pass-to-pass noise, and which of them are the same traffic
// returning. The rebalance advisor plans for the regime running now, or, when that regime
// has run before in the window, for every regime of the cycle since.
//
//   plan::Regimes r = plan::find_regimes(window);
//   const plan::RegimeSegment& now = r.segments.back();
//   if (r.current_recurs()) { /* the traffic returned: plan for the whole cycle */ }
#pragma once

#include <cstdint>
#include <moestat/counts.hpp>
#include <moestat/plan/loads.hpp>
#include <vector>

namespace moestat::plan {

struct RegimeOptions {
  /// Two mixes differ when their distance exceeds this multiple of the window's typical
  /// distance between consecutive chunks of passes (the median: the noise of one chunk).
  double noise_multiple = 4.0;
  /// ... and this floor: a mix that moved fewer than this share of the assignments is the
  /// same traffic, however quiet the passes are. In [0, 1].
  double min_distance = 0.05;
};

/// Consecutive passes of one regime: window passes [first, end), `passes` those with load.
struct RegimeSegment {
  std::int64_t first = 0;
  std::int64_t end = 0;
  std::vector<std::int64_t> passes{};  ///< Loaded passes, oldest first; at least one.
  /// Regimes are numbered 0, 1, ... in order of first appearance; equal numbers are the
  /// same traffic.
  std::int64_t regime = 0;
};

struct Regimes {
  /// Oldest first; empty only for a window without a loaded pass. The last is the traffic
  /// running now.
  std::vector<RegimeSegment> segments{};
  /// The distance above which two mixes are different traffic, at the scale that cut the
  /// window (RegimeOptions).
  double threshold = 0.0;

  /// The current regime also ran in an earlier segment of the window.
  bool current_recurs() const;
  /// Index of the first segment of the cycle that ends now: the earliest segment of the
  /// current regime (the last segment when the regime does not recur).
  std::size_t cycle_start() const;
};

/// How far apart two mixes of expert loads are: the mean, over layers loaded in both, of the
/// total variation distance between the layer's per-expert shares (the share of assignments
/// that would have to move to another expert), in [0, 1]; 0 when no layer is loaded in both.
/// moestat::Error on loads of different shapes.
double mix_distance(const ExpertLoads& a, const ExpertLoads& b);

/// Splits `window`'s loaded passes into regimes. The passes are taken in chunks of 1, then
/// 2, 4, 8, ... consecutive passes (aligned to the newest, while there are at least 6
/// chunks), and the finest scale that finds a change cuts the window: noisy passes hide a
/// change that sums of a few show. At a scale, the threshold is the options' multiple of the
/// median distance between consecutive chunks (at least min_distance); a new segment
/// starts at a chunk whose mix is farther than that from the running segment's summed mix
/// when the next chunk is too (one deviating chunk is noise: it stays in the segment, out of
/// its mix; the newest chunk alone cannot start a segment). Each segment then takes the
/// number of the earliest segment whose summed mix is within the threshold of its own, or a
/// new one. Deterministic. moestat::Error on an invalid window or options.
Regimes find_regimes(const CountWindow& window, const RegimeOptions& options = {});

}  // namespace moestat::plan
